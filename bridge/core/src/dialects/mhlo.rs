//! Custom assembly formats of the `mhlo` ops.
//!
//! None are registered: no `mhlo` op appears in pretty form in the corpus
//! (jax 0.10.2, torch_xla 2.9 and torchax emit StableHLO; `mhlo.*` shows up
//! only as attributes such as `mhlo.sharding` or `mhlo.num_partitions`,
//! which need no format). An `mhlo` op written in generic form parses and
//! prints in generic form.

use super::OpFormat;

/// Formats registered by this file.
pub(crate) const FORMATS: &[OpFormat] = &[];
