//! Gives XLA:CPU's dot the operands torch_xla's batched `matmul` hid behind
//! a reshape.
//!
//! torch_xla lowers `q @ k.transpose(-1, -2)` and `p @ v` of 4-D tensors as
//! a 3-D product: the two leading dims are merged into one batch dim with
//! `stablehlo.reshape`, after any transpose and scaling of the operand:
//!
//! ```text
//! %t = stablehlo.transpose %k, dims = [0, 1, 3, 2]          // [B, H, D, S]
//! %s = stablehlo.multiply %t, (broadcast_in_dim %c)          // SDPA's √scale
//! %r = stablehlo.reshape %s : (...) -> tensor<BHxDxSxf32>
//! %p = stablehlo.dot_general %q3, %r, batching_dims = [0] x [0], contracting_dims = [2] x [1]
//! ```
//!
//! XLA folds a transpose into its dot's dimension numbers, but not through
//! the reshape, so it materialises the transposed, scaled copy of `%k`
//! (XLA:CPU's transposes run at about 1.3 GB/s). And when the reshaped
//! value is an in-place update (a static KV cache's `index_copy_`, a
//! `scatter` XLA turns into a `dynamic-update-slice`), XLA fuses the reshape
//! into a second copy of the update, which then needs copies of the whole
//! cache: a GPT-2 decode step copied each of its 24 caches twice and
//! transposed 12, about a fifth of the step (`benches/jit_profile.py`).
//!
//! This rewrite, for every `stablehlo.dot_general` still left to XLA (it
//! runs after the host GEMM rewrite) with leading batch dims on both sides:
//!
//! - **un-merges the batch**: an operand that is a `reshape` merging its
//!   source's leading dims into the batch dim is replaced by that source,
//!   the other operand is reshaped the same way (a bitcast for XLA), and
//!   the product gets one batch dim per merged dim; a reshape of its result
//!   gives the original result value;
//! - **folds transposes** under the reshape that keep the batch dims in
//!   place into the dimension numbers (contracting dims pair up in any
//!   order; the free dims must keep their order, which fixes the result's);
//! - **moves scalar scalings out**: an operand `x · broadcast(c)` of a 0-d
//!   `c`, larger than the result, becomes `x`, and the result is multiplied
//!   by `c` instead (f32 and f64 only: a linear product commutes with a
//!   scalar; the rounding differs by an ulp of the result, not more).
//!
//! A product is rewritten only when one of these removes work: a scaling
//! moved, or, with the batch un-merged, a transpose folded or an operand
//! read from an in-place update (`scatter`, `dynamic_update_slice`). (XLA
//! folds a transpose that feeds its dot directly by itself.) The product
//! keeps its location and its other attributes (`precision_config`,
//! `algorithm`).

use crate::dialects::common::get_i64_array;
use crate::dialects::stablehlo_dot_conv::{dot_dims_text, read_dot_dims};
use crate::ir::{Attribute, FloatKind, OpId, Type, TypeId, ValueId};
use crate::lower::onednn_call::{def_op, static_tensor, tensor_type, Emitter};
use crate::Module;

/// Bump whenever the rewrite's output for a given input changes: it is part
/// of compile-cache keys (see `HostLowering::cache_tag`).
pub const REWRITE_VERSION: u32 = 3;

/// What [`rewrite_dot_operands`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DotOperandsReport {
    /// Products rewritten.
    pub rewritten: usize,
    /// Of those, products whose batch dim was un-merged.
    pub unmerged: usize,
    /// Transposes folded into dimension numbers.
    pub transposes: usize,
    /// Scalar scalings moved to the result.
    pub scalings: usize,
}

