//! `hlobridge_conv`: a host convolution (f32, f64) that XLA:CPU runs as a
//! typed FFI custom call, as im2col plus the host GEMM.
//!
//! The bridge's `host_conv` rewrite turns a `stablehlo.convolution` into
//! `custom_call @hlobridge_conv(%lhs, %rhs, %config)`, where `%config` is a
//! constant `tensor<Kxi64>` that carries everything the op's attributes say
//! (see [`ConvConfig`] for its layout). Operands and result keep the op's
//! own shapes and dimension order: the kernel reads and writes every
//! dimension through its stride, so any `dimension_numbers` permutation
//! (NCHW, NHWC, the `[f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f]` of a weight
//! gradient, ...) costs no transpose.
//!
//! Semantics are XLA's: output position `o` and window tap `k` read the
//! input at `o·stride + k'·rhs_dilation − pad_lo` of the lhs-dilated input
//! (`k' = K−1−k` where the window is reversed), which must fall on an
//! undilated input element; feature groups split the input and output
//! features. `batch_group_count > 1` is not taken by the rewrite.
//!
//! How: the weights are packed once per call as one `[taps·Cin/G, Cout/G]`
//! matrix per group; the output positions (batch × spatial) are cut into
//! row chunks; for each chunk and group, the input patches are gathered
//! into a `[rows, taps·Cin/G]` matrix (zeros where the window hangs over
//! padding) and multiplied by the packed weights with `matrixmultiply`,
//! writing the result rows straight into the output when their offsets
//! step evenly (NHWC-like outputs), through a small scatter otherwise.
//! Chunks are posted for waiting threads (see [`donation`](super::donation)),
//! like the GEMM kernel's row blocks. Depthwise convolutions (one input
//! feature per group) skip the GEMM: each output is a short dot over the
//! window taps.
//!
//! Why: XLA:CPU's convolutions transpose every NCHW operand to NHWC and
//! back, and run small-spatial convolutions (a 3×3 window over a 2×2 or
//! 1×1 image, ResNet's last stages) through a slow generic loop: 40 ms
//! for one `16x512x1x1 ⊛ 512x512x3x3` where the product is 40 MFLOP.

#![allow(non_upper_case_globals)]

use super::frame::{handle, BufferView, Frame};
use super::gemm::GemmElement;
use super::xla_ffi::*;
use std::sync::Arc;

mod config;
mod depthwise;
pub mod onednn_conv;
pub mod onednn_data;
pub mod onednn_wgrad;
mod wgrad;

pub use depthwise::DwPlan;
pub use wgrad::WgradPlan;

use config::row_major_strides;
use config::unravel;
pub use config::{output_size, ConvConfig};

/// `XLA_FFI_DataType` of the config operand (XLA's `S64`).
const XLA_FFI_DataType_S64: XLA_FFI_DataType = 5;

/// The registered target name, the config operand's version and the most
/// spatial dimensions taken: the host-kernel ABI (`hlobridge-host-abi`).
pub use hlobridge_host_abi::conv::{CONFIG_VERSION, MAX_SPATIAL, TARGET};

/// The handler registered for [`TARGET`].
///
/// # Safety
/// Called by XLA with its own call frame.
pub unsafe extern "C" fn conv_handler(f: *mut XLA_FFI_CallFrame) -> *mut XLA_FFI_Error {
    // SAFETY: XLA calls handlers with its own call frame.
    unsafe { handle(f, run) }
}

