//! Epilogues folded into channels-last oneDNN convolution calls (rewrite
//! version 7; docs/host_conv.md, "Fused epilogues").
//!
//! At inference a convolution is typically followed by per-channel affine
//! ops (eval-mode BatchNorm, decomposed as `(y - mean) * rsqrt(var + eps) *
//! gamma + beta`, or a bias add), a residual add and a ReLU. XLA cannot
//! fuse them into the custom call, so each was a separate pass over the
//! activations. The plugin's thunk takes oneDNN post-ops through the
//! config's `fusions` and extra operands (checked against float64 torch:
//! `BIAS`, `BINARY_ADD`, `RELU`), so this pass rewrites
//!
//! ```text
//! %y = custom_call @"__onednn$convolution"(%x, %w)
//! %a = (per-channel add / subtract / multiply / divide)* %y
//! %b = add %a, %r          (optional: a tensor of the result's shape)
//! %c = maximum %b, 0       (optional)
//! ```
//!
//! into one call `custom_call(%x, %w', %t, %r)` with fusions
//! `[BIAS, BINARY_ADD, RELU]` (those present), where the chain's affine map
//! `y ↦ y·s + t` is computed on the per-channel vectors in the program: the
//! weights are scaled per output channel (`%w' = %w · s`, one pass over the
//! weights, which the thunk reorders on every call anyway) and `t` becomes
//! oneDNN's bias. A per-channel operand is a `broadcast_in_dim` of a vector
//! along the result's feature dimension, of a scalar, or a splat constant.
//! Every intermediate value must have this chain as its only user.
//!
//! Only calls that pin channels-last layouts (inference programs) are
//! fused, and only with `HLOBRIDGE_ONEDNN_CONV=fuse`: measured in one
//! process against the unfused program, ResNet-50 inference was no faster
//! (CPU time 0.97–1.0×: the weights' scaling lands in XLA's per-call temp
//! buffer, freshly page-faulted every call, and offsets the passes saved)
//! and MobileNetV3-L 1.3× slower (docs/host_conv.md).

use super::onednn::ONEDNN_TARGET;
use crate::dialects::common::{get_i64_array, i64_array};
use crate::ir::{AttrId, Attribute, FloatKind, NamedAttr, OpId, Type, TypeId, ValueId};
use crate::lower::onednn_call::{
    config_json, def_op, is_call_to, layout_list, splat_value, static_tensor as tensor, use_lists,
    Emitter,
};
use crate::Module;
use smallvec::SmallVec;

/// A per-channel operand of the chain.
#[derive(Clone, Copy)]
enum Chan {
    /// A `[O]` vector.
    Vector(ValueId),
    /// A rank-0 tensor (broadcast to every channel).
    Scalar(ValueId),
    /// A splat constant (its literal body).
    Splat(AttrId),
}

/// One affine step of the chain: `y ∘ c`.
#[derive(Clone, Copy)]
enum Step {
    Add(Chan),
    /// `y - c`.
    Sub(Chan),
    Mul(Chan),
    /// `y / c`.
    Div(Chan),
}

/// A matched epilogue of one call.
struct Epilogue {
    /// The chain's ops, in order; the last one becomes the fused call.
    ops: Vec<OpId>,
    steps: Vec<Step>,
    residual: Option<ValueId>,
    relu: bool,
}

/// What the call's config says about its dimensions.
struct CallDims {
    /// Result feature dimension.
    out_feature: usize,
    /// Kernel output-feature dimension.
    kernel_out: usize,
    /// Output channels.
    channels: i64,
}

