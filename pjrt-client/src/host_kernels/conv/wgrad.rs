//! Weight-gradient-form convolutions (a window larger than the result) as
//! GEMMs over an im2col of the input, chunked over the contraction.
//!
//! A weight gradient reaches the kernel as `[f, b, 0, 1]x[i, o, 0, 1]->[0,
//! 1, b, f]` (torch_xla and JAX): the input with batch and feature swapped,
//! the output gradient as a window as large as its map, and a result as
//! small as the forward window. In the general kernel's terms its output
//! rows are `(b, position)` (input channels × the forward window, a few
//! hundred to a few thousand) and its contraction is `(images, window
//! taps)`: `N·OH·OW`, tens of thousands. The general kernel gathers whole
//! patch rows of that length; here, with `R` the rows and `F` the output
//! features:
//!
//! 1. the window operand (the output gradient) is packed once per call as
//!    a row-major `[images·taps, F]` matrix (one pass over it, chunked for
//!    waiting threads);
//! 2. the rows are cut into chunks (and, with one row chunk, the
//!    contraction into two halves, summed at the end); each chunk walks the
//!    contraction in blocks of a few hundred, gathers the input's
//!    `[rows, block]` im2col block (runs of evenly stepped offsets per
//!    position, found once per call: contiguous copies at stride 1, zeros
//!    for padding) and accumulates `block · packed[block, F]` into its own
//!    `[rows, F]` sum with the host GEMM (`gemm` crate, or `matrixmultiply`
//!    as `HLOBRIDGE_GEMM_KERNEL` says);
//! 3. the sums are written to the result through its strides.
//!
//! Taken ([`WgradPlan::new`]): one feature group and one batch group, no lhs
//! dilation, no window reversal, and a window of at least as many taps as
//! result positions (at least [`MIN_TAPS`]); strides, window dilation (the
//! forward stride), padding and any dimension order. The lowering sends
//! the large ones here instead of XLA's convolution only with
//! `HLOBRIDGE_CONV_WGRAD=host` (docs/host_conv.md); smaller ones reach the
//! kernel through the host-kernel routing.

use super::config::{plain_nonempty, row_major_strides, spatial_sizes, unravel};
use super::{alloc_vec, ConvConfig, ConvElement};
use crate::host_kernels::frame::BufferView;
use std::sync::Arc;

/// Fewest window taps for this kernel: with fewer (a weight gradient over
/// 14² or smaller maps, or a forward convolution) the general kernel was as
/// fast or faster (`wgrad_timing`, one thread: 3×3 512@7 16.4 against
/// 19.5 ms, 1×1 512→2048@7 8.8 against 13.7 ms; 3×3 64@56 32.6 against
/// 20.4 ms).
pub const MIN_TAPS: usize = 256;
/// Target elements of one im2col block.
const BLOCK_ELEMS: usize = 1 << 16;
/// Target rows of one row chunk.
const CHUNK_ROWS: usize = 256;

/// A run of window taps of one result position: `len` taps from `t0` read
/// the input at `off + i·step` (within an image and input channel), or
/// padding (`step == usize::MAX`).
#[derive(Debug, Clone, Copy)]
struct Run {
    t0: usize,
    len: usize,
    off: usize,
    step: usize,
}

/// Sizes, strides and runs of one weight-gradient-form convolution.
#[derive(Debug)]
pub struct WgradPlan {
    /// Lhs batch entries (result batch) and result positions: rows are
    /// `(b, p)`, `b·positions + p`.
    batch: usize,
    positions: usize,
    /// Output features (rhs output features).
    features: usize,
    /// Contraction: lhs features (images) and window taps.
    images: usize,
    taps: usize,
    /// Lhs strides of the batch and feature dims.
    lhs_b: usize,
    lhs_f: usize,
    /// Rhs strides of the input-feature and output-feature dims, and of one
    /// tap (taps step evenly).
    rhs_i: usize,
    rhs_o: usize,
    rhs_t: usize,
    /// Result strides of the batch and feature dims, and each position's
    /// spatial offset.
    out_b: usize,
    out_f: usize,
    pos_out: Vec<usize>,
    /// Per position, its runs in tap order.
    runs: Vec<Vec<Run>>,
    /// Elements of the lhs, rhs and result.
    lhs_len: usize,
    out_len: usize,
}

