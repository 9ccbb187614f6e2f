//! Bias adds folded into the oneDNN matrix products the host GEMM rewrite
//! wrote (`host_gemm`, `__onednn$matmul`).
//!
//! torch_xla lowers a `Linear` (`addmm`) to a product and then
//!
//! ```text
//! %b2 = stablehlo.broadcast_in_dim %b, dims = [r-1] : (tensor<Nxf32>) -> tensor<...xNxf32>
//! %y  = stablehlo.add %p, %b2
//! ```
//!
//! a separate pass that reads and writes the whole product again. When the
//! product `%p` is a oneDNN call whose only user is such an add of an f32
//! vector along its last dim, the add becomes the call itself with the
//! vector, reshaped to `[1, ..., 1, N]` (the thunk's primitive descriptor
//! was refused for a 1-D bias), as a third operand and oneDNN's `BIAS`
//! post-op in the config's `fusions`, as eager's `addmm` does; the separate
//! call is dropped.
//!
//! A product the host GEMM rewrite split into column blocks (a
//! `stablehlo.concatenate` along the last dim of such calls, each used by
//! it alone) is folded the same way: each block's call takes its slice of
//! the vector, and the add becomes the concatenation of the fused calls.

use crate::dialects::common::get_i64_array;
use crate::ir::{Attribute, FloatKind, OpId, Type, ValueId};
use crate::lower::onednn_call::{
    self, config_json, def_op, is_call_to, row_major, static_tensor, tensor_type, use_lists,
    Emitter, PinnedLayouts, MATMUL,
};
use crate::Module;

/// Folds every bias add of the module docs' form; returns how many.
pub fn fuse_matmul_bias(m: &mut Module) -> usize {
    let uses = use_lists(m);
    let mut plan: Vec<(OpId, OpId, ValueId, bool, bool)> = Vec::new();
    let mut blocks: Vec<(OpId, Vec<OpId>, OpId, ValueId)> = Vec::new();
    for i in 0..m.ops.len() {
        let op = OpId(i as u32);
        if m.op(op).parent.is_none() {
            continue;
        }
        if is_call_to(m, op, MATMUL) {
            if let Some((ta, tb)) = unfused(m, op) {
                if let Some((add, bias)) = bias_add(m, m.op(op).results[0], &uses) {
                    plan.push((op, add, bias, ta, tb));
                }
            }
        } else if let Some(calls) = column_blocks(m, op, &uses) {
            if let Some((add, bias)) = bias_add(m, m.op(op).results[0], &uses) {
                blocks.push((op, calls, add, bias));
            }
        }
    }
    for &(call, add, bias, ta, tb) in &plan {
        let [x, w] = [m.op(call).operands[0], m.op(call).operands[1]];
        let e = Emitter {
            block: m.op(add).parent.expect("placed"),
            at: add,
            loc: m.op(add).loc,
        };
        let out_rank = rank(m, m.op(add).results[0]);
        let bias = bias_operand(m, &e, bias, None, out_rank);
        let props = fused_props(m, x, w, out_rank, ta, tb);
        let name = m.sym("stablehlo.custom_call");
        let o = m.op_mut(add);
        o.name = name;
        o.operands = smallvec::smallvec![x, w, bias];
        o.props = props.into_iter().collect();
        o.attrs.clear();
        // The unfused call has no other user: drop it.
        drop_op(m, call);
    }
    // A product split into column blocks (`host_gemm`'s re-orientation):
    // each block's call takes its slice of the bias, and the add becomes
    // the concatenation of the fused calls.
    for (concat, calls, add, bias) in &blocks {
        let e = Emitter {
            block: m.op(*add).parent.expect("placed"),
            at: *add,
            loc: m.op(*add).loc,
        };
        let out_rank = rank(m, m.op(*add).results[0]);
        let mut start = 0;
        let mut fused = smallvec::SmallVec::<[ValueId; 3]>::new();
        for &call in calls {
            let [x, w] = [m.op(call).operands[0], m.op(call).operands[1]];
            let (ta, tb) = unfused(m, call).expect("matched calls are unfused");
            let (pd, _) = static_tensor(m, m.op(call).results[0]).expect("static");
            let width = *pd.last().expect("rank ≥ 2");
            let b = bias_operand(m, &e, *bias, Some((start, start + width)), out_rank);
            start += width;
            let props = fused_props(m, x, w, out_rank, ta, tb);
            let op = m.add_op_named("stablehlo.custom_call");
            let ty = m.value_type(m.op(call).results[0]);
            fused.push(e.insert(m, op, &[x, w, b], props, ty));
        }
        let (name, props) = (m.op(*concat).name, m.op(*concat).props.clone());
        let o = m.op_mut(*add);
        o.name = name;
        o.operands = fused;
        o.props = props;
        o.attrs.clear();
        drop_op(m, *concat);
        for &call in calls {
            drop_op(m, call);
        }
    }
    let n = plan.len() + blocks.len();
    if n > 0 {
        tracing::debug!(count = n, "oneDNN matmul bias fusion");
    }
    n
}

