//! The host-kernel ABI: what the rewrite that emits host-kernel custom calls
//! (`hlobridge::lower::host_gemm` / `host_conv`, in `bridge/core`) and the
//! kernels that XLA runs for them (`pjrt_client::host_kernels`) must agree
//! on, defined once: the custom-call target names, the GEMM targets'
//! operand transpositions, and the convolution's config operand (its
//! version, layout, encoding and checked decoding).
//!
//! A leaf crate with no dependencies, so both sides (which do not depend on
//! each other) can use it. Changing anything here changes the programs the
//! rewrite emits: bump [`conv::CONFIG_VERSION`] for a layout change, and the
//! rewrites' `REWRITE_VERSION` (compile-cache keys) for any change.

pub mod conv;
pub mod gemm;
