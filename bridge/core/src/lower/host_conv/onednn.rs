//! The oneDNN route of the convolution rewrite.
//!
//! The official XLA CPU plugin links oneDNN and a thunk that runs a
//! `__onednn$convolution` custom call (oneDNN's forward convolution, its
//! `OneDnnConvolutionConfig` read from the call's backend config), but the
//! XLA pass that would create such calls is not in the build: no XLA flag
//! (`xla_cpu_use_onednn`, `xla_cpu_experimental_onednn_custom_call`,
//! `xla_cpu_experimental_onednn_fusion_type`, ...) changes how it compiles a
//! convolution (docs/host_conv.md). So this rewrite writes the call itself:
//!
//! ```text
//! %r = stablehlo.custom_call @"__onednn$convolution"(%lhs, %rhs)
//!        {api_version = 1 : i32, backend_config = "{\"onednn_conv_config\": {...}}"}
//! ```
//!
//! The config names each operand's batch / feature / spatial dimensions
//! (any permutation; the thunk permutes oneDNN's memory descriptors, no
//! data is moved), the padding, strides, window dilations (stored plus one,
//! as the thunk reads them) and the feature group count. The thunk's
//! config fields are unsigned: padding must be ≥ 0.
//!
//! Taken ([`Form::route`]), all f32 with batch group count 1, chosen by
//! measurement (`benches/conv_bench.py --grad`, docs/host_conv.md):
//!
//! - **forward form** (no lhs dilation, no window reversal, padding ≥ 0, a
//!   window no larger than the result): forward convolutions and stride-1
//!   input gradients, grouped ones too; depthwise ones (one input feature
//!   per group) every window with channels-last calls (below), otherwise
//!   only from a 7×7 window (ConvNeXt): below that the host kernel's
//!   vectorised depthwise loop measured faster than oneDNN with its
//!   reorders;
//! - **weight gradients** (the same form with a window larger than the
//!   result: the output gradient's whole map) only with at most 4 input
//!   channels (the convolution's batch here) and window dilation (the
//!   forward stride) ≤ 2: the stems (7×7/2 and 3×3/2 on RGB), where XLA
//!   and the host kernel are slowest; at other shapes oneDNN's forward
//!   convolution over a map-sized window was no faster than XLA's;
//! - **spread 1×1** (a 1×1 window with lhs dilation and stride 1: the
//!   input gradient of a strided 1×1 convolution, ResNet's downsample):
//!   the call runs the 1×1 convolution on the undilated operand and a
//!   `stablehlo.pad` (interior padding = dilation − 1, edges = the
//!   convolution's padding, negative too) spreads its result; 2.5–3×
//!   faster than XLA's lhs-dilated convolution. Larger strided input
//!   gradients (lhs dilation with a 3×3 window) keep XLA: dilating the
//!   operand first and running oneDNN measured slower from 28² maps down.
//!
//! Everything else keeps the host kernel or XLA.
//!
//! **Channels-last calls** ([`Form::channels_last`], rewrite version 6):
//! the thunk asks oneDNN for channels-last activations and reorders any
//! other layout on every call (half of MobileNetV3-L's oneDNN time). So
//! forward-form calls pin `operand_layouts` (input channels-last, kernel
//! row-major) and `result_layouts` (channels-last); XLA then lays out the
//! elementwise ops between consecutive calls channels-last as well. Host
//! kernels read row-major buffers, so the lowering then pins row-major
//! layouts on them ([`pin_row_major_host_calls`]): XLA leaves an unpinned
//! custom call's layouts free and would hand them channels-last buffers.

use crate::dialects::common::i64_array;
use crate::ir::{Attribute, NamedAttr, OpId, Type};
use crate::lower::onednn_call::{self, layout_list, PinnedLayouts};
use crate::Module;
use smallvec::SmallVec;

/// The custom-call target of the plugin's oneDNN convolution thunk.
pub const ONEDNN_TARGET: &str = onednn_call::CONVOLUTION;

/// Smallest depthwise window (taps) sent to oneDNN.
const DEPTHWISE_MIN_TAPS: i64 = 49;
/// The same with channels-last activations (no reorders around the call).
const DEPTHWISE_MIN_TAPS_CHANNELS_LAST: i64 = 1;
/// Most input channels of a weight gradient sent to oneDNN.
const WEIGHT_GRAD_MAX_CHANNELS: i64 = 4;
/// Largest window dilation (forward stride) of such a weight gradient.
const WEIGHT_GRAD_MAX_DILATION: i64 = 2;

