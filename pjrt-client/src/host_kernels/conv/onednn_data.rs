//! Forward-form convolutions (a forward, or an input gradient) as oneDNN
//! forward or backward-data convolutions ([`super::onednn_conv`]), when
//! the library is loaded.
//!
//! The host kernel gets a convolution `out = conv(lhs, rhs)` with
//! `out[n, o, h] = Σ_{i, t} lhs_dil[n, g·I + i, h·s + t·d − pl] ·
//! R[i, o, t]` (`lhs_dil` the lhs dilated by `ld` and padded, `R` the rhs
//! with its window reversed where the config says so, `g` the group of
//! `o`). Two mappings:
//!
//! - **No lhs dilation: a forward convolution.** `src` is the lhs,
//!   `weights` the rhs as `[O, I, k...]` (grouped: `[G, O/G, I, k...]`),
//!   `dst` the result; stride, dilation and padding carry over (negative
//!   padding crops the input; the high side is trimmed to what the window
//!   reaches: `onednn_conv::input_extent`, shared with `onednn_wgrad.rs`).
//! - **Lhs dilation `ld` (window stride 1): the input gradient of the
//!   forward convolution with stride `ld`.** The result is that forward's
//!   `diff_src`, the lhs its `diff_dst`, and its weights are
//!   `W[c, o, k] = R[c, o, K−1−k]` (output channels the rhs input
//!   features); its padding is `(K−1)·d − pl` (refused when negative), and
//!   the high side what the sizes give, floored at 0 where oneDNN's
//!   rounding still gives the same result size (a strided forward that
//!   did not read its input's last rows; those get zero gradient).
//!
//! Reversed windows (an input gradient's rhs arrives reversed, or the
//! config reverses it) cannot be described by strides, so such weights
//! are first copied, reversed, into a row-major buffer (the weights are
//! small next to the activations).
//!
//! Which are taken: every such convolution of at least [`MIN_WORK`]
//! multiply-adds without batch groups. The lowering decides which reach
//! the kernel: in a training program every f32 forward and input gradient
//! (`bridge/core/src/lower/host_conv/wgrad_host.rs`; the plugin's own
//! oneDNN thunk reordered each activation to and from channels-last at
//! about half the speed of this library's reorders to its blocked
//! layout), elsewhere depthwise forwards below the thunk's window sizes
//! (oneDNN's `jit_dw` kernels ran MobileNetV3-L's about twice as fast as
//! the host kernel's own loops, reorders included) and strided forwards'
//! input gradients. Grouped shapes oneDNN would run on a generic kernel
//! are refused ([`onednn_conv::plan`]) and keep the host kernel's loops.

use super::config::{row_major_strides, spatial_sizes};
use super::onednn_conv::{self, Direction, Key};
use super::ConvConfig;
use crate::host_kernels::frame::BufferView;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Fewest multiply-adds a convolution needs to be run on oneDNN here.
pub const MIN_WORK: i64 = 1 << 20;

/// How the rhs is copied into the weights buffer when a window dim is
/// reversed: the rhs strides in the weights' dim order, and which dims
/// are read backwards.
#[derive(Debug, Clone)]
struct Gather {
    strides: Vec<i64>,
    reverse: Vec<bool>,
}

/// One call's mapping.
struct Mapped {
    key: Key,
    /// Elements to skip at the lhs's start (negative low padding).
    lhs_offset: usize,
    gather: Option<Gather>,
}

static CALLS: AtomicUsize = AtomicUsize::new(0);

/// How many forward and input-gradient convolutions this process has run
/// on oneDNN.
pub fn calls() -> usize {
    CALLS.load(Ordering::Relaxed)
}

