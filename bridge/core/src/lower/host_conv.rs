//! Rewrites convolutions for the runtime's host convolution kernel.
//!
//! On the CPU plugin, hlobridge registers `hlobridge_conv` as an XLA FFI
//! custom call (see `pjrt-client`'s `host_kernels::conv`: im2col plus the
//! host GEMM, reading and writing every operand in its own layout). This
//! pass turns each `stablehlo.convolution` the kernel runs exactly into
//!
//! ```text
//! %cfg = stablehlo.constant dense<[...]> : tensor<Kxi64>
//! %r = stablehlo.custom_call @hlobridge_conv(%lhs, %rhs, %cfg) {api_version = 4 : i32}
//! ```
//!
//! with the op's operands, result type, location and other discardable
//! attributes unchanged. `%cfg` carries the dimension numbers, strides,
//! padding, dilations, window reversal and feature group count, in the
//! layout [`ConvConfig`] (the host-kernel ABI crate, `hlobridge-host-abi`)
//! documents (version [`CONFIG_VERSION`] first).
//!
//! Taken: 1 to 3 spatial dimensions; f32 or f64 operands and result of one
//! element type; static shapes; any dimension permutation, stride,
//! padding (negative too), lhs and rhs dilation, reversal, and feature
//! group count or batch group count (the grouped / depthwise weight
//! gradient); the result shape must be the one XLA infers. The
//! precision config is met (the kernel computes in the operands' full
//! precision). Convolutions with fewer than [`HostConvPolicy::min_work`]
//! multiply-adds stay with XLA, and so do ungrouped ones with at least
//! [`HostConvPolicy::xla_from_work`] (XLA's own convolution is faster there).
//!
//! With [`HostConvPolicy::onednn`] set, forward-form f32 convolutions (and
//! a few backward forms) go to oneDNN instead, through the CPU plugin's own
//! oneDNN convolution thunk (custom call target [`ONEDNN_TARGET`], its
//! `OneDnnConvolutionConfig` as the JSON backend config;
//! [`onednn`](self::onednn) says which and why). With it too, the weight
//! gradients of 1×1 convolutions over large maps become batched matrix
//! products ([`wgrad_dot`](self::wgrad_dot)). With
//! [`HostConvPolicy::onednn_channels_last`] (the default) the oneDNN calls
//! pin channels-last activation layouts, and the lowering then pins
//! row-major ones on the host-kernel calls ([`pin_row_major_host_calls`]).

use crate::dialects::common::{get_bool_array, get_i64_array};
use crate::ir::{Attribute, FloatKind, NamedAttr, OpId, Type, ValueId};
use crate::Module;
use smallvec::SmallVec;

/// Bump whenever the rewrite's output for a given input changes (part of
/// compile-cache keys, see `HostLowering::cache_tag`).
pub const REWRITE_VERSION: u32 = 8;

use hlobridge_host_abi::conv::output_size;
pub use hlobridge_host_abi::conv::{ConvConfig, CONFIG_VERSION, MAX_SPATIAL, TARGET};
pub use onednn::{pin_row_major_host_calls, ONEDNN_TARGET};

/// Which convolutions the rewrite takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostConvPolicy {
    /// Smallest number of multiply-adds to rewrite.
    pub min_work: u64,
    /// Ungrouped convolutions (feature and batch group count 1) of at least
    /// this many multiply-adds stay with XLA (`None`: none do).
    pub xla_from_work: Option<u64>,
    /// Send forward-form f32 convolutions to the plugin's oneDNN
    /// convolution ([`ONEDNN_TARGET`]) instead of the host kernel or XLA.
    pub onednn: bool,
    /// With [`onednn`](Self::onednn): pin the oneDNN calls' activations
    /// (input and result) to channels-last layouts, so that XLA lays out
    /// the elementwise ops between consecutive calls channels-last too and
    /// the thunk reorders nothing (docs/host_conv.md, rewrite version 6).
    pub onednn_channels_last: bool,
    /// With channels-last calls: fold each call's epilogue (per-channel
    /// affine ops such as eval BatchNorm, a residual add, ReLU) into the
    /// call as oneDNN post-ops (`onednn_fuse`, rewrite version 7; off by
    /// default: measured no faster on ResNet-50, slower on MobileNetV3-L).
    pub onednn_fuse: bool,
    /// Where ungrouped weight gradients XLA would take go (`wgrad_host`;
    /// XLA's convolution unless `HLOBRIDGE_CONV_WGRAD` says otherwise).
    pub wgrad: WeightGradRoute,
}

