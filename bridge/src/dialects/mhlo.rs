//! Custom assembly formats of the `mhlo` ops.

use super::OpFormat;

/// Formats registered by this file.
pub(crate) const FORMATS: &[OpFormat] = &[];
