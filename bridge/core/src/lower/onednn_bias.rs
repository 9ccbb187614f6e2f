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

use crate::dialects::common::get_i64_array;
use crate::ir::{FloatKind, OpId, Type, ValueId};
use crate::lower::onednn_call::{
    self, config_json, def_op, is_call_to, row_major, static_tensor, use_lists, Emitter,
    PinnedLayouts, MATMUL,
};
use crate::Module;

/// Folds every bias add of the module docs' form; returns how many.
pub fn fuse_matmul_bias(m: &mut Module) -> usize {
    let uses = use_lists(m);
    let mut plan: Vec<(OpId, OpId, ValueId, bool, bool)> = Vec::new();
    for i in 0..m.ops.len() {
        let call = OpId(i as u32);
        if m.op(call).parent.is_none() || !is_call_to(m, call, MATMUL) {
            continue;
        }
        if let Some((add, bias, ta, tb)) = bias_add(m, call, &uses) {
            plan.push((call, add, bias, ta, tb));
        }
    }
    for &(call, add, bias, ta, tb) in &plan {
        let [x, w] = [m.op(call).operands[0], m.op(call).operands[1]];
        let rank = |m: &Module, v| static_tensor(m, v).map_or(0, |(d, _)| d.len());
        let out_rank = rank(m, m.op(add).results[0]);
        // The thunk's primitive wants the bias at the result's rank:
        // `[1, ..., 1, N]` (a bitcast of the vector for XLA).
        let (bdims, belem) = static_tensor(m, bias).expect("matched biases are static");
        let mut shape = vec![1i64; out_rank - 1];
        shape.extend(bdims.iter().copied());
        let bty = m.intern_type(Type::Tensor {
            dims: shape.iter().copied().collect(),
            elem: belem,
            encoding: None,
        });
        let e = Emitter {
            block: m.op(add).parent.expect("placed"),
            at: add,
            loc: m.op(add).loc,
        };
        let bias = e.push(m, "stablehlo.reshape", &[bias], bty, vec![]);
        let ins = [
            row_major(rank(m, x)),
            row_major(rank(m, w)),
            row_major(out_rank),
        ];
        let outs = [row_major(out_rank)];
        let json = format!(
            r#"{{"onednn_matmul_config": {{"transpose_a": {ta}, "transpose_b": {tb}, "fusions": {{"ops": ["BIAS"]}}}}}}"#
        );
        let props = onednn_call::call_props(
            m,
            MATMUL,
            &json,
            Some(PinnedLayouts {
                operands: &ins,
                results: &outs,
            }),
        );
        let name = m.sym("stablehlo.custom_call");
        let o = m.op_mut(add);
        o.name = name;
        o.operands = smallvec::smallvec![x, w, bias];
        o.props = props.into_iter().collect();
        o.attrs.clear();
        // The unfused call has no other user: drop it.
        let block = m.op(call).parent.expect("placed");
        m.blocks[block.index()].ops.retain(|&o| o != call);
        m.op_mut(call).parent = None;
    }
    if !plan.is_empty() {
        tracing::debug!(count = plan.len(), "oneDNN matmul bias fusion");
    }
    plan.len()
}

/// `(add, bias, transpose_a, transpose_b)` when `call` (an unfused oneDNN
/// product) has a bias add as its only user.
fn bias_add(
    m: &Module,
    call: OpId,
    uses: &[smallvec::SmallVec<[OpId; 2]>],
) -> Option<(OpId, ValueId, bool, bool)> {
    let o = m.op(call);
    let ([_, _], [p]) = (o.operands.as_slice(), o.results.as_slice()) else {
        return None;
    };
    let cfg = config_json(m, call)?;
    let cfg = cfg.get("onednn_matmul_config")?;
    if cfg.get("fusions").is_some() {
        return None;
    }
    let ta = cfg.get("transpose_a")?.as_bool()?;
    let tb = cfg.get("transpose_b")?.as_bool()?;
    let [add] = uses[p.index()].as_slice() else {
        return None;
    };
    if m.op_name(*add) != "stablehlo.add" || m.op(*add).parent.is_none() {
        return None;
    }
    let [l, r] = m.op(*add).operands.as_slice() else {
        return None;
    };
    let other = match (*l == *p, *r == *p) {
        (true, false) => *r,
        (false, true) => *l,
        _ => return None,
    };
    let (dims, elem) = static_tensor(m, *p)?;
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
    ok.then_some((*add, bias, ta, tb))
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
}