/// Maps the convolution, or `None` when it is not a form taken here.
fn map(cfg: &ConvConfig, lhs: &[i64], rhs: &[i64], out: &[i64]) -> Option<Mapped> {
    let nsp = cfg.spatial();
    let rank = nsp + 2;
    if !(1..=3).contains(&nsp)
        || cfg.batch_groups != 1
        || cfg.groups < 1
        || lhs.len() != rank
        || rhs.len() != rank
        || out.len() != rank
        || lhs.iter().chain(rhs).chain(out).any(|&d| d <= 0)
    {
        return None;
    }
    let g = cfg.groups;
    let (n, cl) = (lhs[cfg.lhs[0]], lhs[cfg.lhs[1]]);
    let (ri, o) = (rhs[cfg.rhs[0]], rhs[cfg.rhs[1]]);
    if out[cfg.out[0]] != n || out[cfg.out[1]] != o || cl != ri * g || o % g != 0 {
        return None;
    }
    let (ins, window, res) = spatial_sizes(cfg, lhs, rhs, out)?;
    let backward = cfg.lhs_dilation.iter().any(|&d| d > 1);
    let work = n * o * ri * window.iter().product::<i64>() * res.iter().product::<i64>();
    if work < MIN_WORK {
        return None;
    }
    let (ls, rs, ys) = (
        row_major_strides(lhs),
        row_major_strides(rhs),
        row_major_strides(out),
    );
    let st = |v: &[usize], i: usize| v[i] as i64;
    // The weights in oneDNN's order; forward: `[O, I]` (output channels
    // the rhs output features), backward data: `[C, O]` (output channels
    // the rhs input features).
    let (r_out, r_in) = (st(&rs, cfg.rhs[1]), st(&rs, cfg.rhs[0]));
    let (mut w_dims, mut w_strides) = match (backward, g) {
        (false, 1) => (vec![o, ri], vec![r_out, r_in]),
        (false, _) => (vec![g, o / g, ri], vec![(o / g) * r_out, r_out, r_in]),
        (true, 1) => (vec![ri, o], vec![r_in, r_out]),
        (true, _) => (vec![g, ri, o / g], vec![(o / g) * r_out, r_in, r_out]),
    };
    let mut reverse = vec![false; w_dims.len()];
    let lhs_op = (vec![n, cl], vec![st(&ls, cfg.lhs[0]), st(&ls, cfg.lhs[1])]);
    let out_op = (vec![n, o], vec![st(&ys, cfg.out[0]), st(&ys, cfg.out[1])]);
    let (mut lhs_dims, mut lhs_strides) = lhs_op;
    let (mut out_dims, mut out_strides) = out_op;
    let (mut strides, mut dilates, mut pad_l, mut pad_r) = (vec![], vec![], vec![], vec![]);
    let mut lhs_offset = 0usize;
    for i in 0..nsp {
        let (k, d) = (window[i], cfg.rhs_dilation[i]);
        let ext = (k - 1) * d + 1;
        w_dims.push(k);
        w_strides.push(st(&rs, cfg.rhs[2 + i]));
        let sp = st(&ls, cfg.lhs[2 + i]);
        if backward {
            // oneDNN's src is the result (`H`), its dst the lhs (`Ho`).
            let (s, big_h, small_h) = (cfg.lhs_dilation[i], res[i], ins[i]);
            if cfg.stride[i] != 1 || s < 1 || d < 1 {
                return None;
            }
            let pl = ext - 1 - cfg.pad_lo[i];
            if pl < 0 {
                return None;
            }
            let mut pr = (small_h - 1) * s + ext - big_h - pl;
            if pr < 0 {
                // oneDNN's result size rounds down: unread last rows.
                if big_h + pl - ext < 0 || (big_h + pl - ext) / s + 1 != small_h {
                    return None;
                }
                pr = 0;
            }
            reverse.push(!cfg.reverse[i] && k > 1);
            lhs_dims.push(small_h);
            lhs_strides.push(sp);
            out_dims.push(big_h);
            out_strides.push(st(&ys, cfg.out[2 + i]));
            strides.push(s);
            pad_l.push(pl);
            pad_r.push(pr);
        } else {
            let (s, ho) = (cfg.stride[i], res[i]);
            if s < 1 || d < 1 {
                return None;
            }
            let reach = (ho - 1) * s + ext;
            let (h, pl, pr, skip) = onednn_conv::input_extent(ins[i], cfg.pad_lo[i], reach, sp)?;
            lhs_offset += skip;
            reverse.push(cfg.reverse[i] && k > 1);
            lhs_dims.push(h);
            lhs_strides.push(sp);
            out_dims.push(ho);
            out_strides.push(st(&ys, cfg.out[2 + i]));
            strides.push(s);
            pad_l.push(pl);
            pad_r.push(pr);
        }
        dilates.push(d - 1);
    }
    let gather = reverse.iter().any(|&r| r).then(|| {
        let g = Gather {
            strides: w_strides.clone(),
            reverse,
        };
        w_strides = row_major_strides(&w_dims)
            .into_iter()
            .map(|v| v as i64)
            .collect();
        g
    });
    let (lhs_op, out_op) = ((lhs_dims, lhs_strides), (out_dims, out_strides));
    let key = if backward {
        Key {
            direction: Direction::BackwardData,
            src: out_op,
            weights: (w_dims, w_strides),
            dst: lhs_op,
            strides,
            dilates,
            pad_l,
            pad_r,
        }
    } else {
        Key {
            direction: Direction::Forward,
            src: lhs_op,
            weights: (w_dims, w_strides),
            dst: out_op,
            strides,
            dilates,
            pad_l,
            pad_r,
        }
    };
    Some(Mapped {
        key,
        lhs_offset,
        gather,
    })
}

