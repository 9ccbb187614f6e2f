//! Depthwise convolutions (one input feature per group), vectorised.
//!
//! Two forms reach this kernel, both 1-D or 2-D:
//!
//! - **Forward / input gradient**: `feature_group_count = C` with one lhs
//!   feature per group (a depthwise forward, or its input gradient: the
//!   same form with a reversed window and, for a strided forward, lhs
//!   dilation). Each output plane `(b, o)` is a 2-D correlation of the input
//!   plane `(b, o / m)` with the `KH×KW` window of output feature `o`
//!   (`m` output features per group: the channel multiplier).
//! - **Weight gradient**: `batch_group_count = C` with one lhs batch entry
//!   per group (how JAX and torch_xla spell a grouped weight gradient: the
//!   lhs is the input with batch and feature swapped, the rhs the output
//!   gradient). Each result plane is the sum over the original batch of a
//!   correlation with a large window (the output gradient) and a small
//!   result (the kernel's size).
//!
//! How: per plane, the input is copied once into a zero-padded (and, for
//! lhs dilation, zero-dilated) buffer whose columns are split by phase
//! (column `c` stored at `(c mod s)·Wq + c / s` for the column step `s`), so
//! every tap reads one contiguous run with no border test. The window is
//! copied in position order (reversal resolved there). Then:
//!
//! - small windows (**axpy**): for each output row and each block of 16
//!   output columns, the taps are summed into a 16-lane accumulator;
//! - large windows with a small result (**dot**, the weight gradient): each
//!   result element is a dot product of window rows with input rows,
//!   16 lanes wide, the window rows zero-padded to whole lanes.
//!
//! The lane loops are plain safe Rust that LLVM vectorises; the plane loop
//! is compiled three times (AVX-512, AVX2+FMA, baseline) and picked at run
//! time. Planes are cut into chunks posted for waiting threads, as the
//! GEMM path does.

use super::{alloc_vec, output_size, ConvConfig, ConvElement, DONATE_WORK, WAKE_WORK};
use super::{config::row_major_strides, BufferView};
use std::sync::Arc;

/// Lanes of one accumulator block.
const L: usize = 16;
/// Target multiply-adds per posted chunk.
const CHUNK_WORK: usize = 1 << 17;

/// Which of the two forms (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Forward,
    WeightGrad,
}

/// One depthwise convolution, checked against its operand dims.
#[derive(Debug, Clone)]
pub struct DwPlan {
    form: Form,
    /// Output planes.
    planes: usize,
    /// Output features per group (`m`), and groups.
    mult: usize,
    groups: usize,
    /// Input planes summed into each output plane (the original batch for
    /// the weight gradient, 1 for the forward form).
    red: usize,
    /// Lhs batch / feature strides; rhs in / out feature strides; result
    /// batch / feature strides.
    x_b: usize,
    x_f: usize,
    k_i: usize,
    k_o: usize,
    y_b: usize,
    y_f: usize,
    /// Spatial sizes `[h, w]` (1-D: `h = 1`) of lhs, window and result.
    ins: [usize; 2],
    ks: [usize; 2],
    os: [usize; 2],
    /// Spatial strides of lhs, rhs and result.
    xs: [usize; 2],
    kst: [usize; 2],
    ys: [usize; 2],
    stride: [usize; 2],
    dil: [usize; 2],
    ldil: [usize; 2],
    pad: [i64; 2],
    rev: [bool; 2],
    /// The dot algorithm (large window) instead of axpy.
    dot: bool,
}