impl WgradPlan {
    /// The plan if this kernel takes the convolution (module docs); `None`
    /// for any other form or dims that do not match it (the general kernel
    /// then reports them).
    pub fn new(cfg: &ConvConfig, lhs: &[i64], rhs: &[i64], out: &[i64]) -> Option<WgradPlan> {
        let nsp = cfg.spatial();
        if cfg.groups != 1 || cfg.batch_groups != 1 || !plain_nonempty(cfg, lhs, rhs, out) {
            return None;
        }
        let (b, n) = (lhs[cfg.lhs[0]], lhs[cfg.lhs[1]]);
        let (ki, ko) = (rhs[cfg.rhs[0]], rhs[cfg.rhs[1]]);
        if n != ki || out[cfg.out[0]] != b || out[cfg.out[1]] != ko {
            return None;
        }
        // lhs dilation is 1 here (checked above).
        let (ins, ks, os) = spatial_sizes(cfg, lhs, rhs, out)?;
        let positions = os
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d as usize))?;
        let taps = ks
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d as usize))?;
        if taps < MIN_TAPS || taps < positions || positions.checked_mul(taps)? > 1 << 26 {
            return None;
        }
        let (ls, rs, ys) = (
            row_major_strides(lhs),
            row_major_strides(rhs),
            row_major_strides(out),
        );
        // Taps must step evenly in the rhs (row-major window dims, in order).
        let mut kidx = vec![0i64; nsp];
        let tap_rhs = |t: usize, kidx: &mut [i64]| -> usize {
            unravel(t, &ks, kidx);
            (0..nsp)
                .map(|i| kidx[i] as usize * rs[cfg.rhs[2 + i]])
                .sum()
        };
        let rhs_t = if taps > 1 { tap_rhs(1, &mut kidx) } else { 1 };
        if (0..taps).any(|t| tap_rhs(t, &mut kidx) != t * rhs_t) {
            return None;
        }
        let mut oidx = vec![0i64; nsp];
        let mut runs = Vec::with_capacity(positions);
        let mut pos_out = Vec::with_capacity(positions);
        for p in 0..positions {
            unravel(p, &os, &mut oidx);
            pos_out.push(
                (0..nsp)
                    .map(|i| oidx[i] as usize * ys[cfg.out[2 + i]])
                    .sum(),
            );
            let mut rp: Vec<Run> = Vec::new();
            for t in 0..taps {
                unravel(t, &ks, &mut kidx);
                let mut off = Some(0usize);
                for i in 0..nsp {
                    let at =
                        oidx[i] * cfg.stride[i] + kidx[i] * cfg.rhs_dilation[i] - cfg.pad_lo[i];
                    if at < 0 || at >= ins[i] {
                        off = None;
                        break;
                    }
                    off = off.map(|o| o + at as usize * ls[cfg.lhs[2 + i]]);
                }
                let (off, step) = match off {
                    Some(o) => (o, None),
                    None => (0, Some(usize::MAX)),
                };
                match rp.last_mut() {
                    // Padding extends a padding run.
                    Some(r) if step.is_some() && r.step == usize::MAX => r.len += 1,
                    // A live tap extends a live run that steps to it.
                    Some(r)
                        if step.is_none()
                            && r.step != usize::MAX
                            && (r.len == 1 && off > r.off
                                || r.len > 1 && off == r.off + r.len * r.step) =>
                    {
                        if r.len == 1 {
                            r.step = off - r.off;
                        }
                        r.len += 1;
                    }
                    _ => rp.push(Run {
                        t0: t,
                        len: 1,
                        off,
                        step: step.unwrap_or(1),
                    }),
                }
            }
            runs.push(rp);
        }
        Some(WgradPlan {
            batch: b as usize,
            positions,
            features: ko as usize,
            images: n as usize,
            taps,
            lhs_b: ls[cfg.lhs[0]],
            lhs_f: ls[cfg.lhs[1]],
            rhs_i: rs[cfg.rhs[0]],
            rhs_o: rs[cfg.rhs[1]],
            rhs_t,
            out_b: ys[cfg.out[0]],
            out_f: ys[cfg.out[1]],
            pos_out,
            runs,
            lhs_len: lhs.iter().map(|&d| d as usize).product(),
            out_len: out.iter().map(|&d| d as usize).product(),
        })
    }

    /// Result rows (`batch · positions`).
    pub fn rows(&self) -> usize {
        self.batch * self.positions
    }

    /// Length of the contraction (`images · taps`).
    pub fn kdim(&self) -> usize {
        self.images * self.taps
    }

    /// Multiply-adds of the whole convolution (live and padding taps).
    pub fn work(&self) -> usize {
        self.rows()
            .saturating_mul(self.kdim())
            .saturating_mul(self.features)
    }

    /// Gathers im2col row `r` over contraction columns `k0..k0 + dst.len()`.
    ///
    /// # Safety
    /// `x` must be the lhs of this plan.
    unsafe fn gather<T: ConvElement>(&self, x: *const T, r: usize, k0: usize, dst: &mut [T]) {
        let (b, p) = (r / self.positions, r % self.positions);
        let runs = &self.runs[p];
        let mut k = k0;
        let end = k0 + dst.len();
        while k < end {
            let (img, t) = (k / self.taps, k % self.taps);
            let tend = self.taps.min(t + (end - k));
            let base = b * self.lhs_b + img * self.lhs_f;
            let mut i = runs.partition_point(|run| run.t0 + run.len <= t);
            let mut t = t;
            while t < tend {
                let run = runs[i];
                let (a, z) = (t, tend.min(run.t0 + run.len));
                let d = &mut dst[k - k0 + (a - (k % self.taps))..][..z - a];
                if run.step == usize::MAX {
                    d.fill(T::default());
                } else {
                    let o = base + run.off + (a - run.t0) * run.step;
                    if run.step == 1 {
                        // SAFETY: the run's offsets lie inside the lhs
                        // (checked against its dims when planned).
                        d.copy_from_slice(unsafe { std::slice::from_raw_parts(x.add(o), z - a) });
                    } else {
                        for (j, v) in d.iter_mut().enumerate() {
                            // SAFETY: as above.
                            *v = unsafe { *x.add(o + j * run.step) };
                        }
                    }
                }
                t = z;
                i += 1;
            }
            k += tend - (k % self.taps);
        }
    }
}