/// What the classifier knows of one convolution (dimension indices as in
/// `read_conv_dims`: `[batch|in, feature|out, spatial...]`).
pub(super) struct Form<'a> {
    pub f32: bool,
    pub groups: i64,
    pub batch_groups: i64,
    /// Size of the lhs batch dimension.
    pub batch: i64,
    /// Kernel input features per group.
    pub kernel_in: i64,
    pub lhs: &'a [usize],
    pub rhs: &'a [usize],
    pub out: &'a [usize],
    /// Lhs spatial sizes.
    pub lhs_spatial: &'a [i64],
    /// Result dimension sizes (in the result's own order).
    pub out_dims: &'a [i64],
    /// Kernel spatial sizes.
    pub window: &'a [i64],
    /// Result spatial sizes.
    pub out_spatial: &'a [i64],
    pub stride: &'a [i64],
    /// `[lo0, hi0, lo1, hi1, ...]`.
    pub pad: &'a [i64],
    pub lhs_dilation: &'a [i64],
    pub rhs_dilation: &'a [i64],
    pub reversed: bool,
    /// Pin the activations to channels-last layouts (module docs).
    pub channels_last: bool,
}

/// `operand_layouts` (input, kernel) and `result_layouts` of one call, as
/// XLA's minor-to-major dimension lists.
pub(super) type Layouts = [Vec<i64>; 3];

/// How oneDNN runs one convolution.
pub(super) enum Call {
    /// The convolution becomes the call (its JSON backend config, and the
    /// layouts it pins, if any).
    Direct(String, Option<Layouts>),
    /// Spread 1×1 (module docs): the call, of result dims `inner`, then a
    /// pad with these edge and interior paddings (per result dimension).
    Spread {
        json: String,
        layouts: Option<Layouts>,
        inner: Vec<i64>,
        low: Vec<i64>,
        high: Vec<i64>,
        interior: Vec<i64>,
    },
}

impl Call {
    /// Whether the call pins layouts (channels-last activations).
    pub fn pins_layouts(&self) -> bool {
        match self {
            Call::Direct(_, layouts) | Call::Spread { layouts, .. } => layouts.is_some(),
        }
    }
}

impl Form<'_> {
    /// How oneDNN takes this convolution, if it does (module docs).
    pub fn route(&self) -> Option<Call> {
        let nsp = self.window.len();
        if !self.f32 || self.batch_groups != 1 || !(1..=3).contains(&nsp) {
            return None;
        }
        if self.lhs_dilation.iter().any(|&d| d != 1) {
            return self.spread();
        }
        let depthwise = self.groups > 1 && self.kernel_in == 1;
        let taps: i64 = self.window.iter().product();
        let weight_grad = self.window.iter().zip(self.out_spatial).any(|(w, o)| w > o);
        if self.reversed
            || self.pad.iter().any(|&p| p < 0)
            || (depthwise && taps < self.depthwise_min_taps())
            || (weight_grad
                && (self.groups != 1
                    || self.batch > WEIGHT_GRAD_MAX_CHANNELS
                    || self
                        .rhs_dilation
                        .iter()
                        .any(|&d| d > WEIGHT_GRAD_MAX_DILATION)))
        {
            return None;
        }
        let lo: Vec<i64> = (0..nsp).map(|i| self.pad[2 * i]).collect();
        let hi: Vec<i64> = (0..nsp).map(|i| self.pad[2 * i + 1]).collect();
        let json = self.json(self.window, &lo, &hi, self.stride, self.rhs_dilation);
        Some(Call::Direct(
            json,
            (!weight_grad).then(|| self.layouts()).flatten(),
        ))
    }

    /// Smallest depthwise window sent to oneDNN.
    fn depthwise_min_taps(&self) -> i64 {
        if self.channels_last {
            DEPTHWISE_MIN_TAPS_CHANNELS_LAST
        } else {
            DEPTHWISE_MIN_TAPS
        }
    }

    /// Channels-last layouts for the input and result, the kernel's own
    /// (row-major) layout, if the policy pins them.
    fn layouts(&self) -> Option<Layouts> {
        if !self.channels_last {
            return None;
        }
        // Minor to major: feature, the spatial dims from the last, batch.
        let last = |d: &[usize]| -> Vec<i64> {
            std::iter::once(d[1])
                .chain(d[2..].iter().rev().copied())
                .chain(std::iter::once(d[0]))
                .map(|i| i as i64)
                .collect()
        };
        let rank = self.rhs.len() as i64;
        Some([last(self.lhs), (0..rank).rev().collect(), last(self.out)])
    }

    /// Spread 1×1: a 1×1 window, stride 1, lhs dilation (module docs).
    fn spread(&self) -> Option<Call> {
        let nsp = self.window.len();
        if self.window.iter().any(|&w| w != 1) || self.stride.iter().any(|&s| s != 1) {
            return None;
        }
        let ones = vec![1; nsp];
        let zeros = vec![0; nsp];
        let json = self.json(&ones, &zeros, &zeros, &ones, &ones);
        let rank = nsp + 2;
        let mut inner = self.out_dims.to_vec();
        let (mut low, mut high, mut interior) = (vec![0; rank], vec![0; rank], vec![0; rank]);
        for i in 0..nsp {
            let d = self.out[2 + i];
            inner[d] = self.lhs_spatial[i];
            low[d] = self.pad[2 * i];
            high[d] = self.pad[2 * i + 1];
            interior[d] = self.lhs_dilation[i] - 1;
        }
        Some(Call::Spread {
            json,
            layouts: self.layouts(),
            inner,
            low,
            high,
            interior,
        })
    }

    /// The JSON backend config with this window.
    fn json(&self, size: &[i64], lo: &[i64], hi: &[i64], stride: &[i64], dil: &[i64]) -> String {
        let list = |v: &[i64]| -> String {
            let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
            format!("[{}]", items.join(", "))
        };
        let spatial = |d: &[usize]| list(&d[2..].iter().map(|&i| i as i64).collect::<Vec<_>>());
        let rank = size.len() + 2;
        let data = |d: &[usize]| {
            format!(
                r#"{{"dims": {rank}, "data": {{"batch_dim": {}, "feature_dim": {}, "spatial_dims": {}}}}}"#,
                d[0],
                d[1],
                spatial(d)
            )
        };
        let kernel = format!(
            r#"{{"dims": {rank}, "filter": {{"input_feature_dim": {}, "output_feature_dim": {}, "spatial_dims": {}}}}}"#,
            self.rhs[0],
            self.rhs[1],
            spatial(self.rhs)
        );
        // Window dilations as XLA counts them (1: none); the thunk
        // subtracts one (oneDNN counts dilation from 0).
        let window = format!(
            r#"{{"size": {}, "pad_left": {}, "pad_right": {}, "strides": {}, "window_dilations": {}}}"#,
            list(size),
            list(lo),
            list(hi),
            list(stride),
            list(dil),
        );
        format!(
            r#"{{"onednn_conv_config": {{"dims": {rank}, "input": {}, "kernel": {kernel}, "output": {}, "window": {window}, "feature_groups": {}}}}}"#,
            data(self.lhs),
            data(self.out),
            self.groups
        )
    }
}

