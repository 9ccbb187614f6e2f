//! Layout helpers of the host convolution. The config operand itself
//! ([`ConvConfig`], its version, encoding and decoding) is the host-kernel
//! ABI, defined once in `hlobridge-host-abi` with the rewrite that emits it.

pub use hlobridge_host_abi::conv::{output_size, ConvConfig};

pub(super) fn row_major_strides(dims: &[i64]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1] as usize;
    }
    s
}