/// Everything one call computes before touching data: sizes, strides and
/// the per-position / per-tap offset tables.
#[derive(Debug)]
pub struct ConvPlan {
    /// Groups (feature groups, or batch groups).
    pub groups: usize,
    /// Lhs offset from one group to the next (features or batch entries).
    group_lhs: usize,
    /// Input features per group.
    pub cin_g: usize,
    /// Output features per group.
    pub cout_g: usize,
    /// Live window taps: those that read the input at some output position
    /// (a 3×3 window over a 1×1 image with padding 1 has one).
    pub taps: usize,
    /// Column order of the patch matrix: `(feature, tap)` when true,
    /// `(tap, feature)` when false.
    pub feature_major: bool,
    /// `Some((row stride, column stride))` when the weights are read as the
    /// GEMM's right matrix in place; `None`: packed per call.
    pub weights_in_place: Option<(usize, usize)>,
    /// Output rows: batch × output positions.
    pub rows: usize,
    /// Elements of the result.
    pub out_len: usize,
    /// Lhs stride of the feature dim.
    lhs_f: usize,
    /// Rhs strides of the input-feature and output-feature dims.
    rhs_i: usize,
    rhs_o: usize,
    /// Result stride of the feature dim.
    out_f: usize,
    /// For each row: lhs offset of its batch entry, and its output position.
    row_lhs: Vec<usize>,
    row_pos: Vec<u32>,
    /// For each row: result offset (feature 0).
    row_out: Vec<usize>,
    /// `Some(step)` when `row_out` steps evenly: the GEMM writes the result
    /// directly.
    out_step: Option<usize>,
    /// `[position][tap]`: lhs spatial offset, or `usize::MAX` where the tap
    /// reads padding (or a hole of the lhs dilation).
    tap_off: Vec<usize>,
    /// For each live tap: rhs spatial offset (unreversed window index).
    tap_rhs: Vec<usize>,
}

