//! Running a convolution on oneDNN ([`super::super::onednn`]): the one
//! place that builds, caches and executes the primitives the host kernel
//! hands over, whichever of the three directions the mapping chose
//! (`onednn_wgrad.rs`: backward weights; `onednn_data.rs`: forward and
//! backward data).
//!
//! A [`Key`] names the three operands in oneDNN's roles (`src`, `weights`,
//! `dst`: dims in oneDNN's order and the user buffer's strides) and the
//! spatial parameters. The primitive is created with `any` layouts so
//! oneDNN picks its own (blocked ones on AVX-512); each operand whose user
//! layout differs gets a reorder, run inside the call. Plans are built once
//! per key and kept for the process; a key oneDNN refuses is kept too, so
//! it is asked once.

use super::super::onednn::{self, ConvGeometry, Md, OneDnn, Pd, Primitive, Scratch};
use crate::host_kernels::frame::BufferView;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, OnceLock};

/// Which oneDNN convolution runs: the inputs and the output in oneDNN's
/// roles differ by direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Direction {
    /// `dst = conv(src, weights)`.
    Forward,
    /// `diff_src` (the `src` operand) from `diff_dst` (`dst`) and `weights`.
    BackwardData,
    /// `diff_weights` (the `weights` operand) from `src` and `diff_dst`.
    BackwardWeights,
}

/// One operand: oneDNN's dims and the user buffer's strides (elements).
pub(super) type Operand = (Vec<i64>, Vec<i64>);

/// Everything that decides a primitive.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub direction: Direction,
    pub src: Operand,
    pub weights: Operand,
    pub dst: Operand,
    pub strides: Vec<i64>,
    /// oneDNN's dilation: 0 is none.
    pub dilates: Vec<i64>,
    pub pad_l: Vec<i64>,
    pub pad_r: Vec<i64>,
}

impl Key {
    /// Whether the weights are grouped (`[G, O/G, I/G, ...]`).
    fn grouped(&self) -> bool {
        self.weights.0.len() > self.src.0.len()
    }
}