impl DwPlan {
    /// The plan when `cfg` with these dims is a depthwise convolution this
    /// kernel takes (1-D or 2-D, either form); `None` otherwise (the general
    /// kernel then checks the dims and reports any mismatch).
    pub fn new(cfg: &ConvConfig, lhs: &[i64], rhs: &[i64], out: &[i64]) -> Option<DwPlan> {
        let nsp = cfg.spatial();
        let rank = nsp + 2;
        if !(1..=2).contains(&nsp) || lhs.len() != rank || rhs.len() != rank || out.len() != rank {
            return None;
        }
        if lhs.iter().chain(rhs).chain(out).any(|&d| d <= 0) {
            return None;
        }
        let (fg, bg) = (cfg.groups, cfg.batch_groups);
        let (n, c) = (lhs[cfg.lhs[0]], lhs[cfg.lhs[1]]);
        let (ki, ko) = (rhs[cfg.rhs[0]], rhs[cfg.rhs[1]]);
        let (on, of) = (out[cfg.out[0]], out[cfg.out[1]]);
        let form = if fg > 1 && bg == 1 && ki == 1 && c == fg && ko % fg == 0 && on == n {
            Form::Forward
        } else if bg > 1 && fg == 1 && n == bg && on == 1 && c == ki && ko % bg == 0 {
            Form::WeightGrad
        } else {
            return None;
        };
        if of != ko {
            return None;
        }
        for i in 0..nsp {
            let want = output_size(
                lhs[cfg.lhs[2 + i]],
                rhs[cfg.rhs[2 + i]],
                cfg.stride[i],
                cfg.pad_lo[i],
                cfg.pad_hi[i],
                cfg.lhs_dilation[i],
                cfg.rhs_dilation[i],
            );
            if want != Some(out[cfg.out[2 + i]]) {
                return None;
            }
            if cfg.stride[i] < 1 || cfg.lhs_dilation[i] < 1 || cfg.rhs_dilation[i] < 1 {
                return None;
            }
        }
        let (ls, rs, ys) = (
            row_major_strides(lhs),
            row_major_strides(rhs),
            row_major_strides(out),
        );
        // Spatial entries as [h, w]; a 1-D convolution has h = 1.
        let sp = |f: &dyn Fn(usize) -> usize, one: usize| -> [usize; 2] {
            if nsp == 1 {
                [one, f(0)]
            } else {
                [f(0), f(1)]
            }
        };
        let ins = sp(&|i| lhs[cfg.lhs[2 + i]] as usize, 1);
        let ks = sp(&|i| rhs[cfg.rhs[2 + i]] as usize, 1);
        let os = sp(&|i| out[cfg.out[2 + i]] as usize, 1);
        let xs = sp(&|i| ls[cfg.lhs[2 + i]], 0);
        let kst = sp(&|i| rs[cfg.rhs[2 + i]], 0);
        let yss = sp(&|i| ys[cfg.out[2 + i]], 0);
        let stride = sp(&|i| cfg.stride[i] as usize, 1);
        let dil = sp(&|i| cfg.rhs_dilation[i] as usize, 1);
        let ldil = sp(&|i| cfg.lhs_dilation[i] as usize, 1);
        let pad = if nsp == 1 {
            [0, cfg.pad_lo[0]]
        } else {
            [cfg.pad_lo[0], cfg.pad_lo[1]]
        };
        let rev = if nsp == 1 {
            [false, cfg.reverse[0]]
        } else {
            [cfg.reverse[0], cfg.reverse[1]]
        };
        // Buffer sizes must stay reasonable (a huge dilation or padding is
        // left to the general kernel).
        let span = |i: usize| (os[i] - 1) * stride[i] + (ks[i] - 1) * dil[i] + 1;
        if span(0).checked_mul(span(1) + 2 * L)? > (1 << 28) {
            return None;
        }
        let groups = (fg * bg) as usize;
        let mult = ko as usize / groups;
        let (planes, red) = match form {
            Form::Forward => (n as usize * ko as usize, 1),
            Form::WeightGrad => (ko as usize, c as usize),
        };
        // The weight gradient's window is the output gradient: large, with
        // a small result. A dot along the window row wins there.
        let dot = ldil == [1, 1] && ks[1] >= 8 && ks[1] > os[1];
        Some(DwPlan {
            form,
            planes,
            mult,
            groups,
            red,
            x_b: ls[cfg.lhs[0]],
            x_f: ls[cfg.lhs[1]],
            k_i: rs[cfg.rhs[0]],
            k_o: rs[cfg.rhs[1]],
            y_b: ys[cfg.out[0]],
            y_f: ys[cfg.out[1]],
            ins,
            ks,
            os,
            xs,
            kst,
            ys: yss,
            stride,
            dil,
            ldil,
            pad,
            rev,
            dot,
        })
    }