impl Default for HostConvPolicy {
    /// Below ~4k multiply-adds a convolution is XLA's inline loop and a
    /// call costs more than it saves. From 2²⁷ multiply-adds (as the host
    /// GEMM's bound) an ungrouped convolution stays with XLA, whose own
    /// convolution measured 1.3–5× faster than the host kernel at
    /// ResNet-50's sizes (batch 8 at 224², forward and both gradients,
    /// `benches/conv_bench.py`, docs/host_conv.md); the host kernel keeps
    /// the small ones (XLA's generic loop over 1×1–4×4 maps) and every
    /// grouped or depthwise one (XLA 19–28× eager there).
    fn default() -> Self {
        HostConvPolicy {
            min_work: 1 << 12,
            xla_from_work: Some(1 << 27),
            onednn: false,
            onednn_channels_last: false,
            onednn_fuse: false,
            wgrad: WeightGradRoute::Xla,
        }
    }
}

impl HostConvPolicy {
    /// This policy with the oneDNN route on or off.
    pub fn with_onednn(self, onednn: bool) -> Self {
        HostConvPolicy { onednn, ..self }
    }

    /// This policy with the oneDNN calls' activations channels-last or in
    /// their own layouts.
    pub fn with_onednn_channels_last(self, channels_last: bool) -> Self {
        HostConvPolicy {
            onednn_channels_last: channels_last,
            ..self
        }
    }

    /// This policy with channels-last calls' epilogues fused or not.
    pub fn with_onednn_fuse(self, fuse: bool) -> Self {
        HostConvPolicy {
            onednn_fuse: fuse,
            ..self
        }
    }

    /// This policy with weight gradients routed so.
    pub fn with_wgrad(self, wgrad: WeightGradRoute) -> Self {
        HostConvPolicy { wgrad, ..self }
    }

    /// Every eligible convolution, whatever its size.
    pub fn all() -> Self {
        HostConvPolicy {
            min_work: 0,
            xla_from_work: None,
            onednn: false,
            onednn_channels_last: false,
            onednn_fuse: false,
            wgrad: WeightGradRoute::Xla,
        }
    }
}

/// What [`rewrite_host_conv`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostConvReport {
    /// Convolutions turned into host kernel or oneDNN calls.
    pub rewritten: usize,
    /// Of those, the oneDNN calls.
    pub onednn: usize,
    /// Of those, the calls with channels-last layouts pinned.
    pub channels_last: usize,
    /// Convolutions seen.
    pub convolutions: usize,
}

/// One admitted convolution: the host kernel's config operand values, or
/// the oneDNN call's JSON backend config.
enum Conv {
    /// The host kernel's call; `peel_rhs`: read the rhs through its
    /// transposes and reversals ([`fold::peel_rhs`]).
    Host {
        config: ConvConfig,
        peel_rhs: bool,
    },
    OneDnn(onednn::Call),
    Dot(wgrad_dot::WeightGradDot),
}