/// Rank of a static tensor value (0 otherwise).
fn rank(m: &Module, v: ValueId) -> usize {
    static_tensor(m, v).map_or(0, |(d, _)| d.len())
}

/// Removes `op` from its block.
fn drop_op(m: &mut Module, op: OpId) {
    let block = m.op(op).parent.expect("placed");
    m.blocks[block.index()].ops.retain(|&o| o != op);
    m.op_mut(op).parent = None;
}

/// The bias vector (or its `[start, end)` slice) at the result's rank:
/// `[1, ..., 1, N]`, as the thunk's primitive wants it (a bitcast of the
/// vector for XLA), emitted before `e.at`.
fn bias_operand(
    m: &mut Module,
    e: &Emitter,
    bias: ValueId,
    range: Option<(i64, i64)>,
    out_rank: usize,
) -> ValueId {
    let (bdims, belem) = static_tensor(m, bias).expect("matched biases are static");
    let mut bias = bias;
    let mut n = bdims[0];
    if let Some((start, end)) = range {
        let ty = tensor_type(m, &[end - start], belem);
        bias = e.slice(m, bias, vec![start], vec![end], ty);
        n = end - start;
    }
    let mut shape = vec![1i64; out_rank - 1];
    shape.push(n);
    let bty = tensor_type(m, &shape, belem);
    e.push(m, "stablehlo.reshape", &[bias], bty, vec![])
}

/// The properties of a oneDNN product of `x` and `w` with the bias post-op.
fn fused_props(
    m: &mut Module,
    x: ValueId,
    w: ValueId,
    out_rank: usize,
    ta: bool,
    tb: bool,
) -> smallvec::SmallVec<[crate::ir::NamedAttr; 6]> {
    let ins = [
        row_major(rank(m, x)),
        row_major(rank(m, w)),
        row_major(out_rank),
    ];
    let outs = [row_major(out_rank)];
    let json = format!(
        r#"{{"onednn_matmul_config": {{"transpose_a": {ta}, "transpose_b": {tb}, "fusions": {{"ops": ["BIAS"]}}}}}}"#
    );
    onednn_call::call_props(
        m,
        MATMUL,
        &json,
        Some(PinnedLayouts {
            operands: &ins,
            results: &outs,
        }),
    )
}

/// `(transpose_a, transpose_b)` of a oneDNN product call without fusions
/// (two operands, one result).
fn unfused(m: &Module, call: OpId) -> Option<(bool, bool)> {
    let o = m.op(call);
    if o.operands.len() != 2 || o.results.len() != 1 {
        return None;
    }
    let cfg = config_json(m, call)?;
    let cfg = cfg.get("onednn_matmul_config")?;
    if cfg.get("fusions").is_some() {
        return None;
    }
    Some((
        cfg.get("transpose_a")?.as_bool()?,
        cfg.get("transpose_b")?.as_bool()?,
    ))
}