/// How one call is cut: row chunks of `chunk_rows`, each over `splits`
/// parts of the contraction (`split_k` columns each).
#[derive(Debug, Clone, Copy)]
struct Cut {
    row_chunks: usize,
    chunk_rows: usize,
    splits: usize,
    split_k: usize,
    block_k: usize,
}

fn cut(plan: &WgradPlan, parallel: bool) -> Cut {
    let (rows, kdim) = (plan.rows(), plan.kdim());
    let mut row_chunks = rows.div_ceil(CHUNK_ROWS).max(1);
    if parallel && row_chunks % 2 == 1 && row_chunks < 8 && rows >= 64 {
        row_chunks += 1;
    }
    let chunk_rows = rows.div_ceil(row_chunks);
    let row_chunks = rows.div_ceil(chunk_rows);
    let splits = if parallel && row_chunks == 1 && kdim >= 2048 {
        2
    } else {
        1
    };
    let split_k = kdim.div_ceil(splits);
    let block_k = (BLOCK_ELEMS / chunk_rows).clamp(64, 1024).min(split_k);
    Cut {
        row_chunks,
        chunk_rows,
        splits,
        split_k,
        block_k,
    }
}

/// What the chunks of one call share (addresses as integers: the buffers
/// outlive the call's chunks, see [`run`]).
struct Ctx {
    plan: usize,
    x: usize,
    w: usize,
    packed: usize,
    sums: usize,
    cut: Cut,
}

/// Runs `plan` on typed buffers (module docs).
///
/// # Safety
/// `x`, `w`, `y` must be row-major buffers of the dims the plan was built
/// from, and `y` must not overlap `x` or `w`.
pub(crate) unsafe fn run<T: ConvElement>(
    plan: &WgradPlan,
    x: &BufferView<'_>,
    w: &BufferView<'_>,
    y: &BufferView<'_>,
) -> Result<(), String> {
    debug_assert_eq!(
        x.dims.iter().map(|&d| d as usize).product::<usize>(),
        plan.lhs_len
    );
    let (rows, kdim, f) = (plan.rows(), plan.kdim(), plan.features);
    let work = plan.work();
    let donate = crate::host_kernels::donation::enabled() && work >= super::DONATE_WORK;
    let wake = work >= super::WAKE_WORK;
    let cut = cut(plan, donate);
    // 1. The window operand as a row-major [images·taps, F] matrix.
    let mut packed = alloc_vec::<T>(kdim * f, T::default())?;
    let mut sums = alloc_vec::<T>(
        cut.row_chunks * cut.splits * cut.chunk_rows * f,
        T::default(),
    )?;
    let ctx = Arc::new(Ctx {
        plan: plan as *const WgradPlan as usize,
        x: x.data as usize,
        w: w.data as usize,
        packed: packed.as_mut_ptr() as usize,
        sums: sums.as_mut_ptr() as usize,
        cut,
    });
    let pack_chunks = plan.images;
    let c = ctx.clone();
    // SAFETY: `run` returns only after every chunk has finished, so the
    // plan and buffers outlive them; chunks write disjoint parts of
    // `packed` (one image each).
    let pack = move |img: usize| unsafe { c.pack::<T>(img) };
    let c = ctx.clone();
    // SAFETY: as above; chunks write disjoint slots of `sums`.
    let body = move |i: usize| unsafe { c.chunk::<T>(i) };
    let chunks = cut.row_chunks * cut.splits;
    if donate {
        crate::host_kernels::donation::run_shared(pack_chunks, wake, pack)?;
        crate::host_kernels::donation::run_shared(chunks, wake, body)?;
    } else {
        (0..pack_chunks).for_each(pack);
        (0..chunks).for_each(body);
    }
    // 3. Sum the splits and write the result.
    let yp = y.data as *mut T;
    for r in 0..rows {
        let (rc, k) = (r / cut.chunk_rows, r % cut.chunk_rows);
        let (b, p) = (r / plan.positions, r % plan.positions);
        let o = b * plan.out_b + plan.pos_out[p];
        for j in 0..f {
            let mut v = T::default();
            for s in 0..cut.splits {
                v = v + sums[((rc * cut.splits + s) * cut.chunk_rows + k) * f + j];
            }
            // SAFETY: row (b, p), feature j lies inside the result.
            unsafe { *yp.add(o + j * plan.out_f) = v };
        }
    }
    debug_assert!(plan.out_len >= rows * f);
    drop(ctx);
    drop(packed);
    Ok(())
}