    /// Multiply-adds of the whole convolution (counting padding taps).
    pub fn work(&self) -> usize {
        self.planes * self.red * self.os[0] * self.os[1] * self.ks[0] * self.ks[1]
    }

    /// Whether the large-window (dot) algorithm runs.
    pub fn uses_dot(&self) -> bool {
        self.dot
    }

    /// Column step of the phase split: the output stride for axpy, the
    /// window dilation for dot (the step between consecutive reads).
    fn phase(&self) -> usize {
        if self.dot {
            self.dil[1]
        } else {
            self.stride[1]
        }
    }

    /// Rows and columns (dilated, padded coordinates) the taps read.
    fn span(&self) -> [usize; 2] {
        let s = |i: usize| (self.os[i] - 1) * self.stride[i] + (self.ks[i] - 1) * self.dil[i] + 1;
        [s(0), s(1)]
    }

    /// Window row length in the copy: padded to whole lanes for dot.
    fn kw_pad(&self) -> usize {
        if self.dot {
            self.ks[1].div_ceil(L) * L
        } else {
            self.ks[1]
        }
    }

    /// Output row length in the accumulator: whole lanes for axpy.
    fn ow_pad(&self) -> usize {
        if self.dot {
            self.os[1]
        } else {
            self.os[1].div_ceil(L) * L
        }
    }

    /// Columns of one phase of a buffer row: enough for every read.
    fn wq(&self) -> usize {
        let p = self.phase();
        if self.dot {
            ((self.os[1] - 1) * self.stride[1]) / p + self.kw_pad() + 1
        } else {
            ((self.ks[1] - 1) * self.dil[1]) / p + self.ow_pad() + 1
        }
    }

    /// `(result offset, lhs base, lhs step, rhs base, rhs step)` of plane `j`.
    fn plane(&self, j: usize) -> (usize, usize, usize, usize, usize) {
        match self.form {
            Form::Forward => {
                let per = self.groups * self.mult;
                let (b, o) = (j / per, j % per);
                let g = o / self.mult;
                (
                    b * self.y_b + o * self.y_f,
                    b * self.x_b + g * self.x_f,
                    0,
                    o * self.k_o,
                    0,
                )
            }
            Form::WeightGrad => {
                let g = j / self.mult;
                (j * self.y_f, g * self.x_b, self.x_f, j * self.k_o, self.k_i)
            }
        }
    }
}

/// Scratch of one chunk.
struct Scratch<T> {
    /// Padded, phase-split input plane: `span[0]` rows of `phase·wq`.
    buf: Vec<T>,
    /// The window in position order: `ks[0]` rows of `kw_pad`.
    win: Vec<T>,
    /// The result plane, `os[0]·os[1]`.
    acc: Vec<T>,
    /// One output row, `ow_pad` (axpy).
    row: Vec<T>,
    /// Which buffer rows hold input (the others are all zeros).
    live: Vec<bool>,
    /// Dot: one lane accumulator per result element, summed over the
    /// plane's input planes before the lanes are added up.
    lanes: Vec<[T; L]>,
}

