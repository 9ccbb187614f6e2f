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
//! as the thunk reads them) and the feature group count.
//!
//! Taken: f32; batch group count 1; no lhs dilation and no window reversal
//! (oneDNN's forward convolution has neither); padding ≥ 0; a window no
//! larger than the result in every spatial dimension (the forward form:
//! this leaves out the weight gradient, whose window is the output
//! gradient's whole map); and not depthwise (one input feature per group:
//! the host kernel's vectorised depthwise loop measured faster on most
//! shapes). Everything else keeps the host kernel or XLA.

use crate::ir::{Attribute, NamedAttr, OpId};
use crate::Module;
use smallvec::SmallVec;

/// The custom-call target of the plugin's oneDNN convolution thunk.
pub const ONEDNN_TARGET: &str = "__onednn$convolution";

/// What the classifier knows of one convolution (dimension indices as in
/// `read_conv_dims`: `[batch|in, feature|out, spatial...]`).
pub(super) struct Form<'a> {
    pub f32: bool,
    pub groups: i64,
    pub batch_groups: i64,
    /// Kernel input features per group.
    pub kernel_in: i64,
    pub lhs: &'a [usize],
    pub rhs: &'a [usize],
    pub out: &'a [usize],
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
}

impl Form<'_> {
    /// The JSON backend config if oneDNN takes this convolution (module docs).
    pub fn config(&self) -> Option<String> {
        let nsp = self.window.len();
        let depthwise = self.groups > 1 && self.kernel_in == 1;
        if !self.f32
            || self.batch_groups != 1
            || depthwise
            || self.reversed
            || !(1..=3).contains(&nsp)
            || self.lhs_dilation.iter().any(|&d| d != 1)
            || self.pad.iter().any(|&p| p < 0)
            || self.window.iter().zip(self.out_spatial).any(|(w, o)| w > o)
        {
            return None;
        }
        let list = |v: &mut dyn Iterator<Item = i64>| -> String {
            let items: Vec<String> = v.map(|x| x.to_string()).collect();
            format!("[{}]", items.join(", "))
        };
        let spatial = |d: &[usize]| list(&mut d[2..].iter().map(|&i| i as i64));
        let rank = nsp + 2;
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
        let window = format!(
            r#"{{"size": {}, "pad_left": {}, "pad_right": {}, "strides": {}, "window_dilations": {}}}"#,
            list(&mut self.window.iter().copied()),
            list(&mut (0..nsp).map(|i| self.pad[2 * i])),
            list(&mut (0..nsp).map(|i| self.pad[2 * i + 1])),
            list(&mut self.stride.iter().copied()),
            // The thunk subtracts one (oneDNN counts dilation from 0).
            list(&mut self.rhs_dilation.iter().copied()),
        );
        Some(format!(
            r#"{{"onednn_conv_config": {{"dims": {rank}, "input": {}, "kernel": {kernel}, "output": {}, "window": {window}, "feature_groups": {}}}}}"#,
            data(self.lhs),
            data(self.out),
            self.groups
        ))
    }
}

/// Rewrites convolution `op` into the oneDNN call with backend config
/// `json` (operands, result, location and other attributes kept).
pub(super) fn apply(m: &mut Module, op: OpId, json: &str) {
    let i32t = m.int_type(32);
    let props = [
        (
            "api_version",
            Attribute::Integer {
                text: "1".into(),
                ty: Some(i32t),
            },
        ),
        (
            "backend_config",
            Attribute::String {
                // The JSON has no backslashes; quotes are escaped for MLIR.
                escaped: json.replace('"', "\\\"").into(),
                ty: None,
            },
        ),
        (
            "call_target_name",
            Attribute::String {
                escaped: ONEDNN_TARGET.into(),
                ty: None,
            },
        ),
    ];
    let props: SmallVec<[NamedAttr; 4]> = props
        .into_iter()
        .map(|(name, value)| NamedAttr {
            name: m.sym(name),
            value: m.add_attr(value),
        })
        .collect();
    let drop: Vec<crate::intern::Sym> = super::CONV_ATTRS
        .iter()
        .filter_map(|n| m.strings.get(n))
        .collect();
    let name = m.sym("stablehlo.custom_call");
    let o = m.op_mut(op);
    o.name = name;
    o.props = props.into_iter().collect();
    o.attrs.retain(|a| !drop.contains(&a.name));
}