/// Rewrites every convolution `policy` admits (see module docs).
pub fn rewrite_host_conv(m: &mut Module, policy: &HostConvPolicy) -> HostConvReport {
    let mut report = HostConvReport::default();
    // Channels-last calls only in programs that are not (part of) a
    // training step: in one with backward convolutions the weight
    // gradients then read transposed activations, measured slower
    // (ResNet-50's step 2.6 -> 3.7 s CPU, docs/host_conv.md), and a
    // forward half returns its activations row-major.
    let training = has_backward_convolutions(m) || saves_convolution_inputs(m);
    let policy = &HostConvPolicy {
        onednn_channels_last: policy.onednn_channels_last && !training,
        ..*policy
    };
    let library_training = training && policy.wgrad == WeightGradRoute::OneDnn;
    let mut plan: Vec<(OpId, Conv)> = Vec::new();
    for i in 0..m.ops.len() {
        let op = OpId(i as u32);
        if m.op_name(op) != "stablehlo.convolution" || m.op(op).parent.is_none() {
            continue;
        }
        report.convolutions += 1;
        if let Some(c) = classify(m, op, policy, library_training) {
            plan.push((op, c));
        }
    }
    if plan.is_empty() {
        return report;
    }
    let uses = crate::lower::onednn_call::use_lists(m);
    let i32t = m.int_type(32);
    let i64t = m.int_type(64);
    let names = Names {
        custom_call: m.sym("stablehlo.custom_call"),
        constant: m.sym("stablehlo.constant"),
        value: m.sym("value"),
        api_version: m.sym("api_version"),
        call_target_name: m.sym("call_target_name"),
        api_value: m.add_attr(Attribute::Integer {
            text: "4".into(),
            ty: Some(i32t),
        }),
        target: m.add_attr(Attribute::String {
            escaped: TARGET.into(),
            ty: None,
        }),
        i64t,
    };
    for (op, c) in plan {
        match c {
            Conv::Host {
                mut config,
                peel_rhs,
            } => {
                let lhs = m.op(op).operands[0];
                let mut rhs = m.op(op).operands[1];
                if peel_rhs {
                    rhs = fold::peel_rhs(m, rhs, &mut config);
                }
                let at = fold::result_transpose(m, op, config.out.len(), &uses).map(|(t, perm)| {
                    fold::fold_result(&mut config, &perm);
                    t
                });
                apply(m, op, [lhs, rhs], at, config.encode(), &names)
            }
            Conv::OneDnn(call) => {
                report.channels_last += usize::from(call.pins_layouts());
                onednn::apply(m, op, call);
                report.onednn += 1;
            }
            Conv::Dot(w) => wgrad_dot::apply(m, op, &w),
        }
        report.rewritten += 1;
    }
    if policy.onednn_fuse && report.channels_last > 0 {
        let fused = onednn_fuse::fuse_epilogues(m);
        tracing::debug!(fused, "oneDNN epilogues fused");
    }
    tracing::debug!(?report, "host convolution rewrite");
    report
}

/// Whether `m` has a convolution of the backward forms: batch groups, lhs
/// dilation (a strided convolution's input gradient) or a window larger
/// than the result in some spatial dimension (a weight gradient, whose
/// window is the output gradient's map; also a forward convolution over a
/// map smaller than its window, which then just keeps the plain layouts).
fn has_backward_convolutions(m: &Module) -> bool {
    (0..m.ops.len()).any(|i| {
        let op = OpId(i as u32);
        if m.op_name(op) != "stablehlo.convolution" || m.op(op).parent.is_none() {
            return false;
        }
        let o = m.op(op);
        let (Some((rd, _)), Some((od, _))) = (
            o.operands.get(1).and_then(|&v| tensor_of(m, v)),
            o.results.first().and_then(|&v| tensor_of(m, v)),
        ) else {
            return false;
        };
        let Some(Attribute::Opaque(text)) = m.op_attr(op, "dimension_numbers").map(|a| m.attr(a))
        else {
            return false;
        };
        let Some([_, r, y]) = read_conv_dims(text) else {
            return false;
        };
        let nsp = r.len().saturating_sub(2);
        let wider = (0..nsp)
            .any(|i| matches!((rd.get(r[2 + i]), od.get(y[2 + i])), (Some(w), Some(o)) if w > o));
        let lhs_dilated =
            window_attr(m, op, "lhs_dilation", nsp, 1).is_some_and(|d| d.iter().any(|&x| x > 1));
        wider || lhs_dilated || int_attr(m, op, "batch_group_count", 1).is_some_and(|b| b > 1)
    })
}

