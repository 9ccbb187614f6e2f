//! Runs XLA:CPU's large reductions in two stages it compiles well.
//!
//! XLA:CPU rewrites every reduction with a reduced dim longer than 32 (its
//! `TreeReductionRewriter`, for accuracy) into a `reduce-window` of windows
//! of up to 32 per reduced dim, then a reduction of the windows' sums. The
//! `reduce-window` cannot fuse with the elementwise ops that compute its
//! input, so that input is written out and read back, and the
//! `reduce-window` itself runs one window at a time: batch norm's
//! statistics over ResNet-50's `[8, 256, 56, 56]` activations took 4–6 ms
//! each, against 0.9 ms in two stages (`HLOBRIDGE_REDUCE_STAGES`,
//! docs/host_gemm.md). XLA also merges a reduction of a reduction back into
//! one, so the stages have to be written with a barrier between them.
//!
//! For a `stablehlo.reduce` of one float input, combined by `add`
//! (f32/f64, from a zero init), `maximum` or `minimum` (any float, any
//! init: both are idempotent), of at least [`MIN_ELEMENTS`] elements, whose
//! input XLA would compute in at most [`MAX_PRODUCER_CONE`] fused ops
//! (`producer_cone_fits`: longer chains, a transformer's residual stream,
//! would be recomputed inside each stage 1):
//!
//! - the largest run of adjacent reduced dims (`P` elements, more than
//!   [`STAGE`]) is viewed as `[b, P / b]`, `b` the largest factor of `P` of
//!   at most [`STAGE`] (at least 4, and `P / b` at least 2; more than
//!   [`STAGE`] when the innermost dim is kept, see `plan`);
//! - **stage 1** reduces the `b` axis only: every reduced dim is at most
//!   32, so XLA keeps it one reduction, fused with its producer, and the
//!   kept `P / b` axis is contiguous, so it runs on vector lanes;
//! - a `stablehlo.optimization_barrier` keeps XLA from merging the stages;
//! - **stage 2** is the original op over the `b`-times smaller result, with
//!   the same result type.
//!
//! The sum's order changes: chains of at most 32 elements, then XLA's own
//! tree over the rest, where the `reduce-window` summed up to 32 per
//! reduced dim (8·32·32 in a row for batch norm's) in one chain; measured
//! closer to float64 (`tests/python/test_reduce_stages.py`).

use crate::dialects::common::{get_i64_array, i64_array};
use crate::dialects::stablehlo_control::reduce_combiner;
use crate::ir::{copy_op_within, Attribute, FloatKind, OpId, Type, ValueId};
use crate::lower::onednn_call::{def_op, splat_value, static_tensor, tensor_type, Emitter};
use crate::Module;
use rustc_hash::FxHashMap;

/// Bump whenever the rewrite's output for a given input changes: it is part
/// of compile-cache keys (see `HostLowering::cache_tag`).
pub const REWRITE_VERSION: u32 = 1;

/// The most elements stage 1 combines per result element: XLA:CPU's tree
/// reduction window, so XLA leaves the stage as one fused reduction.
pub const STAGE: i64 = 32;

/// Smallest input (elements) staged: below it the reduction is cheap
/// whatever XLA does with it.
pub const MIN_ELEMENTS: i64 = 1 << 14;

/// Most ops XLA may fuse into stage 1 ([`producer_cone_fits`]): batch
/// norm's statistics and gradient sums need 5–20.
pub const MAX_PRODUCER_CONE: usize = 32;

/// What [`rewrite_reduce_stages`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReduceStagesReport {
    /// Reductions run in two stages.
    pub rewritten: usize,
}

/// The staging of one admitted reduction.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    /// The input's dims with the run `[first, last]` split into
    /// `[b, P / b]`.
    staged_dims: Vec<i64>,
    /// Stage 1's result dims (the run as one dim of `P / b`).
    partial_dims: Vec<i64>,
    /// The axis stage 1 reduces (`b`): the run's first dim.
    axis: i64,
    /// Stage 2's reduced dims, in `partial_dims`' numbering.
    rest: Vec<i64>,
}