/// Copies the rhs at `src` into the row-major buffer `dst` of `dims`,
/// reading `src` with `g`'s strides and reversing its flagged dims. The
/// source offset follows the destination index as an odometer (an add per
/// element: the weights of a 512-channel 3×3 are 2.4 M elements in runs of
/// 3).
///
/// # Safety
/// `src` must hold every element `g`'s strides reach over `dims`; `dst`
/// must hold `dims`' product of f32s.
unsafe fn gather(src: *const f32, dims: &[i64], g: &Gather, dst: *mut f32) {
    let rank = dims.len();
    let (mut off, mut step) = (0i64, vec![0i64; rank]);
    for j in 0..rank {
        if g.reverse[j] {
            off += (dims[j] - 1) * g.strides[j];
            step[j] = -g.strides[j];
        } else {
            step[j] = g.strides[j];
        }
    }
    let total = dims.iter().product::<i64>() as usize;
    let mut idx = vec![0i64; rank];
    for i in 0..total {
        // SAFETY: the caller's contract: `off` is the source offset of
        // destination index `i`, within `src`; `i` is within `dst`.
        unsafe { *dst.add(i) = *src.offset(off as isize) };
        for j in (0..rank).rev() {
            idx[j] += 1;
            off += step[j];
            if idx[j] < dims[j] {
                break;
            }
            off -= step[j] * dims[j];
            idx[j] = 0;
        }
    }
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
        "not a form the oneDNN data route takes",
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
    let w_dims = &m.key.weights.0;
    let reversed = match &m.gather {
        Some(g) if !w.data.is_null() => {
            let n: i64 = w_dims.iter().product();
            let mut buf = vec![0f32; n as usize];
            // SAFETY: `g`'s strides are the rhs buffer's own over the
            // weights' dims (a permutation of the rhs dims), and `buf`
            // holds their product.
            unsafe { gather(w.data as *const f32, w_dims, g, buf.as_mut_ptr()) };
            Some(buf)
        }
        _ => None,
    };
    let rhs = reversed
        .as_ref()
        .map_or(w.data as *const std::ffi::c_void, |b| b.as_ptr().cast());
    // SAFETY: the buffers hold the operands as `map`'s strides describe
    // them (the lhs past the crop offset `map` keeps within it; the rhs or
    // its reversed copy; the result).
    let ran = unsafe { onednn_conv::execute_views(&p, x, m.lhs_offset, rhs, y)? };
    if ran {
        CALLS.fetch_add(1, Ordering::Relaxed);
    }
    Ok(ran)
}
