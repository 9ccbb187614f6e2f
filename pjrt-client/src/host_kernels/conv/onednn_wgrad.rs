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

use super::super::onednn::{self, ConvGeometry, Md, OneDnn, Pd, Primitive, Scratch};
use super::config::{plain_nonempty, row_major_strides, spatial_sizes};
use super::ConvConfig;
use crate::host_kernels::frame::BufferView;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, OnceLock};

/// Everything that decides a primitive: oneDNN's dims, strides and
/// parameters, and the operands' user strides.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    src: (Vec<i64>, Vec<i64>),
    diff_dst: (Vec<i64>, Vec<i64>),
    diff_weights: (Vec<i64>, Vec<i64>),
    strides: Vec<i64>,
    dilates: Vec<i64>,
    pad_l: Vec<i64>,
    pad_r: Vec<i64>,
}

/// One operand's user layout, and the primitive's where it differs.
struct Side {
    user: Md,
    inner: Option<Inner>,
}

/// The primitive's own layout of an operand, the reorder between it and
/// the user's, and that reorder's scratchpad layout.
struct Inner {
    md: Md,
    reorder: Primitive,
    scratchpad: Md,
}

impl Inner {
    /// Reorders `from` (in `from_md`) into `to` (in `to_md`).
    ///
    /// # Safety
    /// Each buffer must hold its layout's bytes, and they must not overlap.
    unsafe fn run(
        &self,
        from_md: &Md,
        from: NonNull<u8>,
        to_md: &Md,
        to: NonNull<u8>,
    ) -> Result<(), String> {
        let scratch = Scratch::new(self.scratchpad.size())?;
        // SAFETY: the caller's buffers, and a scratchpad of its layout's size.
        unsafe {
            self.reorder.execute(&[
                (onednn::ARG_SRC, from_md, from),
                (onednn::ARG_DST, to_md, to),
                (onednn::ARG_SCRATCHPAD, &self.scratchpad, scratch.ptr()),
            ])
        }
    }
}

/// A built primitive with its operands' layouts.
struct Plan {
    prim: Primitive,
    src: Side,
    diff_dst: Side,
    diff_weights: Side,
    scratchpad: Md,
    /// The implementation oneDNN chose, for logs and tests.
    implementation: String,
}

/// One call's mapping: the key, and where the (possibly cropped) input
/// starts.
struct Mapped {
    key: Key,
    src_offset: usize,
}

thread_local! {
    /// Set by [`without_onednn`]: this thread's calls skip oneDNN.
    static SKIP: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with this thread's convolutions on the host kernel's own loops
/// (tests of those loops, where the library is loaded).
pub fn without_onednn<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SKIP.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SKIP.with(|s| s.replace(true)));
    f()
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
        let mut h = ins[i];
        let mut pl = cfg.pad_lo[i];
        let sp = st(&ls, cfg.lhs[2 + i]);
        if pl < 0 {
            src_offset += (-pl * sp) as usize;
            h += pl;
            pl = 0;
        }
        // The high padding the window reaches (≤ the op's own).
        let mut pr = (k - 1) * d + (ho - 1) * s + 1 - h - pl;
        if pr < 0 {
            h += pr;
            pr = 0;
        }
        if h <= 0 || s < 1 || d < 1 {
            return None;
        }
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
            src: (src_dims, src_strides),
            diff_dst: (dst_dims, dst_strides),
            diff_weights: (w_dims, w_strides),
            strides,
            dilates,
            pad_l,
            pad_r,
        },
        src_offset,
    })
}

fn side(lib: &'static OneDnn, user: Md, inner: Md, to_inner: bool) -> Result<Side, String> {
    if user.same(&inner) {
        return Ok(Side { user, inner: None });
    }
    let pd = if to_inner {
        lib.reorder_pd(&user, &inner)?
    } else {
        lib.reorder_pd(&inner, &user)?
    };
    Ok(Side {
        user,
        inner: Some(Inner {
            reorder: pd.primitive()?,
            scratchpad: pd.md(onednn::QUERY_SCRATCHPAD_MD)?,
            md: inner,
        }),
    })
}

fn build(lib: &'static OneDnn, k: &Key) -> Result<Plan, String> {
    let src_any = lib.md_any(&k.src.0)?;
    let dst_any = lib.md_any(&k.diff_dst.0)?;
    let w_any = lib.md_any(&k.diff_weights.0)?;
    let geometry = ConvGeometry::new(&k.strides, &k.dilates, &k.pad_l, &k.pad_r)?;
    let hint = lib.conv_forward_pd(&src_any, &w_any, &dst_any, &geometry)?;
    let pd: Pd = lib.conv_backward_weights_pd(&src_any, &w_any, &dst_any, &geometry, &hint)?;
    // An operand's user layout (its dims and strides) against the one the
    // primitive chose (`query`); inputs reorder into it, the result out.
    let operand = |(dims, strides): &(Vec<i64>, Vec<i64>), query, input| {
        side(lib, lib.md_strided(dims, strides)?, pd.md(query)?, input)
    };
    Ok(Plan {
        prim: pd.primitive()?,
        src: operand(&k.src, onednn::QUERY_SRC_MD, true)?,
        diff_dst: operand(&k.diff_dst, onednn::QUERY_DIFF_DST_MD, true)?,
        diff_weights: operand(&k.diff_weights, onednn::QUERY_DIFF_WEIGHTS_MD, false)?,
        scratchpad: pd.md(onednn::QUERY_SCRATCHPAD_MD)?,
        implementation: pd.implementation(),
    })
}