/// Whether `m` is the forward half of a training step: at least two of
/// its convolutions, and a quarter of them, read an input the program also
/// returns (AOTAutograd's forward graph returns the activations its
/// backward graph reads). Pinning such a program's oneDNN calls
/// channels-last made XLA transpose every returned activation back, and
/// its convolutions run on oneDNN's library like a training program's
/// (`torch.compile` training of ResNet-50: 0.73× the forward and backward
/// time, docs/host_conv.md).
fn saves_convolution_inputs(m: &Module) -> bool {
    let returned: std::collections::HashSet<ValueId> = (0..m.ops.len())
        .map(|i| OpId(i as u32))
        .filter(|&op| matches!(m.op_name(op), "func.return" | "return"))
        .flat_map(|op| m.op(op).operands.iter().copied())
        .collect();
    let (mut convs, mut saved) = (0usize, 0usize);
    for i in 0..m.ops.len() {
        let op = OpId(i as u32);
        if m.op_name(op) != "stablehlo.convolution" || m.op(op).parent.is_none() {
            continue;
        }
        convs += 1;
        saved += usize::from(
            m.op(op)
                .operands
                .first()
                .is_some_and(|v| returned.contains(v)),
        );
    }
    saved >= 2 && saved * 4 >= convs
}

/// Static dims and float kind (f32 or f64) of a ranked tensor value.
fn tensor_of(m: &Module, v: ValueId) -> Option<(&[i64], FloatKind)> {
    match m.ty(m.value_type(v)) {
        Type::Tensor {
            dims,
            elem,
            encoding: None,
        } if dims.iter().all(|&d| d >= 0) => match m.ty(*elem) {
            Type::Float(k @ (FloatKind::F32 | FloatKind::F64)) => Some((dims.as_slice(), *k)),
            _ => None,
        },
        _ => None,
    }
}

/// `[b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]` (the canonical text inside
/// `stablehlo.conv<...>`) → each side's `[batch|in, feature|out, spatial...]`
/// dimension indices.
pub(crate) fn read_conv_dims(text: &str) -> Option<[Vec<usize>; 3]> {
    let body = text.strip_prefix("stablehlo.conv<")?.strip_suffix('>')?;
    let (lhs, rest) = body.split_once("x[")?;
    let (rhs, out) = rest.split_once("->")?;
    let group = |g: &str, first: &str, second: &str| -> Option<Vec<usize>> {
        let g = g.trim().strip_prefix('[').unwrap_or(g.trim());
        let g = g.strip_suffix(']')?;
        let toks: Vec<&str> = g.split(',').map(str::trim).collect();
        let rank = toks.len();
        let nsp = rank.checked_sub(2)?;
        let mut dims = vec![usize::MAX; rank];
        for (pos, t) in toks.iter().enumerate() {
            let slot = if *t == first {
                0
            } else if *t == second {
                1
            } else {
                2 + t.parse::<usize>().ok().filter(|&s| s < nsp)?
            };
            if dims[slot] != usize::MAX {
                return None;
            }
            dims[slot] = pos;
        }
        Some(dims)
    };
    let l = group(lhs, "b", "f")?;
    let r = group(rhs, "i", "o")?;
    let o = group(out, "b", "f")?;
    (l.len() == r.len() && l.len() == o.len()).then_some([l, r, o])
}