/// Folds the epilogues of every channels-last oneDNN call in `m`; returns
/// how many calls it fused.
pub fn fuse_epilogues(m: &mut Module) -> usize {
    let (Some(target), Some(results_sym)) = (
        m.strings.get("call_target_name"),
        m.strings.get("result_layouts"),
    ) else {
        return 0;
    };
    let uses = use_lists(m);
    let mut calls = Vec::new();
    for i in 0..m.ops.len() {
        let op = OpId(i as u32);
        let o = m.op(op);
        if m.op_name(op) != "stablehlo.custom_call"
            || o.parent.is_none()
            || o.operands.len() != 2
            || o.results.len() != 1
            || !o.props.iter().any(|a| a.name == results_sym)
        {
            continue;
        }
        let onednn = o.props.iter().any(|a| {
            a.name == target
                && matches!(m.attr(a.value), Attribute::String { escaped, .. } if escaped.as_str() == ONEDNN_TARGET)
        });
        if onednn {
            calls.push(op);
        }
    }
    let mut fused = 0;
    for call in calls {
        let Some(dims) = call_dims(m, call) else {
            continue;
        };
        let Some(epi) = match_epilogue(m, call, &dims, &uses) else {
            continue;
        };
        rewrite(m, call, &dims, epi);
        fused += 1;
    }
    fused
}

fn call_dims(m: &Module, op: OpId) -> Option<CallDims> {
    let json = config_json(m, op)?;
    let cfg = json.get("onednn_conv_config")?;
    if cfg.get("fusions").is_some() {
        return None;
    }
    let out_feature = cfg.pointer("/output/data/feature_dim")?.as_u64()? as usize;
    let kernel_out = cfg.pointer("/kernel/filter/output_feature_dim")?.as_u64()? as usize;
    let (dims, elem) = tensor(m, m.op(op).results[0])?;
    if !matches!(m.ty(elem), Type::Float(FloatKind::F32)) {
        return None;
    }
    let channels = *dims.get(out_feature)?;
    Some(CallDims {
        out_feature,
        kernel_out,
        channels,
    })
}