impl Ctx {
    /// Packs image `img`'s `[taps, F]` rows of the window operand.
    ///
    /// # Safety
    /// See [`run`].
    unsafe fn pack<T: ConvElement>(&self, img: usize) {
        // SAFETY: see the caller.
        let plan = unsafe { &*(self.plan as *const WgradPlan) };
        let (f, taps) = (plan.features, plan.taps);
        let w = self.w as *const T;
        // SAFETY: image img's rows of `packed`, written by this chunk only.
        let dst = unsafe {
            std::slice::from_raw_parts_mut((self.packed as *mut T).add(img * taps * f), taps * f)
        };
        let base = img * plan.rhs_i;
        // Blocks of 16 features × 64 taps: reads along taps, writes along
        // features, both within a few cache lines.
        for j0 in (0..f).step_by(16) {
            let j1 = (j0 + 16).min(f);
            for t0 in (0..taps).step_by(64) {
                let t1 = (t0 + 64).min(taps);
                for j in j0..j1 {
                    let src = base + j * plan.rhs_o;
                    for t in t0..t1 {
                        // SAFETY: feature j, tap t of image img lies inside
                        // the rhs.
                        dst[t * f + j] = unsafe { *w.add(src + t * plan.rhs_t) };
                    }
                }
            }
        }
    }

    /// Row chunk `i / splits`, contraction part `i % splits`, into its sum
    /// slot.
    ///
    /// # Safety
    /// See [`run`].
    unsafe fn chunk<T: ConvElement>(&self, i: usize) {
        // SAFETY: see the caller.
        let plan = unsafe { &*(self.plan as *const WgradPlan) };
        let cut = self.cut;
        let (rc, s) = (i / cut.splits, i % cut.splits);
        let r0 = rc * cut.chunk_rows;
        let rows = plan.rows();
        if r0 >= rows {
            return;
        }
        let mr = cut.chunk_rows.min(rows - r0);
        let f = plan.features;
        let k0 = s * cut.split_k;
        let k1 = plan.kdim().min(k0 + cut.split_k);
        let mut block: Vec<T> = Vec::new();
        if block.try_reserve_exact(mr * cut.block_k).is_err() {
            panic!("out of memory allocating a weight-gradient im2col block");
        }
        block.resize(mr * cut.block_k, T::default());
        // SAFETY: slot i of `sums`, written by this chunk only.
        let sum = unsafe { (self.sums as *mut T).add(i * cut.chunk_rows * f) };
        let x = self.x as *const T;
        let mut k = k0;
        while k < k1 {
            let kc = cut.block_k.min(k1 - k);
            for rr in 0..mr {
                // SAFETY: x is this plan's lhs.
                unsafe { plan.gather(x, r0 + rr, k, &mut block[rr * kc..][..kc]) };
            }
            // SAFETY: block is [mr, kc] row-major, packed rows k.. are
            // [kc, f] row-major, the sum slot is [mr, f] row-major.
            unsafe {
                T::mul_acc(
                    mr,
                    kc,
                    f,
                    block.as_ptr(),
                    kc as isize,
                    1,
                    (self.packed as *const T).add(k * f),
                    f as isize,
                    1,
                    sum,
                    f as isize,
                    1,
                )
            };
            k += kc;
        }
    }
}