impl ConvPlan {
    /// Checks the operand dims against `cfg` and builds the plan.
    pub fn new(
        cfg: &ConvConfig,
        lhs: &[i64],
        rhs: &[i64],
        out: &[i64],
    ) -> Result<ConvPlan, String> {
        let nsp = cfg.spatial();
        let rank = nsp + 2;
        if lhs.len() != rank || rhs.len() != rank || out.len() != rank {
            return Err(format!(
                "hlobridge_conv: ranks must be {rank}: lhs {lhs:?}, rhs {rhs:?}, result {out:?}"
            ));
        }
        if lhs.iter().chain(rhs).chain(out).any(|&d| d < 0) {
            return Err(format!(
                "hlobridge_conv: negative dimension in lhs {lhs:?}, rhs {rhs:?}, result {out:?}"
            ));
        }
        let (fg, bg) = (cfg.groups, cfg.batch_groups);
        let g = (fg * bg) as usize;
        let (n, c) = (lhs[cfg.lhs[0]], lhs[cfg.lhs[1]]);
        let (ki, ko) = (rhs[cfg.rhs[0]], rhs[cfg.rhs[1]]);
        let (on, of) = (out[cfg.out[0]], out[cfg.out[1]]);
        let bad = || {
            format!(
                "hlobridge_conv: shapes do not match the convolution: lhs {lhs:?}, rhs {rhs:?}, \
                 result {out:?}, {cfg:?}"
            )
        };
        // Feature groups split the lhs features; batch groups split the lhs
        // batch (group j's output features read batch entries j·n/bg..).
        if c != ki * fg || ko % (fg * bg) != 0 || n % bg != 0 || on != n / bg || of != ko {
            return Err(bad());
        }
        let (ins, ks, os) = config::spatial_sizes(cfg, lhs, rhs, out).ok_or_else(bad)?;
        let (ls, rs, ys) = (
            row_major_strides(lhs),
            row_major_strides(rhs),
            row_major_strides(out),
        );
        let positions: usize = os.iter().map(|&d| d as usize).product();
        let taps: usize = ks.iter().map(|&d| d as usize).product();
        let rows = (on as usize)
            .checked_mul(positions)
            .ok_or("hlobridge_conv: output too large")?;
        let out_len: usize = out.iter().map(|&d| d as usize).product();
        if positions > u32::MAX as usize {
            return Err("hlobridge_conv: too many output positions".into());
        }
        // Position / tap tables.
        let table = positions
            .checked_mul(taps)
            .ok_or("hlobridge_conv: window table too large")?;
        let mut tap_off = alloc_vec::<usize>(table, usize::MAX)?;
        let mut tap_rhs = alloc_vec::<usize>(taps, 0)?;
        let mut kidx = vec![0i64; nsp];
        let mut oidx = vec![0i64; nsp];
        for (t, slot) in tap_rhs.iter_mut().enumerate() {
            unravel(t, &ks, &mut kidx);
            *slot = (0..nsp)
                .map(|i| kidx[i] as usize * rs[cfg.rhs[2 + i]])
                .sum();
        }
        for p in 0..positions {
            unravel(p, &os, &mut oidx);
            for t in 0..taps {
                unravel(t, &ks, &mut kidx);
                let mut off = 0usize;
                let mut ok = true;
                for i in 0..nsp {
                    let k = if cfg.reverse[i] {
                        ks[i] - 1 - kidx[i]
                    } else {
                        kidx[i]
                    };
                    let pos = oidx[i] * cfg.stride[i] + k * cfg.rhs_dilation[i] - cfg.pad_lo[i];
                    let d = cfg.lhs_dilation[i];
                    if pos < 0 || pos % d != 0 || pos / d >= ins[i] {
                        ok = false;
                        break;
                    }
                    off += (pos / d) as usize * ls[cfg.lhs[2 + i]];
                }
                if ok {
                    tap_off[p * taps + t] = off;
                }
            }
        }
        // Keep only live taps.
        let live: Vec<usize> = (0..taps)
            .filter(|&t| (0..positions).any(|p| tap_off[p * taps + t] != usize::MAX))
            .collect();
        let all_live = live.len() == taps;
        if !all_live {
            let nl = live.len();
            let mut compact = alloc_vec::<usize>(positions * nl, usize::MAX)?;
            for p in 0..positions {
                for (li, &t) in live.iter().enumerate() {
                    compact[p * nl + li] = tap_off[p * taps + t];
                }
            }
            tap_off = compact;
            tap_rhs = live.iter().map(|&t| tap_rhs[t]).collect();
        }
        let taps = live.len();
        let cin = ki as usize;
        // The patch matrix's column order, and whether the weights can be
        // read in place: their (feature, tap) or (tap, feature) index must
        // step evenly (OIHW weights: feature-major; HWIO: tap-major).
        let (rhs_i, lhs_f) = (rs[cfg.rhs[0]], ls[cfg.lhs[1]]);
        let tap_step = if taps > 1 {
            let st = tap_rhs[1];
            (tap_rhs.iter().enumerate().all(|(t, &o)| o == t * st)).then_some(st)
        } else {
            Some(rhs_i * cin.max(1))
        };
        let direct = |feature_major: bool| -> Option<(usize, usize)> {
            let st = tap_step.filter(|_| all_live)?;
            let rsb = if feature_major {
                (cin <= 1 || taps <= 1 || rhs_i == taps * st).then_some(if taps > 1 {
                    st
                } else {
                    rhs_i
                })?
            } else {
                (cin <= 1 || taps <= 1 || st == cin * rhs_i).then_some(if cin > 1 {
                    rhs_i
                } else {
                    st
                })?
            };
            Some((rsb, rs[cfg.rhs[1]]))
        };
        // Contiguous input features gather fastest tap by tap.
        let prefer_fm = lhs_f != 1;
        let (feature_major, weights_in_place) = match direct(prefer_fm) {
            Some(d) => (prefer_fm, Some(d)),
            None => match direct(!prefer_fm) {
                Some(d) => (!prefer_fm, Some(d)),
                None => (prefer_fm, None),
            },
        };
        // Rows: batch-major or position-major, whichever makes the result
        // offsets step evenly (then the GEMM writes in place).
        let pos_out: Vec<usize> = (0..positions)
            .map(|p| {
                unravel(p, &os, &mut oidx);
                (0..nsp)
                    .map(|i| oidx[i] as usize * ys[cfg.out[2 + i]])
                    .sum()
            })
            .collect();
        let (yb, lb) = (ys[cfg.out[0]], ls[cfg.lhs[0]]);
        let group_lhs = if bg > 1 {
            on as usize * lb
        } else {
            ki as usize * ls[cfg.lhs[1]]
        };
        let n = on as usize;
        let even = |offs: &[usize]| -> Option<usize> {
            if offs.len() < 2 {
                return Some(1);
            }
            let step = offs[1].wrapping_sub(offs[0]);
            (offs[0] == 0 && offs.windows(2).all(|w| w[1].wrapping_sub(w[0]) == step))
                .then_some(step)
        };
        let mut row_out = alloc_vec::<usize>(rows, 0)?;
        let mut row_lhs = alloc_vec::<usize>(rows, 0)?;
        let mut row_pos = alloc_vec::<u32>(rows, 0)?;
        let fill =
            |pos_major: bool, row_out: &mut [usize], row_lhs: &mut [usize], row_pos: &mut [u32]| {
                for b in 0..n {
                    for (p, &po) in pos_out.iter().enumerate() {
                        let r = if pos_major {
                            p * n + b
                        } else {
                            b * positions + p
                        };
                        row_out[r] = b * yb + po;
                        row_lhs[r] = b * lb;
                        row_pos[r] = p as u32;
                    }
                }
            };
        fill(false, &mut row_out, &mut row_lhs, &mut row_pos);
        let mut out_step = even(&row_out);
        if out_step.is_none() {
            fill(true, &mut row_out, &mut row_lhs, &mut row_pos);
            out_step = even(&row_out);
            if out_step.is_none() {
                fill(false, &mut row_out, &mut row_lhs, &mut row_pos);
            }
        }
        Ok(ConvPlan {
            groups: g,
            group_lhs,
            cin_g: cin,
            cout_g: (ko as usize) / g.max(1),
            taps,
            feature_major,
            weights_in_place,
            rows,
            out_len,
            lhs_f: ls[cfg.lhs[1]],
            rhs_i: rs[cfg.rhs[0]],
            rhs_o: rs[cfg.rhs[1]],
            out_f: ys[cfg.out[1]],
            row_lhs,
            row_pos,
            row_out,
            out_step,
            tap_off,
            tap_rhs,
        })
    }