/// One spatial dim of a forward convolution's input as oneDNN takes it:
/// for an input of `h` elements (stride `sp` between them), low padding
/// `pl` and a window that reaches `reach` padded positions (`(out − 1)·s +
/// (k − 1)·d + 1`), the input size, low and high padding, and the elements
/// to skip at its start: negative low padding crops the input, and the
/// high padding is what the window reaches (≤ the op's own), cropping the
/// input where negative. `None` when nothing of the input is read.
pub(super) fn input_extent(h: i64, pl: i64, reach: i64, sp: i64) -> Option<(i64, i64, i64, usize)> {
    let (mut h, mut pl, mut offset) = (h, pl, 0usize);
    if pl < 0 {
        offset = (-pl * sp) as usize;
        h += pl;
        pl = 0;
    }
    let mut pr = reach - h - pl;
    if pr < 0 {
        h += pr;
        pr = 0;
    }
    (h > 0).then_some((h, pl, pr, offset))
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

impl Side {
    /// The layout the primitive reads or writes.
    fn md(&self) -> &Md {
        self.inner.as_ref().map_or(&self.user, |i| &i.md)
    }
}

/// A built primitive: its two inputs and one output, each with the
/// execution argument it is passed as.
pub(super) struct Plan {
    prim: Primitive,
    inputs: [(i32, Side); 2],
    output: (i32, Side),
    scratchpad: Md,
    /// The implementation oneDNN chose, for logs and tests.
    pub implementation: String,
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
    let w_any = lib.md_any(&k.weights.0)?;
    let dst_any = lib.md_any(&k.dst.0)?;
    let geometry = ConvGeometry::new(&k.strides, &k.dilates, &k.pad_l, &k.pad_r)?;
    let fwd = lib.conv_forward_pd(&src_any, &w_any, &dst_any, &geometry)?;
    // An operand's user layout (its dims and strides) against the one the
    // primitive chose (`query`); inputs reorder into it, the output out.
    let operand = |pd: &Pd, (dims, strides): &Operand, query, input| {
        side(lib, lib.md_strided(dims, strides)?, pd.md(query)?, input)
    };
    let (pd, inputs, output) = match k.direction {
        Direction::Forward => {
            let i = [
                (
                    onednn::ARG_SRC,
                    operand(&fwd, &k.src, onednn::QUERY_SRC_MD, true)?,
                ),
                (
                    onednn::ARG_WEIGHTS,
                    operand(&fwd, &k.weights, onednn::QUERY_WEIGHTS_MD, true)?,
                ),
            ];
            let o = (
                onednn::ARG_DST,
                operand(&fwd, &k.dst, onednn::QUERY_DST_MD, false)?,
            );
            (fwd, i, o)
        }
        Direction::BackwardData => {
            let pd = lib.conv_backward_data_pd(&src_any, &w_any, &dst_any, &geometry, &fwd)?;
            let i = [
                (
                    onednn::ARG_DIFF_DST,
                    operand(&pd, &k.dst, onednn::QUERY_DIFF_DST_MD, true)?,
                ),
                (
                    onednn::ARG_WEIGHTS,
                    operand(&pd, &k.weights, onednn::QUERY_WEIGHTS_MD, true)?,
                ),
            ];
            let o = (
                onednn::ARG_DIFF_SRC,
                operand(&pd, &k.src, onednn::QUERY_DIFF_SRC_MD, false)?,
            );
            (pd, i, o)
        }
        Direction::BackwardWeights => {
            let pd = lib.conv_backward_weights_pd(&src_any, &w_any, &dst_any, &geometry, &fwd)?;
            let i = [
                (
                    onednn::ARG_SRC,
                    operand(&pd, &k.src, onednn::QUERY_SRC_MD, true)?,
                ),
                (
                    onednn::ARG_DIFF_DST,
                    operand(&pd, &k.dst, onednn::QUERY_DIFF_DST_MD, true)?,
                ),
            ];
            let o = (
                onednn::ARG_DIFF_WEIGHTS,
                operand(&pd, &k.weights, onednn::QUERY_DIFF_WEIGHTS_MD, false)?,
            );
            (pd, i, o)
        }
    };
    Ok(Plan {
        prim: pd.primitive()?,
        inputs,
        output,
        scratchpad: pd.md(onednn::QUERY_SCRATCHPAD_MD)?,
        implementation: pd.implementation(),
    })
}

/// The plan for `k`, built on first use; `Err` is kept too, so a shape
/// oneDNN refuses is asked once.
pub(super) fn plan(lib: &'static OneDnn, k: &Key) -> Result<Arc<Plan>, String> {
    type Cache = Mutex<HashMap<Key, Result<Arc<Plan>, String>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(p) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(k) {
        return p.clone();
    }
    let built = build(lib, k).and_then(|p| {
        // Grouped convolutions only on a dedicated kernel: oneDNN's generic
        // fallbacks (`gemm:jit`, `ref`) ran MobileNetV3-L's 5×5 depthwise
        // weight gradients at 0.6 G multiply-adds/s, below the host
        // kernel's own.
        let generic = p.implementation.contains("gemm") || p.implementation.contains("ref");
        if k.grouped() && generic {
            return Err(format!("grouped convolution on {}", p.implementation));
        }
        Ok(Arc::new(p))
    });
    match &built {
        Ok(p) => {
            tracing::debug!(key = ?k, implementation = %p.implementation, "oneDNN convolution built")
        }
        Err(why) => {
            tracing::info!(key = ?k, %why, "oneDNN refused a convolution; the host kernel runs it")
        }
    }
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(k.clone(), built.clone());
    built
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

/// The library, when this call may use it: loaded, and neither switched
/// off for this thread ([`without_onednn`]) nor by an off word in
/// `HLOBRIDGE_ONEDNN_LIBRARY` at call time (same-process A/B runs; the
/// library itself is loaded once).
pub(super) fn library() -> Option<&'static OneDnn> {
    if SKIP.with(|s| s.get()) || hlobridge_config::is_off(hlobridge_config::Var::OneDnnLibrary) {
        return None;
    }
    OneDnn::get()
}

/// The implementation oneDNN chooses for `key`, or why there is none:
/// `not_taken` when the mapping gave no key (for tests and benches).
pub(super) fn implementation(key: Option<&Key>, not_taken: &str) -> Result<String, String> {
    let lib = library().ok_or("oneDNN is not loaded")?;
    Ok(plan(lib, key.ok_or(not_taken)?)?.implementation.clone())
}

/// The plan for `k` when this call may use the library and it takes `k`.
pub(super) fn planned(k: &Key) -> Option<Arc<Plan>> {
    plan(library()?, k).ok()
}

/// Runs `p` on the host kernel's buffers: the lhs `x` (from element
/// `lhs_offset` on), the rhs at `rhs` (the kernel's, or a copy the mapping
/// made), and the result `y`. The plan's two inputs are the lhs and the
/// rhs in that order in every direction (backward weights: src, diff_dst;
/// forward: src, weights; backward data: diff_dst, weights), its output the
/// result. `Ok(false)` when a buffer is null (nothing run).
///
/// # Safety
/// The buffers must hold the operands as the plan's key describes them
/// (`x` past `lhs_offset`), and `y` must not overlap the others.
pub(super) unsafe fn execute_views(
    p: &Plan,
    x: &BufferView<'_>,
    lhs_offset: usize,
    rhs: *const std::ffi::c_void,
    y: &BufferView<'_>,
) -> Result<bool, String> {
    let (Some(xp), Some(wp), Some(yp)) = (
        NonNull::new(x.data as *mut u8),
        NonNull::new(rhs as *mut u8),
        NonNull::new(y.data as *mut u8),
    ) else {
        return Ok(false);
    };
    // SAFETY: the caller's contract: the offset is within the lhs.
    let xp = unsafe { xp.add(lhs_offset * std::mem::size_of::<f32>()) };
    // SAFETY: as above.
    unsafe { execute(p, [xp, wp], yp)? };
    Ok(true)
}

/// Runs `p` on the callers' buffers: `inputs` in the order of the plan's
/// inputs (forward: src, weights; backward data: diff_dst, weights;
/// backward weights: src, diff_dst), `output` its output.
///
/// # Safety
/// Each buffer must hold its operand as the key's dims and strides
/// describe it, and `output` must not overlap the inputs.
unsafe fn execute(p: &Plan, inputs: [NonNull<u8>; 2], output: NonNull<u8>) -> Result<(), String> {
    // Inputs: reorder into the primitive's layouts where they differ.
    let mut keep: Vec<Scratch> = Vec::new();
    let mut args: Vec<(i32, &Md, NonNull<u8>)> = Vec::with_capacity(4);
    for ((arg, s), user) in p.inputs.iter().zip(inputs) {
        let ptr = match &s.inner {
            None => user,
            Some(inner) => {
                let buf = Scratch::new(inner.md.size())?;
                // SAFETY: `user` holds the operand as `s.user` describes
                // it; `buf` holds `inner.md.size()` bytes.
                unsafe { inner.run(&s.user, user, &inner.md, buf.ptr())? };
                let ptr = buf.ptr();
                keep.push(buf);
                ptr
            }
        };
        args.push((*arg, s.md(), ptr));
    }
    let (out_arg, out) = &p.output;
    let out_inner = match &out.inner {
        Some(inner) => Some((inner, Scratch::new(inner.md.size())?)),
        None => None,
    };
    let out_ptr = out_inner.as_ref().map_or(output, |(_, b)| b.ptr());
    args.push((*out_arg, out.md(), out_ptr));
    let scratchpad = Scratch::new(p.scratchpad.size())?;
    args.push((onednn::ARG_SCRATCHPAD, &p.scratchpad, scratchpad.ptr()));
    // SAFETY: every buffer holds its layout's bytes (the operands by the
    // caller's contract, the rest allocated above).
    unsafe { p.prim.execute(&args)? };
    if let Some((inner, b)) = &out_inner {
        // SAFETY: `b` holds the result in `inner.md`'s layout, `output` the
        // caller's buffer.
        unsafe { inner.run(&inner.md, b.ptr(), &out.user, output)? };
    }
    Ok(())
}