/// The calls of a product split into column blocks: `concat` is a
/// `stablehlo.concatenate` along the last dim of unfused f32 oneDNN
/// product calls, each used by it alone.
fn column_blocks(
    m: &Module,
    concat: OpId,
    uses: &[smallvec::SmallVec<[OpId; 2]>],
) -> Option<Vec<OpId>> {
    if m.op_name(concat) != "stablehlo.concatenate" {
        return None;
    }
    let out = *m.op(concat).results.first()?;
    let Attribute::Integer { text, .. } = m.attr(m.op_attr(concat, "dimension")?) else {
        return None;
    };
    if text.parse::<usize>().ok()? + 1 != rank(m, out) {
        return None;
    }
    m.op(concat)
        .operands
        .iter()
        .map(|&v| {
            let call = def_op(m, v).filter(|&c| is_call_to(m, c, MATMUL))?;
            (unfused(m, call).is_some() && uses[v.index()].as_slice() == [concat]).then_some(call)
        })
        .collect()
}

/// `(add, bias)` when the product `p` has a bias add as its only user: an
/// f32 `stablehlo.add` of `p` and a `broadcast_in_dim` of a vector along
/// its last dim.
fn bias_add(
    m: &Module,
    p: ValueId,
    uses: &[smallvec::SmallVec<[OpId; 2]>],
) -> Option<(OpId, ValueId)> {
    let [add] = uses[p.index()].as_slice() else {
        return None;
    };
    if m.op_name(*add) != "stablehlo.add" || m.op(*add).parent.is_none() {
        return None;
    }
    let [l, r] = m.op(*add).operands.as_slice() else {
        return None;
    };
    let other = match (*l == p, *r == p) {
        (true, false) => *r,
        (false, true) => *l,
        _ => return None,
    };
    let (dims, elem) = static_tensor(m, p)?;
    if !matches!(m.ty(elem), Type::Float(FloatKind::F32)) {
        return None;
    }
    let bc = def_op(m, other).filter(|&b| m.op_name(b) == "stablehlo.broadcast_in_dim")?;
    let bias = *m.op(bc).operands.first()?;
    let (bd, belem) = static_tensor(m, bias)?;
    let last = dims.len() as i64 - 1;
    let ok = bd.as_slice() == [*dims.last()?]
        && belem == elem
        && get_i64_array(m, m.op_attr(bc, "broadcast_dimensions")?)? == [last];
    ok.then_some((*add, bias))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::host_gemm::{rewrite_host_gemm, HostGemmPolicy};
    use crate::{parse_module, print_module, PrintOptions};

    fn lower(text: &str) -> (String, usize) {
        let mut m = parse_module(text).expect("parse");
        rewrite_host_gemm(&mut m, &HostGemmPolicy::default().with_onednn(Some(0)));
        let n = fuse_matmul_bias(&mut m);
        let out = print_module(&m, &PrintOptions::default());
        parse_module(&out).expect("parses back");
        (out, n)
    }

    #[test]
    fn torch_xla_addmm_becomes_one_call_with_the_bias_post_op() {
        // torch_xla's Linear on a 3-D input: reshape, transposed weight,
        // product, bias add, reshape back.
        let text = r#"func.func @main(%b: tensor<3072xf32>, %w: tensor<3072x768xf32>, %x: tensor<8x128x768xf32>) -> tensor<8x128x3072xf32> {
  %0 = stablehlo.reshape %x : (tensor<8x128x768xf32>) -> tensor<1024x768xf32>
  %1 = stablehlo.transpose %w, dims = [1, 0] : (tensor<3072x768xf32>) -> tensor<768x3072xf32>
  %2 = stablehlo.dot_general %0, %1, contracting_dims = [1] x [0] : (tensor<1024x768xf32>, tensor<768x3072xf32>) -> tensor<1024x3072xf32>
  %3 = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<3072xf32>) -> tensor<1024x3072xf32>
  %4 = stablehlo.add %2, %3 : tensor<1024x3072xf32>
  %5 = stablehlo.reshape %4 : (tensor<1024x3072xf32>) -> tensor<8x128x3072xf32>
  return %5 : tensor<8x128x3072xf32>
}"#;
        let (out, n) = lower(text);
        assert_eq!(n, 1, "{out}");
        assert_eq!(out.matches("@__onednn$matmul(").count(), 1, "{out}");
        assert!(
            out.contains(r#"\"transpose_b\": true, \"fusions\": {\"ops\": [\"BIAS\"]}"#),
            "{out}"
        );
        assert!(!out.contains("stablehlo.add"), "{out}");
        insta::assert_snapshot!(out);
    }

    #[test]
    fn other_adds_stay() {
        // A bias along the rows (dims = [0]), a full-tensor add, and a
        // product with a second user.
        let text = r#"func.func @main(%a: tensor<256x256xf32>, %v: tensor<256xf32>) -> (tensor<256x256xf32>, tensor<256x256xf32>, tensor<256x256xf32>) {
  %0 = stablehlo.dot_general %a, %a, contracting_dims = [1] x [0] : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
  %1 = stablehlo.broadcast_in_dim %v, dims = [0] : (tensor<256xf32>) -> tensor<256x256xf32>
  %2 = stablehlo.add %0, %1 : tensor<256x256xf32>
  %3 = stablehlo.dot_general %a, %a, contracting_dims = [0] x [0] : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
  %4 = stablehlo.add %3, %a : tensor<256x256xf32>
  %5 = stablehlo.dot_general %a, %a, contracting_dims = [1] x [1] : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
  %6 = stablehlo.broadcast_in_dim %v, dims = [1] : (tensor<256xf32>) -> tensor<256x256xf32>
  %7 = stablehlo.add %5, %6 : tensor<256x256xf32>
  %8 = stablehlo.add %7, %5 : tensor<256x256xf32>
  return %2, %4, %8 : tensor<256x256xf32>, tensor<256x256xf32>, tensor<256x256xf32>
}"#;
        let (out, n) = lower(text);
        assert_eq!(n, 0, "{out}");
    }

    #[test]
    fn a_product_split_into_column_blocks_folds_a_bias_slice_into_each() {
        // GPT-2's `Conv1D` (`addmm` with a [768, 3072] weight stored [K, N])
        // at 512 rows: split into three 1024-column calls by the
        // re-orientation, each with its third of the bias.
        let text = r#"func.func @main(%b: tensor<3072xf32>, %w: tensor<768x3072xf32>, %x: tensor<512x768xf32>) -> tensor<512x3072xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<512x768xf32>, tensor<768x3072xf32>) -> tensor<512x3072xf32>
  %1 = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<3072xf32>) -> tensor<512x3072xf32>
  %2 = stablehlo.add %0, %1 : tensor<512x3072xf32>
  return %2 : tensor<512x3072xf32>
}"#;
        let (out, n) = lower(text);
        assert_eq!(n, 1, "{out}");
        assert_eq!(out.matches("BIAS").count(), 3, "{out}");
        for cols in ["0:1024", "1024:2048", "2048:3072"] {
            assert!(
                out.contains(&format!("stablehlo.slice %b [{cols}]")),
                "{out}"
            );
            assert!(
                out.contains(&format!("stablehlo.slice %w [0:768, {cols}]")),
                "{out}"
            );
        }
        assert_eq!(out.matches("stablehlo.concatenate").count(), 1, "{out}");
        assert!(!out.contains("stablehlo.add"), "{out}");
        insta::assert_snapshot!(out);
    }
}