/// Rewrites every product of the module docs' form; returns counts.
pub fn rewrite_dot_operands(m: &mut Module) -> DotOperandsReport {
    let mut report = DotOperandsReport::default();
    let mut plan = Vec::new();
    for i in 0..m.ops.len() {
        let op = OpId(i as u32);
        if m.op(op).parent.is_none() || m.op_name(op) != "stablehlo.dot_general" {
            continue;
        }
        if let Some(p) = classify(m, op) {
            plan.push((op, p));
        }
    }
    for (op, p) in plan {
        report.rewritten += 1;
        report.unmerged += usize::from(p.split.len() > p.nb);
        report.transposes += p.sides.iter().map(|s| s.transposes).sum::<usize>();
        report.scalings += p.sides.iter().map(|s| s.scalars.len()).sum::<usize>();
        apply(m, op, p);
    }
    if report.rewritten > 0 {
        tracing::debug!(?report, "dot operand rewrite");
    }
    report
}

/// One operand as the rewritten product reads it.
struct Side {
    /// The value the product reads.
    src: ValueId,
    /// `src` must first be reshaped to `[split..., dims[nb..]...]` (the
    /// operand had its batch merged by something other than a reshape).
    reshape: bool,
    /// For each dim of the un-merged operand `[split..., dims[nb..]...]`,
    /// the dim of `src` holding it.
    map: Vec<usize>,
    /// Scalars the operand was multiplied by, now applied to the result.
    scalars: Vec<ValueId>,
    /// Transposes folded into `map`.
    transposes: usize,
}

/// An admitted product.
struct Plan {
    /// The original batch dims (leading, on both sides).
    nb: usize,
    /// The un-merged batch dims (`nb` of them when nothing was un-merged).
    split: Vec<i64>,
    sides: [Side; 2],
    /// Original contracting dims of each side.
    contracting: [Vec<i64>; 2],
    /// Element type of the result.
    elem: TypeId,
}

/// `v`'s source when `v` (dims `dims`, one batch dim: `nb == 1`) is a
/// `stablehlo.reshape` of a static tensor of dims `[s..., dims[1..]...]`
/// with at least two dims in `s` and `prod(s) == dims[0]`: the source and
/// `s`.
fn merged_batch(m: &Module, v: ValueId, dims: &[i64], nb: usize) -> Option<(ValueId, Vec<i64>)> {
    if nb != 1 {
        return None;
    }
    let op = def_op(m, v).filter(|&o| m.op_name(o) == "stablehlo.reshape")?;
    let src = *m.op(op).operands.first()?;
    let (sd, _) = static_tensor(m, src)?;
    let rest = &dims[nb..];
    if sd.len() <= dims.len() || !sd.ends_with(rest) {
        return None;
    }
    let s = &sd[..sd.len() - rest.len()];
    let merged: i64 = dims[..nb].iter().product();
    (s.iter().product::<i64>() == merged).then(|| (src, s.to_vec()))
}

/// Whether `v` is written in place by XLA (a scatter or a dynamic update).
fn in_place_update(m: &Module, v: ValueId) -> bool {
    def_op(m, v).is_some_and(|o| {
        matches!(
            m.op_name(o),
            "stablehlo.scatter" | "stablehlo.dynamic_update_slice"
        )
    })
}

/// `(x, c)` when `v` is `x · broadcast_in_dim(c)` (either order) of a 0-d
/// `c` with `v`'s element type.
fn scaled(m: &Module, v: ValueId) -> Option<(ValueId, ValueId)> {
    let op = def_op(m, v).filter(|&o| m.op_name(o) == "stablehlo.multiply")?;
    let [a, b] = <[ValueId; 2]>::try_from(m.op(op).operands.as_slice()).ok()?;
    let (_, elem) = static_tensor(m, v)?;
    let scalar = |x: ValueId| -> Option<ValueId> {
        let bc = def_op(m, x).filter(|&o| m.op_name(o) == "stablehlo.broadcast_in_dim")?;
        let c = *m.op(bc).operands.first()?;
        let (cd, ce) = static_tensor(m, c)?;
        let dims = get_i64_array(m, m.op_attr(bc, "broadcast_dimensions")?)?;
        (cd.is_empty() && dims.is_empty() && ce == elem).then_some(c)
    };
    scalar(b)
        .map(|c| (a, c))
        .or_else(|| scalar(a).map(|c| (b, c)))
}