/// The `Nx2` values of a `dense<..> : tensor<Nx2xi64>` padding attribute.
fn read_padding(m: &Module, a: crate::ir::AttrId, n: usize) -> Option<Vec<i64>> {
    let Attribute::Dense { body, ty } = m.attr(a) else {
        return None;
    };
    let Type::Tensor {
        dims,
        elem,
        encoding: None,
    } = m.ty(*ty)
    else {
        return None;
    };
    if !matches!(m.ty(*elem), Type::Integer { width: 64, .. }) || dims.as_slice() != [n as i64, 2] {
        return None;
    }
    let vals: Vec<i64> = body
        .split(['[', ']', ',', ' ', '\n', '\t'])
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<i64>().ok())
        .collect::<Option<_>>()?;
    if vals.len() == 1 && !body.trim().starts_with('[') {
        return Some(vec![vals[0]; 2 * n]);
    }
    (vals.len() == 2 * n).then_some(vals)
}

/// An integer attribute's value (absent: `default`).
fn int_attr(m: &Module, op: OpId, name: &str, default: i64) -> Option<i64> {
    match m.op_attr(op, name) {
        None => Some(default),
        Some(a) => match m.attr(a) {
            Attribute::Integer { text, .. } => text.parse().ok(),
            _ => None,
        },
    }
}

/// An `array<i64>` window attribute (absent: `default` in every dim).
fn window_attr(m: &Module, op: OpId, name: &str, n: usize, default: i64) -> Option<Vec<i64>> {
    match m.op_attr(op, name) {
        None => Some(vec![default; n]),
        Some(a) => {
            let v = if name == "window_reversal" {
                get_bool_array(m, a)?
            } else {
                get_i64_array(m, a)?
            };
            (v.len() == n).then(|| v.to_vec())
        }
    }
}

