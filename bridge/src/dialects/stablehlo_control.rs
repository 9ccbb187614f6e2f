//! Custom assembly formats of the `stablehlo_control` ops.

use super::OpFormat;

/// Formats registered by this file.
pub(crate) const FORMATS: &[OpFormat] = &[];