/// `(z, perm)` when `v` is a `stablehlo.transpose` of `z`.
fn transposed(m: &Module, v: ValueId) -> Option<(ValueId, Vec<usize>)> {
    let op = def_op(m, v).filter(|&o| m.op_name(o) == "stablehlo.transpose")?;
    let z = *m.op(op).operands.first()?;
    let perm = get_i64_array(m, m.op_attr(op, "permutation")?)?;
    let perm = perm
        .iter()
        .map(|&p| usize::try_from(p).ok())
        .collect::<Option<Vec<_>>>()?;
    static_tensor(m, z)?;
    Some((z, perm))
}

/// Peels scalings (when `scalings_move`, of operands larger than the
/// result) and batch-keeping transposes off `side.src` while the free dims
/// `free` (dims of the un-merged operand) keep their order.
fn peel(
    m: &Module,
    side: &mut Side,
    k: usize,
    free: &[usize],
    result_elems: i64,
    scalings_move: bool,
) {
    loop {
        if let Some((x, c)) = scaled(m, side.src) {
            let elems: i64 = static_tensor(m, side.src).map_or(0, |(d, _)| d.iter().product());
            if scalings_move && elems > result_elems {
                side.src = x;
                side.scalars.push(c);
                continue;
            }
        }
        if let Some((z, perm)) = transposed(m, side.src) {
            let keeps_batch = perm.len() == side.map.len() && (0..k).all(|i| perm[i] == i);
            let map: Vec<usize> = side.map.iter().map(|&d| perm[d]).collect();
            let ordered = free.windows(2).all(|w| map[w[0]] < map[w[1]]);
            if keeps_batch && ordered {
                side.src = z;
                side.map = map;
                side.transposes += 1;
                continue;
            }
        }
        return;
    }
}

/// The rewrite of `op`, when it removes work.
fn classify(m: &Module, op: OpId) -> Option<Plan> {
    let o = m.op(op);
    if o.operands.len() != 2 || o.results.len() != 1 || !o.regions.is_empty() {
        return None;
    }
    let Attribute::Opaque(text) = m.attr(m.op_attr(op, "dot_dimension_numbers")?) else {
        return None;
    };
    let [lb, rb, lc, rc] = read_dot_dims(text)?;
    let nb = lb.len();
    let batch: Vec<i64> = (0..nb as i64).collect();
    if nb == 0 || lb != batch || rb != batch {
        return None;
    }
    let operands = [o.operands[0], o.operands[1]];
    let (ld, le) = static_tensor(m, operands[0])?;
    let (rd, re) = static_tensor(m, operands[1])?;
    let (od, oe) = static_tensor(m, o.results[0])?;
    if ld.get(..nb) != rd.get(..nb) {
        return None;
    }
    // Scalings move only for one float type throughout.
    let float =
        le == re && le == oe && matches!(m.ty(oe), Type::Float(FloatKind::F32 | FloatKind::F64));
    // The batch split: from an operand's merging reshape (both must agree).
    let merged = [
        merged_batch(m, operands[0], &ld, nb),
        merged_batch(m, operands[1], &rd, nb),
    ];
    let split = match (&merged[0], &merged[1]) {
        (Some((_, a)), Some((_, b))) if a != b => return None,
        (Some((_, s)), _) | (_, Some((_, s))) => s.clone(),
        (None, None) => ld[..nb].to_vec(),
    };
    let k = split.len();
    let result_elems: i64 = od.iter().product();
    let mut sides = Vec::with_capacity(2);
    for (i, (dims, contracting)) in [(&ld, &lc), (&rd, &rc)].into_iter().enumerate() {
        let rank = k + dims.len() - nb;
        let (src, reshape) = match &merged[i] {
            Some((src, _)) => (*src, false),
            None => (operands[i], k > nb),
        };
        let mut side = Side {
            src,
            reshape,
            map: (0..rank).collect(),
            scalars: Vec::new(),
            transposes: 0,
        };
        if !reshape {
            let c: Vec<usize> = contracting
                .iter()
                .map(|&d| usize::try_from(d).ok().map(|d| d - nb + k))
                .collect::<Option<_>>()?;
            let free: Vec<usize> = (k..rank).filter(|d| !c.contains(d)).collect();
            peel(m, &mut side, k, &free, result_elems, float);
        }
        sides.push(side);
    }
    let sides: [Side; 2] = sides.try_into().ok()?;
    // XLA folds a transpose that feeds its dot directly: one under a
    // merging reshape, or under a moved scaling, is what it cannot fold.
    let pays = sides.iter().any(|s| {
        !s.scalars.is_empty() || (k > nb && (s.transposes > 0 || in_place_update(m, s.src)))
    });
    pays.then_some(Plan {
        nb,
        split,
        sides,
        contracting: [lc, rc],
        elem: oe,
    })
}

