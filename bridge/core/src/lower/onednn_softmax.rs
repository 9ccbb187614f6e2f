//! Softmax → the CPU plugin's oneDNN softmax (`__onednn$softmax`).
//!
//! XLA:CPU compiles a softmax as six kernels (its reductions are split into
//! a reduce-window and a reduce): 5.3–5.7 ms for `[8, 12, 128, 128]` f32 on a
//! 2-core Intel Xeon, against 0.8 ms for eager torch and for oneDNN's
//! softmax, which reads the input once per row (docs/host_gemm.md,
//! "Softmax"). BERT-base runs twelve such softmaxes per call. This pass
//! rewrites the form torch_xla and JAX lower `softmax` to:
//!
//! ```text
//! %m = stablehlo.reduce(%x init: -inf) applies stablehlo.maximum across dimensions = [d]
//! %s = stablehlo.subtract %x, broadcast(%m)
//! %e = stablehlo.exponential %s
//! %z = stablehlo.reduce(%e init: 0) applies stablehlo.add across dimensions = [d]
//! %r = stablehlo.divide %e, broadcast(%z)
//! ```
//!
//! where `broadcast(v)` is `broadcast_in_dim` of the reduced value back
//! along `d` (directly, or of a `reshape` or `broadcast_in_dim` that kept
//! `d` as a size-1 dim, JAX's `keepdims`; JAX's `max(-inf, max)` clamp is
//! looked through), into a `custom_call @"__onednn$softmax"(%x)` with
//! `softmax_axis = d` and row-major layouts pinned. Only f32 with static
//! shapes; the other ops stay for any other users and are otherwise dead
//! (XLA drops them).
//!
//! **NaN rows.** Eager torch (and the ops above) give a row of NaN where
//! the row holds a NaN or `+inf`, or only `-inf`; oneDNN's softmax does not
//! (its max and exponential clamp NaN away: a row with one NaN came back as
//! zeros). So the call is guarded: `v = (x == -inf ? 1 : x · 0)` is NaN at
//! NaN and `±inf` entries and 0 elsewhere, `d = Σ v` along `d` (a
//! matrix-vector product, which XLA runs at memory speed, unlike its
//! reductions) is NaN for a row with NaN or `+inf` and otherwise counts its
//! `-inf` entries, and the result is `select(d < n, softmax, NaN)`. With
//! the guard the softmax of `[8, 12, 128, 128]` took 0.9–1.3 ms against
//! XLA's 5.2 (`tests/python/test_onednn_softmax.py` checks the NaN rows).

use crate::dialects::common::{enum_attr, get_i64_array, i64_array};
use crate::ir::{Attribute, FloatKind, OpId, Type, ValueId};
use crate::lower::onednn_call::{
    self, def_op, row_major, splat_value, static_tensor, Emitter, PinnedLayouts,
};
use crate::Module;

/// The custom-call target of the plugin's oneDNN softmax thunk.
pub const TARGET: &str = onednn_call::SOFTMAX;

/// Smallest softmax (elements) sent to oneDNN by default: the guard's three
/// extra kernels cost more than they save on small ones (GPT-2's decode
/// step, `[4, 12, 1, ≤ 1024]`: 1.23× eager's time with them, 1.11× without;
/// BERT-base's `[8, 12, 128, 128]`: 1.0 ms against XLA's 5.2).
pub const MIN_ELEMENTS: u64 = 1 << 17;

/// Rewrites every softmax of the module docs' form with at least
/// `min_elements` elements; returns how many.
pub fn rewrite_onednn_softmax(m: &mut Module, min_elements: u64) -> usize {
    let mut plan = Vec::new();
    for i in 0..m.ops.len() {
        let op = OpId(i as u32);
        if m.op(op).parent.is_none() || m.op_name(op) != "stablehlo.divide" {
            continue;
        }
        if let Some((x, axis)) = match_softmax(m, op) {
            let elements = static_tensor(m, x).map_or(0, |(d, _)| d.iter().product::<i64>());
            if elements as u64 >= min_elements {
                plan.push((op, x, axis));
            }
        }
    }
    for &(op, x, axis) in &plan {
        emit(m, op, x, axis);
    }
    if !plan.is_empty() {
        tracing::debug!(count = plan.len(), "oneDNN softmax rewrite");
    }
    plan.len()
}