    /// The patch-matrix column of live tap `t`, input feature `ci`.
    #[inline]
    pub fn column(&self, t: usize, ci: usize) -> usize {
        if self.feature_major {
            ci * self.taps + t
        } else {
            t * self.cin_g + ci
        }
    }

    /// Length of a packed column (the GEMM's inner dimension).
    pub fn kdim(&self) -> usize {
        self.taps * self.cin_g
    }

    /// Multiply-adds of the whole convolution.
    pub fn work(&self) -> usize {
        self.rows
            .saturating_mul(self.groups)
            .saturating_mul(self.cout_g)
            .saturating_mul(self.kdim())
    }

    /// `Some((positions, lhs step, result step))` when the convolution is a
    /// plain product per batch entry (one live tap reading position `p` at
    /// `p·lhs step`, result rows of a batch entry stepping evenly: a 1×1
    /// stride-1 unpadded convolution): the GEMM then reads the lhs in
    /// place, with no patch matrix.
    pub fn direct(&self) -> Option<(usize, usize, usize)> {
        if self.taps != 1 || self.tap_off.is_empty() {
            return None;
        }
        let positions = self.tap_off.len();
        if !self.rows.is_multiple_of(positions) || self.tap_off.contains(&usize::MAX) {
            return None;
        }
        if positions > 1 && self.row_pos[1] != 1 {
            return None;
        }
        let steps = |v: &[usize]| -> Option<usize> {
            if v.len() < 2 {
                return Some(1);
            }
            let step = v[1].wrapping_sub(v[0]);
            v.windows(2)
                .all(|w| w[1].wrapping_sub(w[0]) == step)
                .then_some(step)
        };
        let xs = steps(&self.tap_off)?;
        let ys = steps(&self.row_out[..positions])?;
        (xs < isize::MAX as usize && ys < isize::MAX as usize).then_some((positions, xs, ys))
    }

    /// Whether the result rows are written in place (no scatter).
    pub fn writes_in_place(&self) -> bool {
        self.out_step.is_some()
    }
}

/// A vector of `n` copies of `v`; allocation failure is an error, not an
/// abort of the plugin's process.
fn alloc_vec<T: Clone>(n: usize, v: T) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| {
        format!(
            "Out of memory allocating {} bytes (host convolution scratch)",
            n.saturating_mul(std::mem::size_of::<T>())
        )
    })?;
    out.resize(n, v);
    Ok(out)
}