/// Runs a depthwise convolution.
///
/// # Safety
/// `x`, `w`, `y` must be row-major buffers of the dims the plan was built
/// from, and `y` must not overlap `x` or `w`.
pub(crate) unsafe fn run<T: ConvElement + 'static>(
    plan: &DwPlan,
    x: &BufferView<'_>,
    w: &BufferView<'_>,
    y: &BufferView<'_>,
) -> Result<(), String> {
    let plane_work = (plan.work() / plan.planes.max(1)).max(1);
    let per_chunk = (CHUNK_WORK / plane_work).clamp(1, plan.planes.max(1));
    let mut chunks = plan.planes.div_ceil(per_chunk);
    let work = plan.work();
    let donate = super::super::donation::enabled() && work >= DONATE_WORK;
    let per_chunk = if donate && chunks < 2 && plan.planes >= 2 {
        chunks = 2;
        plan.planes.div_ceil(2)
    } else {
        per_chunk
    };
    // Check the scratch sizes once, here, where failure is an error.
    let span = plan.span();
    let bufn = span[0]
        .checked_mul(plan.phase() * plan.wq())
        .ok_or("hlobridge_conv: depthwise buffer too large")?;
    drop(alloc_vec::<T>(bufn, T::default())?);
    let ctx = Arc::new(Ctx {
        element_outer: plan.dot && element_outer(),
        plan: plan.clone(),
        x: x.data as usize,
        w: w.data as usize,
        y: y.data as usize,
        per_chunk,
    });
    let body = move |i: usize| {
        // SAFETY: the buffers outlive every chunk (the caller returns only
        // after all have finished) and chunks write disjoint planes.
        unsafe { ctx.chunk::<T>(i) }
    };
    if donate {
        super::super::donation::run_shared(chunks, work >= WAKE_WORK, body)
    } else {
        for i in 0..chunks {
            body(i);
        }
        Ok(())
    }
}

struct Ctx {
    /// The dot's loop order ([`element_outer`]).
    element_outer: bool,
    plan: DwPlan,
    x: usize,
    w: usize,
    y: usize,
    per_chunk: usize,
}