/// Turns `divide` (the softmax's last op) into the oneDNN call guarded for
/// eager's NaN rows (module docs): `select(ok, softmax(x), NaN)` with
/// `ok = dot(v, ones) < n` along `axis`, `v = x == -inf ? 1 : x · 0`.
fn emit(m: &mut Module, divide: OpId, x: ValueId, axis: i64) {
    let (dims, elem) = static_tensor(m, x).expect("matched softmaxes are static f32");
    let rank = dims.len();
    let e = Emitter {
        block: m.op(divide).parent.expect("placed"),
        at: divide,
        loc: m.op(divide).loc,
    };
    let ty = m.value_type(x);
    let tensor = |m: &mut Module, d: &[i64], elem| {
        m.intern_type(Type::Tensor {
            dims: d.iter().copied().collect(),
            elem,
            encoding: None,
        })
    };
    let i1 = m.int_type(1);
    let mask_ty = tensor(m, &dims, i1);
    let n = dims[axis as usize];
    let rows: Vec<i64> = (0..rank)
        .filter(|&i| i as i64 != axis)
        .map(|i| dims[i])
        .collect();
    let rows_ty = tensor(m, &rows, elem);
    let rows_mask_ty = tensor(m, &rows, i1);
    let n_ty = tensor(m, &[n], elem);

    let json = format!(r#"{{"onednn_softmax_config": {{"softmax_axis": {axis}}}}}"#);
    let layouts = [row_major(rank)];
    let props = onednn_call::call_props(
        m,
        TARGET,
        &json,
        Some(PinnedLayouts {
            operands: &layouts,
            results: &layouts,
        }),
    );
    let call = m.add_op_named("stablehlo.custom_call");
    let soft = e.insert(m, call, &[x], props, ty);

    // v = x == -inf ? 1 : x · 0 (NaN for NaN and ±inf, 0 for finite x).
    let neg_inf = e.constant(m, "0xFF800000".into(), ty);
    let eq = enum_attr("stablehlo", "comparison_direction", "EQ");
    let is_neg_inf = e.push(
        m,
        "stablehlo.compare",
        &[x, neg_inf],
        mask_ty,
        vec![("comparison_direction", eq)],
    );
    let zero = e.constant(m, "0.000000e+00".into(), ty);
    let one = e.constant(m, "1.000000e+00".into(), ty);
    let x0 = e.binary(m, "stablehlo.multiply", x, zero, ty);
    let v = e.push(m, "stablehlo.select", &[is_neg_inf, one, x0], ty, vec![]);
    // d = Σ v along the axis: NaN for rows with NaN or +inf, else their
    // count of -inf entries (exact in f32).
    let ones = e.constant(m, "1.000000e+00".into(), n_ty);
    let dot_dims = Attribute::Opaque(
        format!("stablehlo.dot<lhs_contracting_dimensions = [{axis}], rhs_contracting_dimensions = [0]>").into(),
    );
    let d = e.push(
        m,
        "stablehlo.dot_general",
        &[v, ones],
        rows_ty,
        vec![("dot_dimension_numbers", dot_dims)],
    );
    let count = e.constant(m, format!("{:e}", n as f64), rows_ty);
    let lt = enum_attr("stablehlo", "comparison_direction", "LT");
    let ok = e.push(
        m,
        "stablehlo.compare",
        &[d, count],
        rows_mask_ty,
        vec![("comparison_direction", lt)],
    );
    let keep: Vec<i64> = (0..rank as i64).filter(|&i| i != axis).collect();
    let bd = i64_array(m, keep);
    let ok_b = e.push(
        m,
        "stablehlo.broadcast_in_dim",
        &[ok],
        mask_ty,
        vec![("broadcast_dimensions", bd)],
    );
    let nan = e.constant(m, "0x7FC00000".into(), ty);
    // The divide becomes the select, keeping its result value.
    let select = m.sym("stablehlo.select");
    let o = m.op_mut(divide);
    o.name = select;
    o.operands = smallvec::smallvec![ok_b, soft, nan];
    o.props.clear();
    o.attrs.clear();
}

/// `(x, d)` when `divide` is the end of a softmax of `x` along `d`.
fn match_softmax(m: &Module, divide: OpId) -> Option<(ValueId, i64)> {
    let o = m.op(divide);
    let [num, den] = o.operands.as_slice() else {
        return None;
    };
    let (dims, elem) = static_tensor(m, o.results[0])?;
    if !matches!(m.ty(elem), Type::Float(FloatKind::F32))
        || dims.is_empty()
        || dims.len() > onednn_call::MAX_RANK
    {
        return None;
    }
    let exp = def_op(m, *num).filter(|&e| m.op_name(e) == "stablehlo.exponential")?;
    let sub = def_op(m, *m.op(exp).operands.first()?)
        .filter(|&s| m.op_name(s) == "stablehlo.subtract")?;
    let [x, max_b] = m.op(sub).operands.as_slice() else {
        return None;
    };
    if static_tensor(m, *x)?.0 != dims {
        return None;
    }
    let (max_in, axis) = reduced_along(m, *max_b, &dims, "stablehlo.maximum", f64::NEG_INFINITY)?;
    let (sum_in, sum_axis) = reduced_along(m, *den, &dims, "stablehlo.add", 0.0)?;
    (max_in == *x && sum_in == *num && axis == sum_axis).then_some((*x, axis))
}

/// When `v` (of shape `dims`) is a reduction along one dim `d`, with
/// combiner `combiner` and init `init`, broadcast back to `dims`: the
/// reduction's input and `d`.
fn reduced_along(
    m: &Module,
    v: ValueId,
    dims: &[i64],
    combiner: &str,
    init: f64,
) -> Option<(ValueId, i64)> {
    let b = def_op(m, v).filter(|&b| m.op_name(b) == "stablehlo.broadcast_in_dim")?;
    let mut src = *m.op(b).operands.first()?;
    let bd = get_i64_array(m, m.op_attr(b, "broadcast_dimensions")?)?;
    let (sd, _) = static_tensor(m, src)?;
    let r = dims.len();
    // The one dim of `dims` the broadcast fills: missing from `bd`, or
    // present with size 1 in the source (a kept dim).
    let axis = if bd.len() + 1 == r {
        let missing: Vec<i64> = (0..r as i64).filter(|d| !bd.contains(d)).collect();
        let ([d], true) = (missing.as_slice(), bd.windows(2).all(|w| w[0] < w[1])) else {
            return None;
        };
        *d
    } else if bd.len() == r && bd.iter().enumerate().all(|(i, &d)| d == i as i64) {
        let ones: Vec<usize> = (0..r).filter(|&i| sd[i] == 1 && dims[i] != 1).collect();
        let [d] = ones.as_slice() else {
            return None;
        };
        // Through the reshape (or broadcast) that re-inserted the kept dim.
        let re = def_op(m, src)?;
        let keep: Vec<i64> = (0..r as i64).filter(|&i| i != *d as i64).collect();
        let reinserts = match m.op_name(re) {
            "stablehlo.reshape" => true,
            "stablehlo.broadcast_in_dim" => {
                get_i64_array(m, m.op_attr(re, "broadcast_dimensions")?)? == keep.as_slice()
            }
            _ => false,
        };
        if !reinserts {
            return None;
        }
        src = *m.op(re).operands.first()?;
        *d as i64
    } else {
        return None;
    };
    // `src` is the reduction's result: `dims` without `axis`.
    let want: Vec<i64> = (0..r)
        .filter(|&i| i as i64 != axis)
        .map(|i| dims[i])
        .collect();
    if static_tensor(m, src)?.0.as_slice() != want.as_slice() {
        return None;
    }
    if combiner == "stablehlo.maximum" {
        // JAX's `max(-inf, reduce_max(x))` (its `initial` clamp): the identity.
        if let Some(mx) = def_op(m, src).filter(|&o| m.op_name(o) == "stablehlo.maximum") {
            let [p, q] = m.op(mx).operands.as_slice() else {
                return None;
            };
            src = if is_splat(m, *p, init) {
                *q
            } else if is_splat(m, *q, init) {
                *p
            } else {
                return None;
            };
        }
    }
    let red = def_op(m, src).filter(|&o| m.op_name(o) == "stablehlo.reduce")?;
    let ro = m.op(red);
    let ([input, init_v], [_]) = (ro.operands.as_slice(), ro.results.as_slice()) else {
        return None;
    };
    if get_i64_array(m, m.op_attr(red, "dimensions")?)? != [axis] {
        return None;
    }
    if !is_splat(m, *init_v, init) {
        return None;
    }
    // The body: `combiner(arg0, arg1)` and its return.
    let region = *ro.regions.first()?;
    let block = *m.regions[region.index()].blocks.first()?;
    let bk = &m.blocks[block.index()];
    let [comb, ret] = bk.ops.as_slice() else {
        return None;
    };
    let args = bk.args.as_slice();
    let co = m.op(*comb);
    let ok = m.op_name(*comb) == combiner
        && args.len() == 2
        && co.operands.len() == 2
        && co.operands.iter().all(|a| args.contains(a))
        && m.op(*ret).operands.as_slice() == co.results.as_slice();
    ok.then_some((*input, axis))
}

/// Whether `v` is the splat `value`: a constant, or a scalar constant's
/// `broadcast_in_dim`.
fn is_splat(m: &Module, v: ValueId, value: f64) -> bool {
    let Some(mut op) = def_op(m, v) else {
        return false;
    };
    if m.op_name(op) == "stablehlo.broadcast_in_dim" {
        let scalar = m.op(op).operands.first().and_then(|&s| static_tensor(m, s));
        match (
            scalar,
            m.op(op).operands.first().and_then(|&s| def_op(m, s)),
        ) {
            (Some((d, _)), Some(src)) if d.is_empty() => op = src,
            _ => return false,
        }
    }
    m.op_name(op) == "stablehlo.constant"
        && m.op_attr(op, "value").is_some_and(|a| {
            matches!(m.attr(a), Attribute::Dense { body, .. } if splat_value(body) == Some(value))
        })
}

#[cfg(test)]
mod tests;