fn run(fr: &Frame<'_>) -> Result<(), String> {
    if fr.arity() != (3, 1) {
        return Err(format!(
            "hlobridge_conv takes 3 operands and 1 result, got {:?}",
            fr.arity()
        ));
    }
    let (x, w, cfg, y) = (fr.arg(0)?, fr.arg(1)?, fr.arg(2)?, fr.ret(0)?);
    if cfg.dtype != XLA_FFI_DataType_S64 || cfg.dims.len() != 1 || cfg.data.is_null() {
        return Err("hlobridge_conv: operand 2 must be the i64 config vector".into());
    }
    // SAFETY: a rank-1 s64 buffer of dims[0] elements.
    let raw = unsafe { std::slice::from_raw_parts(cfg.data as *const i64, cfg.dims[0] as usize) };
    let cfg = ConvConfig::decode(raw)?;
    if x.dtype != w.dtype || x.dtype != y.dtype {
        return Err(format!(
            "hlobridge_conv: element types differ: {} {} -> {}",
            x.dtype, w.dtype, y.dtype
        ));
    }
    for (what, v) in [("lhs", &x), ("rhs", &w), ("result", &y)] {
        if v.data.is_null() && v.dims.iter().all(|&d| d > 0) {
            return Err(format!("hlobridge_conv: {what} buffer is null"));
        }
    }
    match x.dtype {
        // SAFETY: the buffers are XLA's row-major allocations of their dims,
        // which the dispatch checks against the config.
        XLA_FFI_DataType_F32 => unsafe { conv_dispatch::<f32>(&cfg, &x, &w, &y) },
        // SAFETY: as above.
        XLA_FFI_DataType_F64 => unsafe { conv_dispatch::<f64>(&cfg, &x, &w, &y) },
        other => Err(format!(
            "hlobridge_conv supports f32 and f64, got XLA_FFI_DataType {other}"
        )),
    }
}

/// Runs the convolution `cfg` on typed buffers: in f32, when the library
/// is loaded, weight gradients on oneDNN's backward-weights convolution
/// (`onednn_wgrad.rs`), and grouped forwards and lhs-dilated input
/// gradients on its forward or backward-data one (`onednn_data.rs`); the depthwise kernel or the weight-gradient kernel
/// (`wgrad.rs`) when one takes the convolution; im2col plus GEMM otherwise.
/// Dims that do not match the convolution are an error.
///
/// # Safety
/// `x`, `w`, `y` must be row-major buffers of their dims (checked against
/// `cfg` here), and `y` must not overlap `x` or `w`.
pub(crate) unsafe fn conv_dispatch<T: ConvElement + 'static>(
    cfg: &ConvConfig,
    x: &BufferView<'_>,
    w: &BufferView<'_>,
    y: &BufferView<'_>,
) -> Result<(), String> {
    if T::IS_F32 {
        // SAFETY: the caller's contract, and `T` is f32.
        match unsafe { onednn_wgrad::run(cfg, x, w, y) } {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(why) => {
                tracing::warn!(%why, "oneDNN weight gradient failed; the host kernel runs it")
            }
        }
        // SAFETY: as above.
        match unsafe { onednn_data::run(cfg, x, w, y) } {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(why) => {
                tracing::warn!(%why, "oneDNN convolution failed; the host kernel runs it")
            }
        }
    }
    if let Some(dw) = DwPlan::new(cfg, x.dims, w.dims, y.dims) {
        // SAFETY: the plan was checked against these dims.
        return unsafe { depthwise::run::<T>(&dw, x, w, y) };
    }
    if let Some(wg) = WgradPlan::new(cfg, x.dims, w.dims, y.dims) {
        // SAFETY: the plan was checked against these dims.
        return unsafe { wgrad::run::<T>(&wg, x, w, y) };
    }
    let plan = ConvPlan::new(cfg, x.dims, w.dims, y.dims)?;
    // SAFETY: as above.
    unsafe { conv_typed::<T>(&plan, x, w, y) }
}

/// Element types the convolution runs in.
pub trait ConvElement:
    GemmElement + std::ops::Mul<Output = Self> + std::ops::Add<Output = Self>
{
    /// Whether this is f32 (the type oneDNN's route takes).
    const IS_F32: bool;
}
impl ConvElement for f32 {
    const IS_F32: bool = true;
}
impl ConvElement for f64 {
    const IS_F32: bool = false;
}