/// The call for `op` if the kernel runs it exactly and the policy admits it.
fn classify(m: &Module, op: OpId, policy: &HostConvPolicy, library_training: bool) -> Option<Conv> {
    let o = m.op(op);
    if o.operands.len() != 2 || o.results.len() != 1 || !o.regions.is_empty() {
        return None;
    }
    let (ld, lk) = tensor_of(m, o.operands[0])?;
    let (rd, rk) = tensor_of(m, o.operands[1])?;
    let (od, ok) = tensor_of(m, o.results[0])?;
    if lk != rk || lk != ok {
        return None;
    }
    let Attribute::Opaque(text) = m.attr(m.op_attr(op, "dimension_numbers")?) else {
        return None;
    };
    let [l, r, y] = read_conv_dims(text)?;
    let rank = l.len();
    let nsp = rank - 2;
    if !(1..=MAX_SPATIAL).contains(&nsp) || ld.len() != rank || rd.len() != rank || od.len() != rank
    {
        return None;
    }
    let batch_groups = int_attr(m, op, "batch_group_count", 1)?;
    let groups = int_attr(m, op, "feature_group_count", 1)?;
    if batch_groups < 1 || (batch_groups > 1 && groups > 1) {
        return None;
    }
    let stride = window_attr(m, op, "window_strides", nsp, 1)?;
    let lhs_dil = window_attr(m, op, "lhs_dilation", nsp, 1)?;
    let rhs_dil = window_attr(m, op, "rhs_dilation", nsp, 1)?;
    let rev = window_attr(m, op, "window_reversal", nsp, 0)?;
    let pad = match m.op_attr(op, "padding") {
        None => vec![0; 2 * nsp],
        Some(a) => read_padding(m, a, nsp)?,
    };
    if groups < 1
        || stride
            .iter()
            .chain(&lhs_dil)
            .chain(&rhs_dil)
            .any(|&s| s < 1)
    {
        return None;
    }
    // Shapes: features split into feature groups, the batch into batch
    // groups, spatial sizes XLA's.
    let (n, c) = (ld[l[0]], ld[l[1]]);
    let (ki, ko) = (rd[r[0]], rd[r[1]]);
    if c != ki.checked_mul(groups)?
        || ko % (groups * batch_groups) != 0
        || n % batch_groups != 0
        || od[y[0]] != n / batch_groups
        || od[y[1]] != ko
    {
        return None;
    }
    let mut positions: u64 = 1;
    let mut taps: u64 = 1;
    for i in 0..nsp {
        let want = output_size(
            ld[l[2 + i]],
            rd[r[2 + i]],
            stride[i],
            pad[2 * i],
            pad[2 * i + 1],
            lhs_dil[i],
            rhs_dil[i],
        )?;
        if want != od[y[2 + i]] {
            return None;
        }
        positions = positions.checked_mul(want as u64)?;
        taps = taps.checked_mul(rd[r[2 + i]] as u64)?;
    }
    let work = [
        (n / batch_groups) as u64,
        positions,
        ko as u64,
        taps,
        ki as u64,
    ]
    .iter()
    .try_fold(1u64, |a, &d| a.checked_mul(d))?;
    if work < policy.min_work {
        return None;
    }
    // In a training program with oneDNN's library (`library_training`),
    // every f32 convolution but a weight gradient runs on the library
    // through the host kernel: forward ones and input gradients as
    // oneDNN's forward and backward-data convolutions in its own blocked
    // layouts, where the plugin's thunk reordered each activation to and
    // from channels-last at about half the speed (docs/host_conv.md,
    // "Training convolutions on the library").
    let on_library = library_training
        && lk == FloatKind::F32
        && batch_groups == 1
        && !(0..nsp).any(|i| rd[r[2 + i]] > od[y[2 + i]]);
    if policy.onednn {
        let plain = groups == 1
            && batch_groups == 1
            && stride
                .iter()
                .chain(&lhs_dil)
                .chain(&rhs_dil)
                .all(|&s| s == 1)
            && pad.iter().all(|&p| p == 0)
            && rev.iter().all(|&v| v == 0);
        if policy.wgrad == WeightGradRoute::HostAll {
            // The host kernel's weight-gradient path instead of products.
        } else if let Some(w) = wgrad_dot::take(&l, &r, &y, ld, rd, od, plain) {
            return Some(Conv::Dot(w));
        }
        let form = onednn::Form {
            f32: lk == FloatKind::F32,
            groups,
            batch_groups,
            batch: n,
            kernel_in: ki,
            lhs: &l,
            rhs: &r,
            out: &y,
            lhs_spatial: &(0..nsp).map(|i| ld[l[2 + i]]).collect::<Vec<_>>(),
            out_dims: od,
            window: &(0..nsp).map(|i| rd[r[2 + i]]).collect::<Vec<_>>(),
            out_spatial: &(0..nsp).map(|i| od[y[2 + i]]).collect::<Vec<_>>(),
            stride: &stride,
            pad: &pad,
            lhs_dilation: &lhs_dil,
            rhs_dilation: &rhs_dil,
            reversed: rev.iter().any(|&v| v != 0),
            channels_last: policy.onednn_channels_last,
        };
        // A training program's forward-form convolutions go to the host
        // kernel, which runs them on oneDNN's library (`on_library`).
        if !on_library {
            if let Some(call) = form.route() {
                return Some(Conv::OneDnn(call));
            }
        }
    }
    if groups == 1
        && batch_groups == 1
        && policy.xla_from_work.is_some_and(|w| work >= w)
        && !on_library
        && !wgrad_host::takes(
            policy.wgrad,
            lk == FloatKind::F32,
            &(0..nsp).map(|i| rd[r[2 + i]]).collect::<Vec<_>>(),
            &(0..nsp).map(|i| od[y[2 + i]]).collect::<Vec<_>>(),
            &lhs_dil,
            &stride,
            rev.iter().any(|&v| v != 0),
        )
    {
        return None;
    }
    let config = ConvConfig {
        groups,
        batch_groups,
        lhs: l,
        rhs: r,
        out: y,
        stride,
        pad_lo: (0..nsp).map(|i| pad[2 * i]).collect(),
        pad_hi: (0..nsp).map(|i| pad[2 * i + 1]).collect(),
        lhs_dilation: lhs_dil,
        rhs_dilation: rhs_dil,
        reverse: rev.iter().map(|&v| v != 0).collect(),
    };
    Some(Conv::Host {
        config,
        peel_rhs: library_training,
    })
}

