//! Layout and shape helpers of the host convolution. The config operand itself
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

/// The spatial sizes `(input, window, result)` of a convolution whose
/// operands have `lhs`, `rhs` and `out` dims (ranks already checked), or
/// `None` when a result size is not the one `cfg` gives for its input and
/// window.
pub(super) type SpatialSizes = (Vec<i64>, Vec<i64>, Vec<i64>);

pub(super) fn spatial_sizes(
    cfg: &ConvConfig,
    lhs: &[i64],
    rhs: &[i64],
    out: &[i64],
) -> Option<SpatialSizes> {
    let nsp = cfg.spatial();
    let ins: Vec<i64> = (0..nsp).map(|i| lhs[cfg.lhs[2 + i]]).collect();
    let ks: Vec<i64> = (0..nsp).map(|i| rhs[cfg.rhs[2 + i]]).collect();
    let os: Vec<i64> = (0..nsp).map(|i| out[cfg.out[2 + i]]).collect();
    for i in 0..nsp {
        let want = output_size(
            ins[i],
            ks[i],
            cfg.stride[i],
            cfg.pad_lo[i],
            cfg.pad_hi[i],
            cfg.lhs_dilation[i],
            cfg.rhs_dilation[i],
        );
        if want != Some(os[i]) {
            return None;
        }
    }
    Some((ins, ks, os))
}

/// Writes the row-major multi-index of flat position `x` over `sizes`
/// into `idx`.
pub(super) fn unravel(mut x: usize, sizes: &[i64], idx: &mut [i64]) {
    for i in (0..sizes.len()).rev() {
        let s = sizes[i] as usize;
        idx[i] = (x % s) as i64;
        x /= s;
    }
}

/// Whether a convolution has the plain form both weight-gradient paths take:
/// no lhs dilation, no window reversal, ranks that match the config, and
/// no empty dimension.
pub(super) fn plain_nonempty(cfg: &ConvConfig, lhs: &[i64], rhs: &[i64], out: &[i64]) -> bool {
    let rank = cfg.spatial() + 2;
    cfg.lhs_dilation.iter().all(|&d| d == 1)
        && cfg.reverse.iter().all(|&r| !r)
        && lhs.len() == rank
        && rhs.len() == rank
        && out.len() == rank
        && lhs.iter().chain(rhs).chain(out).all(|&d| d > 0)
}