/// Rewrites every admitted reduction (module docs); returns the count.
pub fn rewrite_reduce_stages(m: &mut Module) -> ReduceStagesReport {
    let mut report = ReduceStagesReport::default();
    let plans: Vec<(OpId, Plan)> = (0..m.ops.len())
        .map(|i| OpId(i as u32))
        .filter(|&op| m.op(op).parent.is_some() && m.op_name(op) == "stablehlo.reduce")
        .filter_map(|op| classify(m, op).map(|p| (op, p)))
        .collect();
    for (op, plan) in plans {
        apply(m, op, &plan);
        report.rewritten += 1;
    }
    if report.rewritten > 0 {
        tracing::debug!(?report, "reduction stages");
    }
    report
}

/// The plan for reduce `op`, if it is admitted.
fn classify(m: &Module, op: OpId) -> Option<Plan> {
    let o = m.op(op);
    let (&[input, init], &[_]) = (o.operands.as_slice(), o.results.as_slice()) else {
        return None;
    };
    let (dims, elem) = static_tensor(m, input)?;
    let Type::Float(kind) = *m.ty(elem) else {
        return None;
    };
    match reduce_combiner(m, op)? {
        "stablehlo.add" => {
            // A sum restarts from its init in each stage: only zero is safe.
            if !matches!(kind, FloatKind::F32 | FloatKind::F64) || !is_zero(m, init) {
                return None;
            }
        }
        "stablehlo.maximum" | "stablehlo.minimum" => {}
        _ => return None,
    }
    let mut reduced = get_i64_array(m, m.op_attr(op, "dimensions")?)?.to_vec();
    reduced.sort_unstable();
    reduced.dedup();
    let plan = plan(&dims, &reduced)?;
    producer_cone_fits(m, input).then_some(plan)
}

/// Ops XLA:CPU never fuses into a consumer: the walk up a reduction's
/// input stops at their results (as at block arguments).
const MATERIALISED: &[&str] = &[
    "stablehlo.dot_general",
    "stablehlo.dot",
    "stablehlo.convolution",
    "stablehlo.custom_call",
    "stablehlo.reduce",
    "stablehlo.reduce_window",
    "stablehlo.select_and_scatter",
    "stablehlo.scatter",
    "stablehlo.gather",
    "stablehlo.sort",
    "stablehlo.while",
    "stablehlo.if",
    "stablehlo.case",
    "stablehlo.dynamic_update_slice",
    "stablehlo.optimization_barrier",
    "stablehlo.fft",
    "stablehlo.rng",
    "stablehlo.rng_bit_generator",
    "stablehlo.all_reduce",
    "stablehlo.all_gather",
    "stablehlo.reduce_scatter",
    "stablehlo.all_to_all",
    "stablehlo.collective_permute",
    "stablehlo.triangular_solve",
    "stablehlo.cholesky",
    "func.call",
    "call",
];

/// Whether the ops XLA would fuse into stage 1 (everything computing
/// `input` back to materialised values: arguments, products, convolutions,
/// custom calls, other reductions; constants not counted) number at most
/// [`MAX_PRODUCER_CONE`]. XLA fuses a reduction's elementwise producers
/// into it, duplicating those that have other users; the `reduce-window`
/// it would otherwise write cannot fuse, so it cut those chains. A
/// transformer's residual stream is one elementwise chain from layer to
/// layer (the products' results are its only materialised inputs): staged,
/// each layer norm's statistics recomputed every earlier layer's (BERT-base's
/// training step took 5× as long), so such reductions are left to XLA.
fn producer_cone_fits(m: &Module, input: ValueId) -> bool {
    let mut seen = rustc_hash::FxHashSet::default();
    let mut stack = vec![input];
    let mut ops = 0usize;
    while let Some(v) = stack.pop() {
        let Some(d) = def_op(m, v) else { continue };
        if !seen.insert(d) {
            continue;
        }
        let name = m.op_name(d);
        if MATERIALISED.contains(&name) || !m.op(d).regions.is_empty() {
            continue;
        }
        if name != "stablehlo.constant" {
            ops += 1;
            if ops > MAX_PRODUCER_CONE {
                return false;
            }
        }
        stack.extend(m.op(d).operands.iter().copied());
    }
    true
}