/// The custom call's properties for backend config `json` and pinned
/// `layouts`.
fn call_props(m: &mut Module, json: &str, layouts: Option<&Layouts>) -> SmallVec<[NamedAttr; 6]> {
    let pinned = layouts.map(|[lhs, rhs, out]| ([lhs.clone(), rhs.clone()], [out.clone()]));
    onednn_call::call_props(
        m,
        ONEDNN_TARGET,
        json,
        pinned
            .as_ref()
            .map(|(operands, results)| PinnedLayouts { operands, results }),
    )
}

/// The convolution's own attributes, dropped from what replaces it.
fn drop_conv_attrs(m: &mut Module, op: OpId) {
    let drop: Vec<crate::intern::Sym> = super::CONV_ATTRS
        .iter()
        .filter_map(|n| m.strings.get(n))
        .collect();
    m.op_mut(op).attrs.retain(|a| !drop.contains(&a.name));
}

/// Rewrites convolution `op` as `call` (operands, result, location and
/// other attributes kept).
pub(super) fn apply(m: &mut Module, op: OpId, call: Call) {
    match call {
        Call::Direct(json, layouts) => {
            let props = call_props(m, &json, layouts.as_ref());
            let name = m.sym("stablehlo.custom_call");
            let o = m.op_mut(op);
            o.name = name;
            o.props = props.into_iter().collect();
            drop_conv_attrs(m, op);
        }
        Call::Spread {
            json,
            layouts,
            inner,
            low,
            high,
            interior,
        } => spread(
            m,
            op,
            &json,
            layouts.as_ref(),
            &inner,
            [low, high, interior],
        ),
    }
}

