//! Custom assembly formats of the `stablehlo_data` ops.

use super::OpFormat;

/// Formats registered by this file.
pub(crate) const FORMATS: &[OpFormat] = &[];