/// Whether `v` is a zero splat constant.
fn is_zero(m: &Module, v: ValueId) -> bool {
    let Some(c) = def_op(m, v).filter(|&c| m.op_name(c) == "stablehlo.constant") else {
        return false;
    };
    m.op_attr(c, "value").is_some_and(|a| match m.attr(a) {
        Attribute::Dense { body, .. } => splat_value(body) == Some(0.0),
        _ => false,
    })
}

/// The staging of a reduction of `dims` over the sorted `reduced`, if one
/// pays (module docs).
fn plan(dims: &[i64], reduced: &[i64]) -> Option<Plan> {
    let rank = dims.len() as i64;
    if reduced.is_empty() || reduced.iter().any(|&d| d < 0 || d >= rank) {
        return None;
    }
    // (Checked: a shape's element count can overflow in hostile input.)
    if dims.iter().try_fold(1i64, |n, &d| n.checked_mul(d))? < MIN_ELEMENTS {
        return None;
    }
    // Runs of adjacent reduced dims: (first, last, elements).
    let mut runs: Vec<(usize, usize, i64)> = Vec::new();
    for &d in reduced {
        let d = d as usize;
        match runs.last_mut() {
            Some((_, last, n)) if *last + 1 == d => {
                *last = d;
                *n = n.checked_mul(dims[d])?;
            }
            _ => runs.push((d, d, dims[d])),
        }
    }
    // The largest run; the outermost of equal ones.
    let (first, last, p) = runs.iter().rev().copied().max_by_key(|r| r.2)?;
    // A run of at most 32 is already one fused reduction for XLA (and is
    // what stage 1 is).
    if p <= STAGE {
        return None;
    }
    // With the innermost dim kept (a column sum: a bias gradient), stage 2
    // must stay a separate kernel: fused into stage 1 it walks each column
    // on its own (2–6× slower than XLA's own). XLA keeps it separate when
    // it has a dim longer than 32 (its tree rewrite), so `P / b` must be.
    let column = !reduced.contains(&(rank - 1));
    let b = (4..=STAGE.min(p / 2))
        .rev()
        .find(|b| p % b == 0 && (!column || p / b > STAGE))?;
    let mut staged_dims = dims[..first].to_vec();
    staged_dims.extend([b, p / b]);
    staged_dims.extend_from_slice(&dims[last + 1..]);
    let mut partial_dims = dims[..first].to_vec();
    partial_dims.push(p / b);
    partial_dims.extend_from_slice(&dims[last + 1..]);
    let merged = (last - first) as i64;
    let rest = reduced
        .iter()
        .filter_map(|&d| match d as usize {
            x if x < first => Some(d),
            x if x > last => Some(d - merged),
            x if x == first => Some(d),
            _ => None,
        })
        .collect();
    Some(Plan {
        staged_dims,
        partial_dims,
        axis: first as i64,
        rest,
    })
}

/// Writes `op`'s two stages: reshape, stage 1 (a copy of `op`, same body
/// and init), barrier, then `op` itself as stage 2.
fn apply(m: &mut Module, op: OpId, plan: &Plan) {
    let o = m.op(op);
    let (input, block, loc) = (o.operands[0], o.parent.expect("placed op"), o.loc);
    let elem = static_tensor(m, input).expect("classified").1;
    let at = Emitter { block, at: op, loc };
    let staged_ty = tensor_type(m, &plan.staged_dims, elem);
    let staged = at.push(m, "stablehlo.reshape", &[input], staged_ty, vec![]);

    let stage1 = copy_op_within(m, op, &mut FxHashMap::default());
    m.op_mut(stage1).operands[0] = staged;
    set_dimensions(m, stage1, vec![plan.axis]);
    let partial_ty = tensor_type(m, &plan.partial_dims, elem);
    let partial = m.op(stage1).results[0];
    m.values[partial.index()].ty = partial_ty;
    at.place(m, stage1);

    let kept = at.push(
        m,
        "stablehlo.optimization_barrier",
        &[partial],
        partial_ty,
        vec![],
    );
    m.op_mut(op).operands[0] = kept;
    set_dimensions(m, op, plan.rest.clone());
}

/// Sets reduce `op`'s `dimensions`.
fn set_dimensions(m: &mut Module, op: OpId, dims: Vec<i64>) {
    let value = i64_array(m, dims);
    let value = m.add_attr(value);
    m.set_op_attr(op, "dimensions", value);
}

#[cfg(test)]
mod tests;