/// Convolutions of at least this many multiply-adds post their row chunks
/// for waiting threads (see `donation`); same threshold as the GEMM's.
const DONATE_WORK: usize = 1 << 19;
/// ... and wake sleeping ones at this many.
const WAKE_WORK: usize = 1 << 23;
/// Target size of one chunk's patch matrix, in elements.
const CHUNK_ELEMS: usize = 1 << 17;
/// Fewest rows in a chunk (the GEMM wants tall blocks).
const MIN_CHUNK_ROWS: usize = 32;

/// Runs the convolution of `plan` on typed buffers.
///
/// # Safety
/// `x`, `w`, `y` must be row-major buffers of the dims the plan was built
/// from, and `y` must not overlap `x` or `w`.
pub(crate) unsafe fn conv_typed<T: ConvElement + 'static>(
    plan: &ConvPlan,
    x: &BufferView<'_>,
    w: &BufferView<'_>,
    y: &BufferView<'_>,
) -> Result<(), String> {
    let yp = y.data as *mut T;
    if plan.out_len == 0 {
        return Ok(());
    }
    if plan.kdim() == 0 {
        // SAFETY: the result holds out_len elements.
        unsafe { std::slice::from_raw_parts_mut(yp, plan.out_len).fill(T::default()) };
        return Ok(());
    }
    let (g, cin, cout, taps, kdim) = (plan.groups, plan.cin_g, plan.cout_g, plan.taps, plan.kdim());
    // One input feature per group (and several groups): a direct dot over
    // the window taps beats a GEMM whose inner dimension is the tap count.
    let depthwise = cin == 1 && g > 1;
    // Packed weights (unless read in place): per group a [kdim, cout]
    // row-major matrix, rows in the patch matrix's column order.
    let wp = w.data as *const T;
    let packed = if plan.weights_in_place.is_none() || depthwise {
        let mut packed = alloc_vec::<T>(g * kdim * cout, T::default())?;
        for gi in 0..g {
            for t in 0..taps {
                for ci in 0..cin {
                    let col = plan.column(t, ci);
                    let row = &mut packed[(gi * kdim + col) * cout..][..cout];
                    for (j, slot) in row.iter_mut().enumerate() {
                        let off = (gi * cout + j) * plan.rhs_o + ci * plan.rhs_i + plan.tap_rhs[t];
                        // SAFETY: every index is inside the rhs dims.
                        *slot = unsafe { *wp.add(off) };
                    }
                }
            }
        }
        packed
    } else {
        Vec::new()
    };
    let direct = if depthwise { None } else { plan.direct() };
    if let Some((positions, xs, ys)) = direct {
        // One product per batch entry and row block (within the entry).
        let block = positions.clamp(1, 4096);
        let per_entry = positions.div_ceil(block);
        let chunks = (plan.rows / positions) * per_entry;
        let work = plan.work();
        let donate = super::donation::enabled() && work >= DONATE_WORK;
        let ctx = Arc::new(Ctx {
            plan: plan as *const ConvPlan as usize,
            x: x.data as usize,
            w: wp as usize,
            y: yp as usize,
            packed,
            chunk_rows: block,
        });
        let body = move |i: usize| {
            // SAFETY: as for the chunks below.
            unsafe { ctx.direct_chunk(i, per_entry, positions, xs, ys) }
        };
        return if donate {
            super::donation::run_shared(chunks, work >= WAKE_WORK, body)
        } else {
            (0..chunks).for_each(body);
            Ok(())
        };
    }
    let chunk_rows = if depthwise {
        plan.rows.clamp(1, 256)
    } else {
        (CHUNK_ELEMS / kdim).max(MIN_CHUNK_ROWS)
    };
    let mut chunks = plan.rows.div_ceil(chunk_rows);
    let work = plan.work();
    let donate = super::donation::enabled() && work >= DONATE_WORK;
    let chunk_rows = if donate && chunks < 2 && plan.rows >= 2 * 8 {
        chunks = 2;
        plan.rows.div_ceil(2)
    } else {
        chunk_rows
    };
    let ctx = Arc::new(Ctx {
        plan: plan as *const ConvPlan as usize,
        x: x.data as usize,
        w: wp as usize,
        y: yp as usize,
        packed,
        chunk_rows,
    });
    let body = {
        let ctx = ctx.clone();
        move |i: usize| {
            // SAFETY: `ctx.plan` and the buffers outlive every chunk: the
            // caller below returns only after all chunks have finished.
            unsafe { ctx.chunk(i, depthwise) }
        }
    };
    if donate {
        super::donation::run_shared(chunks, work >= WAKE_WORK, body)
    } else {
        for i in 0..chunks {
            body(i);
        }
        Ok(())
    }
}