/// Interned names and attributes shared by every rewritten op.
struct Names {
    custom_call: crate::intern::Sym,
    constant: crate::intern::Sym,
    value: crate::intern::Sym,
    api_version: crate::intern::Sym,
    call_target_name: crate::intern::Sym,
    api_value: crate::ir::AttrId,
    target: crate::ir::AttrId,
    i64t: crate::ir::TypeId,
}

/// The op's own attributes, which the config operand now carries: dropped
/// from the call (whether stored as properties or discardable attributes).
const CONV_ATTRS: &[&str] = &[
    "batch_group_count",
    "dimension_numbers",
    "feature_group_count",
    "lhs_dilation",
    "padding",
    "precision_config",
    "rhs_dilation",
    "window_reversal",
    "window_strides",
];

/// Rewrites `op` into the host convolution call with config `config`,
/// reading `operands`; with `at` (the transpose of `op`'s result the
/// config now writes, [`fold`]), that op becomes the call and `op` goes.
fn apply(
    m: &mut Module,
    op: OpId,
    operands: [ValueId; 2],
    at: Option<OpId>,
    config: Vec<i64>,
    names: &Names,
) {
    let block = m.op(op).parent.expect("classified ops are placed");
    let loc = m.op(op).loc;
    let pos = m.blocks[block.index()]
        .ops
        .iter()
        .position(|&x| x == op)
        .expect("op in its block");
    let ty = m.intern_type(Type::Tensor {
        dims: SmallVec::from_slice(&[config.len() as i64]),
        elem: names.i64t,
        encoding: None,
    });
    let mut body = String::from("[");
    for (i, v) in config.iter().enumerate() {
        if i > 0 {
            body.push_str(", ");
        }
        body.push_str(&v.to_string());
    }
    body.push(']');
    let value = m.add_attr(Attribute::Dense {
        body: body.into(),
        ty,
    });
    let k = m.add_op(names.constant);
    m.op_mut(k).props = SmallVec::from_slice(&[NamedAttr {
        name: names.value,
        value,
    }]);
    m.op_mut(k).loc = loc;
    let cfg = m.add_result(k, ty, None);
    m.blocks[block.index()].ops.insert(pos, k);
    m.op_mut(k).parent = Some(block);
    let drop: Vec<crate::intern::Sym> =
        CONV_ATTRS.iter().filter_map(|n| m.strings.get(n)).collect();
    let call = match at {
        Some(t) => {
            // The convolution's attributes move to the transpose, which
            // becomes the call (its result value, the transposed one, kept).
            let attrs = m.op(op).attrs.clone();
            m.blocks[block.index()].ops.retain(|&x| x != op);
            m.op_mut(op).parent = None;
            let o = m.op_mut(t);
            o.attrs = attrs;
            o.loc = loc;
            t
        }
        None => op,
    };
    let o = m.op_mut(call);
    o.name = names.custom_call;
    o.operands = SmallVec::from_slice(&[operands[0], operands[1], cfg]);
    o.props = SmallVec::from_slice(&[
        NamedAttr {
            name: names.api_version,
            value: names.api_value,
        },
        NamedAttr {
            name: names.call_target_name,
            value: names.target,
        },
    ]);
    o.attrs.retain(|a| !drop.contains(&a.name));
}

mod fold;
mod onednn;
mod onednn_fuse;
#[cfg(test)]
mod tests;
mod wgrad_dot;
mod wgrad_host;
pub use wgrad_host::WeightGradRoute;