impl Ctx {
    /// Planes `i·per_chunk ..` of the result.
    ///
    /// # Safety
    /// As [`run`]'s; chunks write disjoint planes.
    unsafe fn chunk<T: ConvElement>(&self, i: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F; the rest is the caller's contract.
                return unsafe { chunk_avx512::<T>(self, i) };
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: the CPU has AVX2 and FMA; the rest is the caller's contract.
                return unsafe { chunk_avx2::<T>(self, i) };
            }
        }
        // SAFETY: the caller's contract.
        unsafe { chunk_body::<T>(self, i) }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn chunk_avx512<T: ConvElement>(ctx: &Ctx, i: usize) {
    // SAFETY: the caller's contract.
    unsafe { chunk_body::<T>(ctx, i) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn chunk_avx2<T: ConvElement>(ctx: &Ctx, i: usize) {
    // SAFETY: the caller's contract.
    unsafe { chunk_body::<T>(ctx, i) }
}

/// The planes of chunk `i` (inlined into each feature-level variant).
///
/// # Safety
/// As [`run`]'s.
#[inline(always)]
unsafe fn chunk_body<T: ConvElement>(ctx: &Ctx, i: usize) {
    let p = &ctx.plan;
    let j0 = i * ctx.per_chunk;
    if j0 >= p.planes {
        return;
    }
    let j1 = (j0 + ctx.per_chunk).min(p.planes);
    let span = p.span();
    let (ph, wq, kwp, owp) = (p.phase(), p.wq(), p.kw_pad(), p.ow_pad());
    let rowlen = ph * wq;
    let mut s = Scratch {
        buf: vec![T::default(); span[0] * rowlen],
        win: vec![T::default(); p.ks[0] * kwp],
        acc: vec![T::default(); p.os[0] * p.os[1]],
        row: vec![T::default(); owp],
        live: vec![false; span[0]],
        lanes: vec![[T::default(); L]; if p.dot { p.os[0] * p.os[1] } else { 0 }],
    };
    let (x, w, y) = (ctx.x as *const T, ctx.w as *const T, ctx.y as *mut T);
    // Which buffer rows hold input rows: the same for every plane.
    let mut src_row = vec![usize::MAX; span[0]];
    for (r, slot) in src_row.iter_mut().enumerate() {
        let pos = r as i64 - p.pad[0];
        let d = p.ldil[0] as i64;
        if pos >= 0 && pos % d == 0 && ((pos / d) as usize) < p.ins[0] {
            *slot = (pos / d) as usize;
            s.live[r] = true;
        }
    }
    // Buffer column of each input column (dilated, padded, phase-split),
    // or none where it falls outside the span.
    let col_of: Vec<usize> = (0..p.ins[1])
        .map(|c| {
            let pos = (c * p.ldil[1]) as i64 + p.pad[1];
            if pos < 0 || pos as usize >= span[1] {
                usize::MAX
            } else {
                let pos = pos as usize;
                (pos % ph) * wq + pos / ph
            }
        })
        .collect();
    // Contiguous input rows that land in one phase contiguously: one copy
    // per row, `(first column, end column, buffer column)`.
    let run_cols = if ph == 1 && p.ldil[1] == 1 && p.xs[1] == 1 {
        let c0 = col_of.iter().position(|&b| b != usize::MAX);
        c0.map(|c0| {
            let n = col_of[c0..]
                .iter()
                .take_while(|&&b| b != usize::MAX)
                .count();
            (c0, c0 + n, col_of[c0])
        })
    } else {
        None
    };
    for j in j0..j1 {
        let (yo, xb, xstep, kb, kstep) = p.plane(j);
        if p.dot {
            s.lanes.fill([T::default(); L]);
        }
        for r in 0..p.red {
            // The input plane into the buffer (the same elements every
            // time: the padding and holes stay zero from the allocation).
            let xo = xb + r * xstep;
            for (br, &ir) in src_row.iter().enumerate() {
                if ir == usize::MAX {
                    continue;
                }
                let dst = &mut s.buf[br * rowlen..][..rowlen];
                let src = xo + ir * p.xs[0];
                if let Some((c0, c1, d0)) = run_cols {
                    // SAFETY: columns c0..c1 of row ir of this lhs plane, contiguous.
                    let from = unsafe { std::slice::from_raw_parts(x.add(src + c0), c1 - c0) };
                    dst[d0..d0 + (c1 - c0)].copy_from_slice(from);
                    continue;
                }
                for (c, &bc) in col_of.iter().enumerate() {
                    if bc != usize::MAX {
                        // SAFETY: row ir, column c of this lhs plane.
                        dst[bc] = unsafe { *x.add(src + c * p.xs[1]) };
                    }
                }
            }
            // The window in position order.
            let ko = kb + r * kstep;
            for a in 0..p.ks[0] {
                let wa = if p.rev[0] { p.ks[0] - 1 - a } else { a };
                let dst = &mut s.win[a * kwp..][..kwp];
                if !p.rev[1] && p.kst[1] == 1 {
                    // SAFETY: window row wa of this rhs plane: ks[1]
                    // contiguous elements.
                    let row =
                        unsafe { std::slice::from_raw_parts(w.add(ko + wa * p.kst[0]), p.ks[1]) };
                    dst[..p.ks[1]].copy_from_slice(row);
                    continue;
                }
                for (b, v) in dst[..p.ks[1]].iter_mut().enumerate() {
                    let wb = if p.rev[1] { p.ks[1] - 1 - b } else { b };
                    // SAFETY: window element (wa, wb) of this rhs plane.
                    *v = unsafe { *w.add(ko + wa * p.kst[0] + wb * p.kst[1]) };
                }
            }
            let first = r == 0;
            if p.dot {
                if ctx.element_outer {
                    dot_plane(p, &mut s, wq, kwp);
                } else {
                    dot_rows(p, &mut s, wq, kwp);
                }
            } else {
                axpy_plane(p, &mut s, wq, owp, first);
            }
        }
        if p.dot {
            for (d, l) in s.acc.iter_mut().zip(&s.lanes) {
                *d = l.iter().fold(T::default(), |a, &v| a + v);
            }
        }
        // The result plane out.
        for oh in 0..p.os[0] {
            let src = &s.acc[oh * p.os[1]..][..p.os[1]];
            let base = yo + oh * p.ys[0];
            if p.ys[1] == 1 {
                // SAFETY: row oh of this result plane: os[1] contiguous elements.
                let dst = unsafe { std::slice::from_raw_parts_mut(y.add(base), p.os[1]) };
                dst.copy_from_slice(src);
            } else {
                for (ow, &v) in src.iter().enumerate() {
                    // SAFETY: element (oh, ow) of this result plane.
                    unsafe { *y.add(base + ow * p.ys[1]) = v };
                }
            }
        }
    }
}

/// Small windows: per output row, 16 output columns at a time, every tap
/// summed into one lane block held in registers.
#[inline(always)]
fn axpy_plane<T: ConvElement>(p: &DwPlan, s: &mut Scratch<T>, wq: usize, owp: usize, first: bool) {
    let ph = p.phase();
    let rowlen = ph * wq;
    let kw = p.ks[1];
    // Buffer offset of each tap column (phase-split).
    let starts: Vec<usize> = (0..kw)
        .map(|b| {
            let col = b * p.dil[1];
            (col % ph) * wq + col / ph
        })
        .collect();
    let nblk = owp / L;
    for oh in 0..p.os[0] {
        // Up to 4 lane blocks at once: independent sums hide the adds'
        // latency.
        let mut blk = 0;
        while blk < nblk {
            match nblk - blk {
                1 => axpy_blocks::<T, 1>(p, s, &starts, rowlen, oh, blk),
                2 | 3 => axpy_blocks::<T, 2>(p, s, &starts, rowlen, oh, blk),
                _ => axpy_blocks::<T, 4>(p, s, &starts, rowlen, oh, blk),
            }
            blk += match nblk - blk {
                1 => 1,
                2 | 3 => 2,
                _ => 4,
            };
        }
        let dst = &mut s.acc[oh * p.os[1]..][..p.os[1]];
        if first {
            dst.copy_from_slice(&s.row[..p.os[1]]);
        } else {
            for (d, &v) in dst.iter_mut().zip(&s.row) {
                *d = *d + v;
            }
        }
    }
}

/// Output row `oh`, lane blocks `blk..blk + NB`, into `s.row`.
#[inline(always)]
fn axpy_blocks<T: ConvElement, const NB: usize>(
    p: &DwPlan,
    s: &mut Scratch<T>,
    starts: &[usize],
    rowlen: usize,
    oh: usize,
    blk: usize,
) {
    let kw = p.ks[1];
    let mut acc = [[T::default(); L]; NB];
    for a in 0..p.ks[0] {
        let br = oh * p.stride[0] + a * p.dil[0];
        if !s.live[br] {
            continue;
        }
        let brow = &s.buf[br * rowlen + blk * L..(br + 1) * rowlen];
        let wrow = &s.win[a * kw..][..kw];
        for (&wv, &st) in wrow.iter().zip(starts) {
            for (q, accq) in acc.iter_mut().enumerate() {
                let xs: &[T; L] = brow[st + q * L..][..L].try_into().expect("lane block");
                for l in 0..L {
                    accq[l] = accq[l] + wv * xs[l];
                }
            }
        }
    }
    for (q, accq) in acc.iter().enumerate() {
        s.row[(blk + q) * L..][..L].copy_from_slice(accq);
    }
}

/// For timing tests: run the weight gradient's dot result element outer
/// ([`dot_plane`]) instead of window row outer ([`dot_rows`]), as
/// `HLOBRIDGE_CONV_DW_WGRAD=elements` does.
static DOT_ELEMENT_OUTER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// For tests: see [`DOT_ELEMENT_OUTER`].
#[cfg(test)]
pub(super) fn set_dot_element_outer_for_tests(on: bool) {
    DOT_ELEMENT_OUTER.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether this call's dot runs result element outer: the test hook, or
/// `HLOBRIDGE_CONV_DW_WGRAD=elements` (read per call, so that one process
/// can time both).
fn element_outer() -> bool {
    DOT_ELEMENT_OUTER.load(std::sync::atomic::Ordering::Relaxed)
        || hlobridge_config::get(hlobridge_config::Var::ConvDwWgrad)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("elements"))
}

/// Large windows, small results (the weight gradient), window row outer:
/// every result element `(oh, ow)` accumulates, in its own 16 lanes, the
/// products of the window rows with the input rows it meets, each block of
/// window lanes loaded once for all result elements. The lanes are added up
/// once per plane (the caller), after all its input planes.
#[inline(always)]
fn dot_rows<T: ConvElement>(p: &DwPlan, s: &mut Scratch<T>, wq: usize, kwp: usize) {
    let ph = p.phase();
    let rowlen = ph * wq;
    let kw = p.ks[1];
    let (full, rem) = (kw / L, kw % L);
    let ow_n = p.os[1];
    for a in 0..p.ks[0] {
        let ws = &s.win[a * kwp..][..kwp];
        for oh in 0..p.os[0] {
            let br = oh * p.stride[0] + a * p.dil[0];
            if !s.live[br] {
                continue;
            }
            let brow = &s.buf[br * rowlen..][..rowlen];
            let lanes = &mut s.lanes[oh * ow_n..][..ow_n];
            for (ow, acc) in lanes.iter_mut().enumerate() {
                let col = ow * p.stride[1];
                let xs = &brow[(col % ph) * wq + col / ph..];
                // Sums in locals (registers: an accumulator in memory kept
                // LLVM from vectorising the lanes).
                let mut sum = *acc;
                for blk in 0..full {
                    let wc: &[T; L] = ws[blk * L..][..L].try_into().expect("lane block");
                    let xc: &[T; L] = xs[blk * L..][..L].try_into().expect("lane block");
                    for l in 0..L {
                        sum[l] = sum[l] + wc[l] * xc[l];
                    }
                }
                if rem > 0 {
                    // The row's tail: lanes past the window (its zero
                    // padding) are masked, not multiplied: 0·inf would be
                    // NaN. Both rows hold whole lane blocks (the window row
                    // is padded to kwp, the buffer row reaches past it).
                    let wc: &[T; L] = ws[full * L..][..L].try_into().expect("lane block");
                    let xc: &[T; L] = xs[full * L..][..L].try_into().expect("lane block");
                    for l in 0..L {
                        let x = if l < rem { xc[l] } else { T::default() };
                        sum[l] = sum[l] + wc[l] * x;
                    }
                }
                *acc = sum;
            }
        }
    }
}

/// Large windows, small results (the weight gradient): each result element
/// `(oh, ow)` a dot product of the (zero-padded) window rows with the input
/// rows it meets, in two 16-lane accumulators held in registers, then added
/// to the element's lanes in `s.lanes`; the caller adds the lanes up once
/// per plane, after all its input planes.
#[inline(always)]
fn dot_plane<T: ConvElement>(p: &DwPlan, s: &mut Scratch<T>, wq: usize, kwp: usize) {
    let ph = p.phase();
    let rowlen = ph * wq;
    let (kw, blocks) = (p.ks[1], kwp / L);
    for oh in 0..p.os[0] {
        for ow in 0..p.os[1] {
            let col = ow * p.stride[1];
            let start = (col % ph) * wq + col / ph;
            let mut lanes = [[T::default(); L]; 2];
            let mut k = 0usize;
            for a in 0..p.ks[0] {
                let br = oh * p.stride[0] + a * p.dil[0];
                if !s.live[br] {
                    continue;
                }
                let xs = &s.buf[br * rowlen + start..][..kwp];
                let ws = &s.win[a * kwp..][..kwp];
                for (xc, wc) in xs.as_chunks::<L>().0.iter().zip(ws.as_chunks::<L>().0) {
                    let acc = &mut lanes[k & 1];
                    // Lanes past the window (its zero padding) are masked,
                    // not multiplied: 0·inf would be NaN.
                    let rem = kw - (k % blocks) * L;
                    for l in 0..L {
                        let v = wc[l] * xc[l];
                        acc[l] = acc[l] + if l < rem { v } else { T::default() };
                    }
                    k += 1;
                }
            }
            let d = &mut s.lanes[oh * p.os[1] + ow];
            let mut sum = *d;
            for l in 0..L {
                sum[l] = sum[l] + (lanes[0][l] + lanes[1][l]);
            }
            *d = sum;
        }
    }
}