/// What every chunk of one call shares.
struct Ctx<T> {
    /// `&ConvPlan`, alive for the call.
    plan: usize,
    /// Lhs base address.
    x: usize,
    /// Rhs base address.
    w: usize,
    /// Result base address.
    y: usize,
    packed: Vec<T>,
    chunk_rows: usize,
}

impl<T: ConvElement> Ctx<T> {
    /// Group `gi`'s `[kdim, cout]` weight matrix and its row and column
    /// strides: read in place from the rhs, or from the packed copy.
    ///
    /// # Safety
    /// `plan` is this call's plan and the rhs buffer is alive.
    unsafe fn group_weights(&self, plan: &ConvPlan, gi: usize) -> (*const T, isize, isize) {
        let (cout, kdim) = (plan.cout_g, plan.kdim());
        match plan.weights_in_place {
            // SAFETY: group gi's output features start here, inside the rhs.
            Some((rsb, csb)) => (
                unsafe { (self.w as *const T).add(gi * cout * plan.rhs_o) },
                rsb as isize,
                csb as isize,
            ),
            None => (self.packed[gi * kdim * cout..].as_ptr(), cout as isize, 1),
        }
    }

    /// Chunk `i` of a direct convolution (see [`ConvPlan::direct`]): batch
    /// entry `i / per_entry`, its row block `i % per_entry`, every group.
    ///
    /// # Safety
    /// The plan and buffers must be alive; chunks write disjoint rows.
    unsafe fn direct_chunk(
        &self,
        i: usize,
        per_entry: usize,
        positions: usize,
        xs: usize,
        ys: usize,
    ) {
        // SAFETY: see the caller's contract.
        let plan = unsafe { &*(self.plan as *const ConvPlan) };
        let (b, blk) = (i / per_entry, i % per_entry);
        let p0 = blk * self.chunk_rows;
        if p0 >= positions {
            return;
        }
        let mr = self.chunk_rows.min(positions - p0);
        let r0 = b * positions + p0;
        let (cin, cout) = (plan.cin_g, plan.cout_g);
        let (x, y) = (self.x as *const T, self.y as *mut T);
        for gi in 0..plan.groups {
            // SAFETY: see the caller's contract.
            let (wg, rsb, csb) = unsafe { self.group_weights(plan, gi) };
            // SAFETY: rows r0..r0+mr of batch entry b: the lhs at
            // tap_off[p] (evenly stepped by xs) and features of group gi at
            // lhs_f, the result at row_out[r] (stepped by ys) and features
            // at out_f; chunks write disjoint rows.
            unsafe {
                <T as GemmElement>::mul(
                    mr,
                    cin,
                    cout,
                    x.add(plan.row_lhs[r0] + gi * plan.group_lhs + plan.tap_off[p0]),
                    xs as isize,
                    plan.lhs_f as isize,
                    wg,
                    rsb,
                    csb,
                    y.add(plan.row_out[r0] + gi * cout * plan.out_f),
                    ys as isize,
                    plan.out_f as isize,
                )
            }
        }
    }