/// Spread 1×1: `%c = custom_call(lhs, rhs)`, a zero scalar, and `op`
/// itself turned into `stablehlo.pad %c, %zero` with `[low, high, interior]`.
fn spread(
    m: &mut Module,
    op: OpId,
    json: &str,
    layouts: Option<&Layouts>,
    inner: &[i64],
    pads: [Vec<i64>; 3],
) {
    let block = m.op(op).parent.expect("classified ops are placed");
    let loc = m.op(op).loc;
    let Type::Tensor { elem, .. } = m.ty(m.value_type(m.op(op).results[0])).clone() else {
        unreachable!("classified convolutions have ranked tensor results")
    };
    let scalar = m.intern_type(Type::Tensor {
        dims: SmallVec::new(),
        elem,
        encoding: None,
    });
    let inner_ty = m.intern_type(Type::Tensor {
        dims: SmallVec::from_slice(inner),
        elem,
        encoding: None,
    });
    let zero_value = m.add_attr(Attribute::Dense {
        body: "0.000000e+00".into(),
        ty: scalar,
    });
    let zero = m.add_op_named("stablehlo.constant");
    let value = m.sym("value");
    m.op_mut(zero).props = SmallVec::from_slice(&[NamedAttr {
        name: value,
        value: zero_value,
    }]);
    let zero_v = m.add_result(zero, scalar, None);
    let call = m.add_op_named("stablehlo.custom_call");
    let props = call_props(m, json, layouts);
    let operands = m.op(op).operands.clone();
    m.op_mut(call).operands = operands;
    m.op_mut(call).props = props.into_iter().collect();
    let call_v = m.add_result(call, inner_ty, None);
    let pos = m.blocks[block.index()]
        .ops
        .iter()
        .position(|&x| x == op)
        .expect("op in its block");
    for (i, k) in [zero, call].into_iter().enumerate() {
        m.op_mut(k).loc = loc;
        m.op_mut(k).parent = Some(block);
        m.blocks[block.index()].ops.insert(pos + i, k);
    }
    // MLIR's (alphabetical) property order, as the parser stores them.
    let [low, high, interior] = pads;
    let mut props: SmallVec<[NamedAttr; 2]> = SmallVec::new();
    for (name, v) in [
        ("edge_padding_high", high),
        ("edge_padding_low", low),
        ("interior_padding", interior),
    ] {
        let a = i64_array(m, v);
        props.push(NamedAttr {
            name: m.sym(name),
            value: m.add_attr(a),
        });
    }
    let pad = m.sym("stablehlo.pad");
    let o = m.op_mut(op);
    o.name = pad;
    o.operands = SmallVec::from_slice(&[call_v, zero_v]);
    o.props = props;
    drop_conv_attrs(m, op);
}

/// Pins row-major layouts on every host-kernel call (`hlobridge_*`
/// targets, which read their buffers row-major) that pins none; returns
/// how many it pinned. Needed once channels-last oneDNN calls are in a
/// program: XLA propagates their layouts through the elementwise ops around
/// them and would otherwise hand a host kernel a channels-last buffer.
pub fn pin_row_major_host_calls(m: &mut Module) -> usize {
    let (Some(target), Some(pinned)) = (
        m.strings.get("call_target_name"),
        m.strings.get("operand_layouts"),
    ) else {
        return 0;
    };
    let mut todo = Vec::new();
    for i in 0..m.ops.len() {
        let op = OpId(i as u32);
        if m.op_name(op) != "stablehlo.custom_call" || m.op(op).parent.is_none() {
            continue;
        }
        let props = &m.op(op).props;
        let host = props.iter().any(|a| {
            a.name == target
                && matches!(m.attr(a.value), Attribute::String { escaped, .. } if escaped.starts_with("hlobridge_"))
        });
        if host && !props.iter().any(|a| a.name == pinned) {
            todo.push(op);
        }
    }
    let rank = |m: &Module, v| match m.ty(m.value_type(v)) {
        Type::Tensor { dims, .. } => Some(dims.len() as i64),
        _ => None,
    };
    let mut count = 0;
    for op in todo {
        let o = m.op(op);
        let ins: Option<Vec<i64>> = o.operands.iter().map(|&v| rank(m, v)).collect();
        let outs: Option<Vec<i64>> = o.results.iter().map(|&v| rank(m, v)).collect();
        let (Some(ins), Some(outs)) = (ins, outs) else {
            continue;
        };
        let row_major = |r: &i64| onednn_call::row_major(*r as usize);
        let operands = layout_list(m, &ins.iter().map(row_major).collect::<Vec<_>>());
        let results = layout_list(m, &outs.iter().map(row_major).collect::<Vec<_>>());
        for (name, value) in [("operand_layouts", operands), ("result_layouts", results)] {
            let attr = NamedAttr {
                name: m.sym(name),
                value: m.add_attr(value),
            };
            m.op_mut(op).props.push(attr);
        }
        // MLIR's (alphabetical) property order.
        let mut props = std::mem::take(&mut m.op_mut(op).props);
        props.sort_by(|a, b| m.str(a.name).cmp(m.str(b.name)));
        m.op_mut(op).props = props;
        count += 1;
    }
    count
}