/// `v` as a per-channel operand of a result with feature dim `fd` and
/// `channels` channels.
fn per_channel(m: &Module, v: ValueId, dims: &CallDims) -> Option<Chan> {
    let op = def_op(m, v)?;
    match m.op_name(op) {
        "stablehlo.broadcast_in_dim" => {
            let src = *m.op(op).operands.first()?;
            let bd = get_i64_array(m, m.op_attr(op, "broadcast_dimensions")?)?;
            let (sd, elem) = tensor(m, src)?;
            if !matches!(m.ty(elem), Type::Float(FloatKind::F32)) {
                return None;
            }
            match (sd.as_slice(), bd) {
                ([n], [d]) if *n == dims.channels && *d == dims.out_feature as i64 => {
                    Some(Chan::Vector(src))
                }
                ([], []) => Some(Chan::Scalar(src)),
                _ => None,
            }
        }
        "stablehlo.constant" => {
            let a = m.op_attr(op, "value")?;
            match m.attr(a) {
                Attribute::Dense { body, .. } if splat_value(body).is_some() => {
                    Some(Chan::Splat(a))
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Whether `c` is the constant zero.
fn is_zero(m: &Module, c: Chan) -> bool {
    let body = match c {
        Chan::Splat(a) => a,
        Chan::Scalar(v) => {
            let Some(op) = def_op(m, v).filter(|&op| m.op_name(op) == "stablehlo.constant") else {
                return false;
            };
            let Some(a) = m.op_attr(op, "value") else {
                return false;
            };
            a
        }
        Chan::Vector(_) => return false,
    };
    matches!(m.attr(body), Attribute::Dense { body, .. } if splat_value(body) == Some(0.0))
}

/// The chain after `call` (module docs), if it has anything to fuse.
fn match_epilogue(
    m: &Module,
    call: OpId,
    dims: &CallDims,
    uses: &[SmallVec<[OpId; 2]>],
) -> Option<Epilogue> {
    let block = m.op(call).parent?;
    let ty = m.value_type(m.op(call).results[0]);
    let mut cur = m.op(call).results[0];
    let mut epi = Epilogue {
        ops: Vec::new(),
        steps: Vec::new(),
        residual: None,
        relu: false,
    };
    while !epi.relu {
        let [user] = uses[cur.index()].as_slice() else {
            break;
        };
        let u = *user;
        let o = m.op(u);
        if o.parent != Some(block) || o.operands.len() != 2 || o.results.len() != 1 {
            break;
        }
        if m.value_type(o.results[0]) != ty || !o.regions.is_empty() {
            break;
        }
        let (a, b) = (o.operands[0], o.operands[1]);
        if a == b {
            break;
        }
        let (first, other) = if a == cur { (true, b) } else { (false, a) };
        let chan = per_channel(m, other, dims);
        let affine_ok = epi.residual.is_none();
        let step = match (m.op_name(u), chan) {
            ("stablehlo.maximum", Some(c)) if is_zero(m, c) => {
                epi.relu = true;
                None
            }
            ("stablehlo.add", Some(c)) if affine_ok => Some(Step::Add(c)),
            ("stablehlo.multiply", Some(c)) if affine_ok => Some(Step::Mul(c)),
            ("stablehlo.subtract", Some(c)) if affine_ok && first => Some(Step::Sub(c)),
            ("stablehlo.divide", Some(c)) if affine_ok && first => Some(Step::Div(c)),
            ("stablehlo.add", None) if epi.residual.is_none() && m.value_type(other) == ty => {
                epi.residual = Some(other);
                None
            }
            _ => break,
        };
        epi.steps.extend(step);
        epi.ops.push(u);
        cur = o.results[0];
    }
    // Per-channel ops alone are worth folding only when no XLA fusion
    // would absorb them anyway: when oneDNN calls are all that read the
    // result (ResNet's downsample branch, whose add is in the other call).
    // Before an XLA elementwise op (MobileNetV3's hardswish) they cost a
    // pass over the weights and save nothing (measured 1.29x slower).
    let consumed_by_calls = || {
        let users = &uses[cur.index()];
        !users.is_empty() && users.iter().all(|&u| is_onednn_call(m, u))
    };
    let saves_a_pass = epi.relu || epi.residual.is_some() || consumed_by_calls();
    (!epi.ops.is_empty() && saves_a_pass).then_some(epi)
}

/// Whether `op` is a placed oneDNN convolution call.
fn is_onednn_call(m: &Module, op: OpId) -> bool {
    m.op(op).parent.is_some() && is_call_to(m, op, ONEDNN_TARGET)
}

/// `c` as a `[O]` vector of type `vty`.
fn vector(e: &Emitter, m: &mut Module, c: Chan, vty: TypeId) -> ValueId {
    match c {
        Chan::Vector(v) => v,
        Chan::Scalar(v) => e.broadcast_scalar(m, v, vty),
        Chan::Splat(a) => {
            let Attribute::Dense { body, .. } = m.attr(a).clone() else {
                unreachable!("splat operands are dense constants")
            };
            e.constant(m, body.to_string(), vty)
        }
    }
}

/// Replaces `call` and its chain by one fused call at the chain's last op.
fn rewrite(m: &mut Module, call: OpId, dims: &CallDims, epi: Epilogue) {
    let last = *epi.ops.last().expect("matched chains are not empty");
    let block = m.op(call).parent.expect("placed");
    let loc = m.op(call).loc;
    let e = Emitter {
        block,
        at: last,
        loc,
    };
    let (_, elem) = tensor(m, m.op(call).results[0]).expect("f32 result");
    let vty = m.intern_type(Type::Tensor {
        dims: SmallVec::from_slice(&[dims.channels]),
        elem,
        encoding: None,
    });
    // The chain's affine map y ↦ y·s + t on the per-channel vectors.
    let (mut s, mut t): (Option<ValueId>, Option<ValueId>) = (None, None);
    for step in &epi.steps {
        match *step {
            Step::Add(c) => {
                let c = vector(&e, m, c, vty);
                t = Some(match t {
                    Some(t) => e.binary(m, "stablehlo.add", t, c, vty),
                    None => c,
                });
            }
            Step::Sub(c) => {
                let c = vector(&e, m, c, vty);
                t = Some(match t {
                    Some(t) => e.binary(m, "stablehlo.subtract", t, c, vty),
                    None => e.push(m, "stablehlo.negate", &[c], vty, vec![]),
                });
            }
            Step::Mul(c) => {
                let c = vector(&e, m, c, vty);
                s = Some(match s {
                    Some(s) => e.binary(m, "stablehlo.multiply", s, c, vty),
                    None => c,
                });
                t = t.map(|t| e.binary(m, "stablehlo.multiply", t, c, vty));
            }
            Step::Div(c) => {
                let c = vector(&e, m, c, vty);
                let base = match s {
                    Some(s) => s,
                    None => e.constant(m, "1.000000e+00".into(), vty),
                };
                s = Some(e.binary(m, "stablehlo.divide", base, c, vty));
                t = t.map(|t| e.binary(m, "stablehlo.divide", t, c, vty));
            }
        }
    }
    let x = m.op(call).operands[0];
    let mut w = m.op(call).operands[1];
    if let Some(s) = s {
        let wty = m.value_type(w);
        let bd = i64_array(m, vec![dims.kernel_out as i64]);
        let sb = e.push(
            m,
            "stablehlo.broadcast_in_dim",
            &[s],
            wty,
            vec![("broadcast_dimensions", bd)],
        );
        w = e.binary(m, "stablehlo.multiply", w, sb, wty);
    }
    // Fused operands and their layouts, in the thunk's order.
    let mut operands: SmallVec<[ValueId; 3]> = SmallVec::from_slice(&[x, w]);
    let mut ops = Vec::new();
    let mut extra_layouts = Vec::new();
    let result_layout = channels_last_of_result(m, call);
    if let Some(t) = t {
        operands.push(t);
        ops.push("BIAS");
        extra_layouts.push(vec![0]);
    }
    if let Some(r) = epi.residual {
        operands.push(r);
        ops.push("BINARY_ADD");
        extra_layouts.push(result_layout.clone());
    }
    if epi.relu {
        ops.push("RELU");
    }
    let props = fused_props(m, call, &ops, &extra_layouts);
    // The last chain op becomes the call (its result value kept); the
    // convolution call and the other chain ops go.
    let name = m.sym("stablehlo.custom_call");
    let o = m.op_mut(last);
    o.name = name;
    o.operands = operands;
    o.props = props;
    o.attrs.clear();
    o.loc = loc;
    let dead: Vec<OpId> = std::iter::once(call)
        .chain(epi.ops[..epi.ops.len() - 1].iter().copied())
        .collect();
    m.blocks[block.index()].ops.retain(|op| !dead.contains(op));
    for op in dead {
        m.op_mut(op).parent = None;
    }
}

/// The call's pinned result layout (minor to major).
fn channels_last_of_result(m: &Module, call: OpId) -> Vec<i64> {
    let a = m
        .op_attr(call, "result_layouts")
        .expect("pinned calls only");
    let Attribute::Array(items) = m.attr(a) else {
        unreachable!("result_layouts is an array")
    };
    let Attribute::Dense { body, .. } = m.attr(items[0]) else {
        unreachable!("layouts are dense")
    };
    body.trim_matches(['[', ']'])
        .split(',')
        .map(|t| t.trim().parse().expect("layout index"))
        .collect()
}

/// The call's properties with `fusions` added to its config and the fused
/// operands' layouts appended.
fn fused_props(
    m: &mut Module,
    call: OpId,
    ops: &[&str],
    extra: &[Vec<i64>],
) -> SmallVec<[NamedAttr; 2]> {
    let mut props = m.op(call).props.clone();
    let fusions: Vec<String> = ops.iter().map(|o| format!("\\\"{o}\\\"")).collect();
    let add = format!(
        ", \\\"fusions\\\": {{\\\"ops\\\": [{}]}}",
        fusions.join(", ")
    );
    for p in props.iter_mut() {
        let name = m.str(p.name).to_string();
        match (name.as_str(), m.attr(p.value).clone()) {
            ("backend_config", Attribute::String { escaped, ty }) => {
                let s = escaped.to_string();
                let cut = s.len() - 2;
                debug_assert!(s.ends_with("}}"));
                let escaped = format!("{}{add}{}", &s[..cut], &s[cut..]);
                p.value = m.add_attr(Attribute::String {
                    escaped: escaped.into(),
                    ty,
                });
            }
            ("operand_layouts", Attribute::Array(items)) => {
                let more = layout_list(m, extra);
                let Attribute::Array(more) = more else {
                    unreachable!("layout_list returns an array")
                };
                let mut all = items.clone();
                all.extend(more);
                p.value = m.add_attr(Attribute::Array(all));
            }
            _ => {}
        }
    }
    props
}