    /// Rows `i·chunk_rows ..` of the result, every group.
    ///
    /// # Safety
    /// The plan and buffers must be alive; chunks write disjoint rows.
    unsafe fn chunk(&self, i: usize, depthwise: bool) {
        // SAFETY: see the caller's contract.
        let plan = unsafe { &*(self.plan as *const ConvPlan) };
        let r0 = i * self.chunk_rows;
        if r0 >= plan.rows {
            return;
        }
        let mr = self.chunk_rows.min(plan.rows - r0);
        let (cin, cout, taps, kdim) = (plan.cin_g, plan.cout_g, plan.taps, plan.kdim());
        let x = self.x as *const T;
        let y = self.y as *mut T;
        if depthwise {
            for r in r0..r0 + mr {
                let offs = &plan.tap_off[plan.row_pos[r] as usize * taps..][..taps];
                for gi in 0..plan.groups {
                    let base = plan.row_lhs[r] + gi * plan.group_lhs;
                    let wg = &self.packed[gi * taps * cout..][..taps * cout];
                    for j in 0..cout {
                        let mut acc = T::default();
                        for (t, &o) in offs.iter().enumerate() {
                            if o != usize::MAX {
                                // SAFETY: the plan's offsets lie inside the lhs.
                                acc = acc + unsafe { *x.add(base + o) } * wg[t * cout + j];
                            }
                        }
                        // SAFETY: row r, feature gi·cout + j lies inside the result.
                        unsafe { *y.add(plan.row_out[r] + (gi * cout + j) * plan.out_f) = acc };
                    }
                }
            }
            return;
        }
        let mut cols: Vec<T> = Vec::new();
        if cols.try_reserve_exact(mr * kdim).is_err() {
            panic!("out of memory allocating a host convolution patch matrix");
        }
        cols.resize(mr * kdim, T::default());
        let mut tmp: Vec<T> = Vec::new();
        if plan.out_step.is_none() {
            if tmp.try_reserve_exact(mr * cout).is_err() {
                panic!("out of memory allocating a host convolution result block");
            }
            tmp.resize(mr * cout, T::default());
        }
        for gi in 0..plan.groups {
            let fbase = gi * plan.group_lhs;
            for (k, r) in (r0..r0 + mr).enumerate() {
                let offs = &plan.tap_off[plan.row_pos[r] as usize * taps..][..taps];
                let dst = &mut cols[k * kdim..][..kdim];
                let base = plan.row_lhs[r] + fbase;
                if plan.feature_major {
                    for ci in 0..cin {
                        let src = base + ci * plan.lhs_f;
                        for (v, &o) in dst[ci * taps..][..taps].iter_mut().zip(offs) {
                            *v = if o == usize::MAX {
                                T::default()
                            } else {
                                // SAFETY: the plan's offsets lie inside the lhs.
                                unsafe { *x.add(src + o) }
                            };
                        }
                    }
                } else {
                    for (t, &o) in offs.iter().enumerate() {
                        let d = &mut dst[t * cin..][..cin];
                        if o == usize::MAX {
                            d.fill(T::default());
                        } else if plan.lhs_f == 1 {
                            // SAFETY: cin contiguous features inside the lhs.
                            let s = unsafe { std::slice::from_raw_parts(x.add(base + o), cin) };
                            d.copy_from_slice(s);
                        } else {
                            let src = base + o;
                            for (ci, v) in d.iter_mut().enumerate() {
                                // SAFETY: feature ci of this group lies inside the lhs.
                                *v = unsafe { *x.add(src + ci * plan.lhs_f) };
                            }
                        }
                    }
                }
            }
            // SAFETY: see the caller's contract.
            let (wg, rsb, csb) = unsafe { self.group_weights(plan, gi) };
            match plan.out_step {
                Some(step) => {
                    // SAFETY: rows r0..r0+mr of features gi·cout.. lie inside
                    // the result at these strides; chunks write disjoint rows.
                    unsafe {
                        <T as GemmElement>::mul(
                            mr,
                            kdim,
                            cout,
                            cols.as_ptr(),
                            kdim as isize,
                            1,
                            wg,
                            rsb,
                            csb,
                            y.add(plan.row_out[r0] + gi * cout * plan.out_f),
                            step as isize,
                            plan.out_f as isize,
                        )
                    }
                }
                None => {
                    // SAFETY: the local matrices have these sizes.
                    unsafe {
                        <T as GemmElement>::mul(
                            mr,
                            kdim,
                            cout,
                            cols.as_ptr(),
                            kdim as isize,
                            1,
                            wg,
                            rsb,
                            csb,
                            tmp.as_mut_ptr(),
                            cout as isize,
                            1,
                        )
                    }
                    for (k, r) in (r0..r0 + mr).enumerate() {
                        let o = plan.row_out[r] + gi * cout * plan.out_f;
                        for (j, &v) in tmp[k * cout..][..cout].iter().enumerate() {
                            // SAFETY: row r, feature gi·cout + j lies inside the result.
                            unsafe { *y.add(o + j * plan.out_f) = v };
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