/// Rewrites `op` into the product `p`: the new product and the scalings go
/// before it, and `op` becomes the reshape of their result (keeping its
/// result value).
fn apply(m: &mut Module, op: OpId, p: Plan) {
    let e = Emitter {
        block: m.op(op).parent.expect("classified ops are placed"),
        at: op,
        loc: m.op(op).loc,
    };
    let (k, nb) = (p.split.len(), p.nb);
    let orig = m.op(op).operands.clone();
    let mut operands = [orig[0], orig[1]];
    let mut dims_of_sides: [Vec<i64>; 4] = Default::default();
    for (i, side) in p.sides.iter().enumerate() {
        operands[i] = side.src;
        if side.reshape {
            let (d, elem) = static_tensor(m, orig[i]).expect("classified operands are static");
            let shape: Vec<i64> = p.split.iter().chain(&d[nb..]).copied().collect();
            let ty = tensor_type(m, &shape, elem);
            operands[i] = e.push(m, "stablehlo.reshape", &[orig[i]], ty, vec![]);
        }
        let map = |d: i64| side.map[(d as usize) - nb + k] as i64;
        dims_of_sides[i] = (0..k).map(|d| side.map[d] as i64).collect();
        dims_of_sides[2 + i] = p.contracting[i].iter().map(|&d| map(d)).collect();
    }
    let (od, _) = static_tensor(m, m.op(op).results[0]).expect("classified results are static");
    let shape: Vec<i64> = p.split.iter().chain(&od[nb..]).copied().collect();
    let ty = tensor_type(m, &shape, p.elem);
    // The new product before `op`: the original's attributes with new
    // dimension numbers; then the moved scalings; `op` becomes the reshape
    // to its own result type (the merged batch, or a no-op XLA drops).
    let dims_sym = m.sym("dot_dimension_numbers");
    let dims_attr = m.add_attr(Attribute::Opaque(dot_dims_text(&dims_of_sides).into()));
    let props: Vec<_> = m
        .op(op)
        .props
        .iter()
        .map(|a| {
            let mut a = *a;
            if a.name == dims_sym {
                a.value = dims_attr;
            }
            a
        })
        .collect();
    let attrs = m.op(op).attrs.clone();
    let dot = m.add_op_named("stablehlo.dot_general");
    let mut out = e.insert(m, dot, &operands, props, ty);
    m.op_mut(dot).attrs = attrs;
    for &c in p.sides.iter().flat_map(|s| &s.scalars) {
        let b = e.broadcast_scalar(m, c, ty);
        out = e.binary(m, "stablehlo.multiply", out, b, ty);
    }
    let reshape = m.sym("stablehlo.reshape");
    let o = m.op_mut(op);
    o.name = reshape;
    o.operands = smallvec::smallvec![out];
    o.props.clear();
    o.attrs.clear();
}

#[cfg(test)]
mod tests;