/// The plan for `k`, built on first use; `Err` is kept too, so a shape
/// oneDNN refuses is asked once.
fn plan(lib: &'static OneDnn, k: &Key) -> Result<Arc<Plan>, String> {
    type Cache = Mutex<HashMap<Key, Result<Arc<Plan>, String>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(p) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(k) {
        return p.clone();
    }
    let built = build(lib, k).and_then(|p| {
        // Grouped weight gradients only on a dedicated kernel: oneDNN's
        // generic fallback (`gemm:jit`) ran MobileNetV3-L's 5×5 depthwise
        // ones at 0.6 G multiply-adds/s, below the host kernel's own.
        if k.diff_weights.0.len() > k.src.0.len() && p.implementation.contains("gemm") {
            return Err(format!("grouped weight gradient on {}", p.implementation));
        }
        Ok(Arc::new(p))
    });
    match &built {
        Ok(p) => {
            tracing::debug!(key = ?k, implementation = %p.implementation, "oneDNN weight gradient built")
        }
        Err(why) => {
            tracing::info!(key = ?k, %why, "oneDNN refused a weight gradient; the host kernel runs it")
        }
    }
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(k.clone(), built.clone());
    built
}

/// The implementation oneDNN chooses for this f32 convolution, or why it
/// is not taken (for tests and benches).
pub fn implementation(
    cfg: &ConvConfig,
    lhs: &[i64],
    rhs: &[i64],
    out: &[i64],
) -> Result<String, String> {
    let lib = OneDnn::get().ok_or("oneDNN is not loaded")?;
    let m = map(cfg, lhs, rhs, out).ok_or("not a weight-gradient form oneDNN takes")?;
    Ok(plan(lib, &m.key)?.implementation.clone())
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
    // An off word at call time skips oneDNN (same-process A/B runs); the
    // library itself is loaded once.
    if SKIP.with(|s| s.get()) || hlobridge_config::is_off(hlobridge_config::Var::OneDnnLibrary) {
        return Ok(false);
    }
    let Some(lib) = OneDnn::get() else {
        return Ok(false);
    };
    let Some(m) = map(cfg, x.dims, w.dims, y.dims) else {
        return Ok(false);
    };
    let Ok(p) = plan(lib, &m.key) else {
        return Ok(false);
    };
    let (Some(xp), Some(wp), Some(yp)) = (
        NonNull::new(x.data as *mut u8),
        NonNull::new(w.data as *mut u8),
        NonNull::new(y.data as *mut u8),
    ) else {
        return Ok(false);
    };
    // SAFETY: the crop offset is within the lhs (`map` keeps `h > 0`).
    let xp = unsafe { xp.add(m.src_offset * 4) };
    // Inputs: reorder into the primitive's layouts where they differ.
    let mut keep: Vec<Scratch> = Vec::new();
    let mut input = |s: &Side, user: NonNull<u8>| -> Result<NonNull<u8>, String> {
        let Some(inner) = &s.inner else {
            return Ok(user);
        };
        let buf = Scratch::new(inner.md.size())?;
        // SAFETY: `user` holds the operand as `s.user` describes it; `buf`
        // holds `inner.md.size()` bytes.
        unsafe { inner.run(&s.user, user, &inner.md, buf.ptr())? };
        let ptr = buf.ptr();
        keep.push(buf);
        Ok(ptr)
    };
    let src = input(&p.src, xp)?;
    let diff_dst = input(&p.diff_dst, wp)?;
    let scratchpad = Scratch::new(p.scratchpad.size())?;
    let w_inner = match &p.diff_weights.inner {
        Some(inner) => Some((inner, Scratch::new(inner.md.size())?)),
        None => None,
    };
    let (w_md, w_buf) = match &w_inner {
        Some((inner, b)) => (&inner.md, b.ptr()),
        None => (&p.diff_weights.user, yp),
    };
    let src_md = p.src.inner.as_ref().map_or(&p.src.user, |i| &i.md);
    let dst_md = p
        .diff_dst
        .inner
        .as_ref()
        .map_or(&p.diff_dst.user, |i| &i.md);
    // SAFETY: every buffer holds its layout's bytes (the operands by the
    // caller's contract and `map`'s strides, the rest allocated above).
    unsafe {
        p.prim.execute(&[
            (onednn::ARG_SRC, src_md, src),
            (onednn::ARG_DIFF_DST, dst_md, diff_dst),
            (onednn::ARG_DIFF_WEIGHTS, w_md, w_buf),
            (onednn::ARG_SCRATCHPAD, &p.scratchpad, scratchpad.ptr()),
        ])?
    };
    if let Some((inner, b)) = &w_inner {
        // SAFETY: `b` holds the result in `inner.md`'s layout, `yp` the
        // caller's result buffer.
        unsafe { inner.run(&inner.md, b.ptr(), &p.diff_weights.user, yp)? };
    }
    CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(true)
}
