//! Weight-gradient-form convolutions as oneDNN backward-weights
//! convolutions ([`super::super::onednn`]), when the library is loaded.
//!
//! A weight gradient reaches the kernel as a convolution whose window is
//! the output gradient's map and whose result is the forward window (`[f,
//! b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f]` from torch_xla and JAX). Read back
//! as the forward convolution it differentiates, with the lhs `X`, the rhs
//! `dY` and the result `dW`:
//!
//! - `X`'s images are the lhs *feature* dim and its channels the lhs
//!   *batch* dim; `dY`'s images are the rhs input-feature dim and its
//!   channels the rhs output-feature dim; `dW`'s output channels are the
//!   result feature dim and its input channels the result batch dim;
//! - the forward stride is the rhs dilation, the forward dilation the
//!   window stride, and the padding the same (the high side trimmed to
//!   what the window reaches; negative padding crops the input);
//! - `batch_group_count = G` is a grouped forward convolution (depthwise
//!   when every group has one input channel): group `g` reads input
//!   channels `g·C/G..`, and its result features are the `g`-th block of
//!   `O/G`.
//!
//! That is exactly `dW[o, c, k] = Σ_{n, p} dY[n, o, p] · X[n, c, p·s + k·d
//! − pad]`, whatever the convolution's own purpose, so the mapping is exact
//! for any such convolution; the kernel takes it only in weight-gradient
//! form (at least as many window taps as result positions), where
//! oneDNN's backward-weights kernels are the right tool. Each operand is
//! described to oneDNN with its own strides (any dimension order), the
//! primitive picks its layouts, and reorders between the two run inside
//! the call. Primitives are built once per shape and layout and kept for
//! the process.
//!
//! Why: XLA:CPU's own convolution ran ResNet-50's weight gradients at
//! about half of eager PyTorch's speed, which is oneDNN's backward-weights
//! convolution (docs/host_conv.md, "oneDNN backward weights").

use super::config::{plain_nonempty, row_major_strides, spatial_sizes};
use super::onednn_conv::{self, Direction, Key};
use super::ConvConfig;
use crate::host_kernels::frame::BufferView;

/// One call's mapping: the key, and where the (possibly cropped) input
/// starts.
struct Mapped {
    key: Key,
    src_offset: usize,
}

/// Calls run on oneDNN since the process started (for tests: the routing
/// must not silently fall back).
static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many weight gradients this process has run on oneDNN.
pub fn calls() -> usize {
    CALLS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Maps the convolution onto a backward-weights one, or `None` when it is
/// not in weight-gradient form or oneDNN cannot express it.
fn map(cfg: &ConvConfig, lhs: &[i64], rhs: &[i64], out: &[i64]) -> Option<Mapped> {
    let nsp = cfg.spatial();
    if !(1..=3).contains(&nsp)
        || cfg.groups != 1
        || cfg.batch_groups < 1
        || !plain_nonempty(cfg, lhs, rhs, out)
    {
        return None;
    }
    let g = cfg.batch_groups;
    let (c, n) = (lhs[cfg.lhs[0]], lhs[cfg.lhs[1]]);
    let (ni, o) = (rhs[cfg.rhs[0]], rhs[cfg.rhs[1]]);
    let (cg, of) = (out[cfg.out[0]], out[cfg.out[1]]);
    if n != ni || of != o || c != cg * g || o % g != 0 {
        return None;
    }
    let (ins, window, res) = spatial_sizes(cfg, lhs, rhs, out)?;
    let taps: i64 = window.iter().product();
    let positions: i64 = res.iter().product();
    if taps < positions {
        return None;
    }
    let (ls, rs, ys) = (
        row_major_strides(lhs),
        row_major_strides(rhs),
        row_major_strides(out),
    );
    let st = |v: &[usize], i: usize| v[i] as i64;
    let mut src_dims = vec![n, c];
    let mut src_strides = vec![st(&ls, cfg.lhs[1]), st(&ls, cfg.lhs[0])];
    let mut dst_dims = vec![n, o];
    let dst_strides_head = vec![st(&rs, cfg.rhs[0]), st(&rs, cfg.rhs[1])];
    let (mut w_dims, mut w_strides) = if g == 1 {
        (vec![o, c], vec![st(&ys, cfg.out[1]), st(&ys, cfg.out[0])])
    } else {
        let yf = st(&ys, cfg.out[1]);
        (
            vec![g, o / g, cg],
            vec![(o / g) * yf, yf, st(&ys, cfg.out[0])],
        )
    };
    let mut dst_strides = dst_strides_head;
    let (mut strides, mut dilates, mut pad_l, mut pad_r) = (vec![], vec![], vec![], vec![]);
    let mut src_offset = 0usize;
    for i in 0..nsp {
        let (s, d) = (cfg.rhs_dilation[i], cfg.stride[i]);
        let (ho, k) = (window[i], res[i]);
        let sp = st(&ls, cfg.lhs[2 + i]);
        if s < 1 || d < 1 {
            return None;
        }
        let reach = (k - 1) * d + (ho - 1) * s + 1;
        let (h, pl, pr, skip) = onednn_conv::input_extent(ins[i], cfg.pad_lo[i], reach, sp)?;
        src_offset += skip;
        src_dims.push(h);
        src_strides.push(sp);
        dst_dims.push(ho);
        dst_strides.push(st(&rs, cfg.rhs[2 + i]));
        w_dims.push(k);
        w_strides.push(st(&ys, cfg.out[2 + i]));
        strides.push(s);
        dilates.push(d - 1);
        pad_l.push(pl);
        pad_r.push(pr);
    }
    Some(Mapped {
        key: Key {
            direction: Direction::BackwardWeights,
            src: (src_dims, src_strides),
            weights: (w_dims, w_strides),
            dst: (dst_dims, dst_strides),
            strides,
            dilates,
            pad_l,
            pad_r,
        },
        src_offset,
    })
}

/// The implementation oneDNN chooses for this f32 convolution, or why it
/// is not taken (for tests and benches).
pub fn implementation(
    cfg: &ConvConfig,
    lhs: &[i64],
    rhs: &[i64],
    out: &[i64],
) -> Result<String, String> {
    let m = map(cfg, lhs, rhs, out);
    onednn_conv::implementation(
        m.as_ref().map(|m| &m.key),
        "not a weight-gradient form oneDNN takes",
    )
}

/// Runs the f32 convolution on oneDNN if it is loaded and takes it:
/// `Ok(true)` when the result is written, `Ok(false)` when the caller must
/// run it itself.
///
/// # Safety
/// `x`, `w`, `y` must be row-major f32 buffers of their dims, and `y` must
/// not overlap `x` or `w`.
pub(crate) unsafe fn run(
    cfg: &ConvConfig,
    x: &BufferView<'_>,
    w: &BufferView<'_>,
    y: &BufferView<'_>,
) -> Result<bool, String> {
    let Some(m) = map(cfg, x.dims, w.dims, y.dims) else {
        return Ok(false);
    };
    let Some(p) = onednn_conv::planned(&m.key) else {
        return Ok(false);
    };
    // SAFETY: the caller's buffers hold the operands as `map`'s strides
    // describe them (src: the lhs, past the crop offset `map` keeps within
    // it; diff_dst: the rhs; diff_weights: the result).
    let ran = unsafe { onednn_conv::execute_views(&p, x, m.src_offset, w.data, y)? };
    if ran {
        CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(ran)
}
