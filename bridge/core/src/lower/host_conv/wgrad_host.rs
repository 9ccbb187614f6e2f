//! Which weight gradients go to the host kernel instead of XLA's
//! convolution (`HLOBRIDGE_CONV_WGRAD`).
//!
//! A weight gradient in StableHLO is a convolution whose window is the
//! output gradient's map and whose result is the forward window (`[f, b,
//! 0, 1]x[i, o, 0, 1]->[0, 1, b, f]`). Ungrouped ones of at least
//! [`HostConvPolicy::xla_from_work`](super::HostConvPolicy::xla_from_work)
//! multiply-adds (ResNet-50's 3×3 and strided 1×1 weight gradients) go to:
//!
//! - the host kernel when oneDNN's library is found (the default, `auto`):
//!   there they run as oneDNN backward-weights convolutions
//!   (`pjrt-client/src/host_kernels/conv/onednn_wgrad.rs`, which takes the
//!   f32 ones [`takes`] admits for [`WeightGradRoute::OneDnn`]), at about
//!   eager PyTorch's speed and 1.3–2.2× faster than XLA's convolution
//!   (docs/host_conv.md, "oneDNN backward weights");
//! - XLA's convolution otherwise. `HLOBRIDGE_CONV_WGRAD=host` sends those
//!   of at least [`MIN_TAPS`] window taps to the host kernel anyway, whose
//!   own path without oneDNN is GEMMs over an im2col of the input
//!   (`conv/wgrad.rs`), measured slower than XLA inside ResNet-50's
//!   training step.
//!
//! The kernel falls back to its own loops whenever oneDNN is missing or
//! refuses a shape, so a program lowered either way computes the same
//! convolution anywhere.

/// Where weight gradients go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightGradRoute {
    /// XLA's convolution from `xla_from_work`, 1×1 ones over large maps as
    /// batched products (rewrite version 6's routing; the default without
    /// oneDNN's library).
    Xla,
    /// The host kernel, on oneDNN's library, for every f32 convolution of
    /// a training program (one with backward convolutions) that XLA or
    /// the CPU plugin's oneDNN thunk would take, the forward ones too
    /// (the 1×1 weight gradients' batched products stay), and for every
    /// f32 weight gradient and strided input gradient XLA would take in
    /// other programs. The default when oneDNN's library is found.
    OneDnn,
    /// [`OneDnn`](WeightGradRoute::OneDnn) for the gradients only: a
    /// training program's forward convolutions (and its stride-1 input
    /// gradients) stay on the plugin's oneDNN thunk (the routing before
    /// `:dnn3`; measured slower, docs/host_conv.md).
    OneDnnGradients,
    /// The host kernel for those XLA would take with at least [`MIN_TAPS`]
    /// window taps (the batched products stay).
    Host,
    /// The host kernel for every one, the 1×1 products' too.
    HostAll,
}

impl WeightGradRoute {
    /// `HLOBRIDGE_CONV_WGRAD`: `auto` (the default: [`OneDnn`] when
    /// [`hlobridge_config::onednn_library`] finds the library, else
    /// [`Xla`]), `onednn-gradients` (the library for the gradients only),
    /// `xla` (or an off word), `host`, `all`; anything else is logged and
    /// the default used.
    ///
    /// [`OneDnn`]: WeightGradRoute::OneDnn
    /// [`Xla`]: WeightGradRoute::Xla
    pub fn from_env() -> Self {
        use hlobridge_config::{get, is_off_word, Var};
        let auto = || {
            if hlobridge_config::onednn_library().is_some() {
                WeightGradRoute::OneDnn
            } else {
                WeightGradRoute::Xla
            }
        };
        match get(Var::ConvWgrad).map(|v| v.trim().to_ascii_lowercase()) {
            None => auto(),
            Some(v) if v == "auto" => auto(),
            Some(v) if v == "onednn-gradients" => WeightGradRoute::OneDnnGradients,
            Some(v) if v == "host" => WeightGradRoute::Host,
            Some(v) if v == "all" => WeightGradRoute::HostAll,
            Some(v) if v == "xla" || is_off_word(&v) => WeightGradRoute::Xla,
            Some(v) => {
                tracing::warn!(
                    value = %v,
                    "HLOBRIDGE_CONV_WGRAD must be `auto`, `onednn-gradients`, `xla`, `host` or `all`; using `auto`"
                );
                auto()
            }
        }
    }

    /// A short tag for compile-cache keys.
    pub fn tag(self) -> &'static str {
        match self {
            WeightGradRoute::Xla => "",
            WeightGradRoute::OneDnn => ":dnn3",
            WeightGradRoute::OneDnnGradients => ":wgdnn2",
            WeightGradRoute::Host => ":wg",
            WeightGradRoute::HostAll => ":wgall",
        }
    }
}

/// Fewest window taps for the host kernel's own weight-gradient path (the
/// kernel's `wgrad::MIN_TAPS`).
const MIN_TAPS: i64 = 256;

/// Whether `route` sends an ungrouped convolution that XLA would take to
/// the host kernel: never for [`WeightGradRoute::Xla`]; otherwise a weight
/// gradient (no lhs dilation, no reversal and at least as many window taps
/// as result positions), with at least [`MIN_TAPS`] taps for the kernel's
/// own path and f32 for oneDNN's; and for oneDNN also a strided forward's
/// input gradient (lhs dilation, window stride 1), which the kernel runs
/// as oneDNN's backward-data convolution (`conv/onednn_data.rs`; XLA's
/// convolution ran ResNet-50's 3×3/2 ones at about 0.6× eager's speed).
pub(super) fn takes(
    route: WeightGradRoute,
    f32: bool,
    window: &[i64],
    out_spatial: &[i64],
    lhs_dilation: &[i64],
    stride: &[i64],
    reversed: bool,
) -> bool {
    let taps: i64 = window.iter().product();
    let positions: i64 = out_spatial.iter().product();
    let dilated = lhs_dilation.iter().any(|&d| d > 1);
    let form = !reversed && !dilated && taps >= positions;
    let input_grad = dilated && stride.iter().all(|&s| s == 1);
    match route {
        WeightGradRoute::Xla => false,
        WeightGradRoute::OneDnn | WeightGradRoute::OneDnnGradients => (form || input_grad) && f32,
        WeightGradRoute::Host | WeightGradRoute::HostAll => form && taps >= MIN_TAPS,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::{rewrite_host_conv, HostConvPolicy};
    use super::WeightGradRoute;
    use crate::{parse_module, print_module, PrintOptions};

    /// ResNet-50's 3×3 64@56 weight gradient (batch 8, as torch_xla spells
    /// it: 2³⁰ multiply-adds) and a 1×1 64→256 one over a 28² map.
    const WGRADS: &str = r#"func.func public @main(%x: tensor<8x64x56x56xf32>, %dy: tensor<8x64x56x56xf32>, %x2: tensor<8x64x28x28xf32>, %dy2: tensor<8x256x28x28xf32>) -> (tensor<3x3x64x64xf32>, tensor<1x1x64x256xf32>) {
  %0 = stablehlo.convolution(%x, %dy) dim_numbers = [f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f], window = {stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x64x56x56xf32>, tensor<8x64x56x56xf32>) -> tensor<3x3x64x64xf32>
  %1 = stablehlo.convolution(%x2, %dy2) dim_numbers = [f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f], window = {stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x64x28x28xf32>, tensor<8x256x28x28xf32>) -> tensor<1x1x64x256xf32>
  return %0, %1 : tensor<3x3x64x64xf32>, tensor<1x1x64x256xf32>
}"#;

    fn routed(route: WeightGradRoute) -> String {
        routed_text(WGRADS, route)
    }

    /// `text` rewritten with oneDNN on and weight gradients routed so
    /// (checked to parse back).
    pub(crate) fn routed_text(text: &str, route: WeightGradRoute) -> String {
        let mut m = parse_module(text).expect("parse");
        let policy = HostConvPolicy::default()
            .with_onednn(true)
            .with_wgrad(route);
        rewrite_host_conv(&mut m, &policy);
        let out = print_module(&m, &PrintOptions::default());
        parse_module(&out).expect("rewritten module parses back");
        out
    }

    #[test]
    fn weight_gradients_follow_the_route() {
        // Default: XLA's convolution for the 3×3, batched products for the 1×1.
        let out = routed(WeightGradRoute::Xla);
        assert_eq!(out.matches("stablehlo.convolution").count(), 1, "{out}");
        assert!(out.contains("stablehlo.dot_general"), "{out}");
        assert!(!out.contains("@hlobridge_conv("), "{out}");
        // host: the 3×3 on the host kernel, the 1×1 still products.
        let out = routed(WeightGradRoute::Host);
        assert_eq!(out.matches("@hlobridge_conv(").count(), 1, "{out}");
        assert!(out.contains("stablehlo.dot_general"), "{out}");
        assert!(!out.contains("stablehlo.convolution"), "{out}");
        // oneDNN: the 3×3 on the host kernel (for oneDNN), the 1×1 still
        // products.
        let out = routed(WeightGradRoute::OneDnn);
        assert_eq!(out.matches("@hlobridge_conv(").count(), 1, "{out}");
        assert!(out.contains("stablehlo.dot_general"), "{out}");
        assert!(!out.contains("stablehlo.convolution"), "{out}");
        // all: both on the host kernel.
        let out = routed(WeightGradRoute::HostAll);
        assert_eq!(out.matches("@hlobridge_conv(").count(), 2, "{out}");
        assert!(!out.contains("stablehlo.dot_general"), "{out}");
    }

    /// A training program's three convolutions at ResNet-50's 3×3/2
    /// 128@56 (batch 8): the forward, the weight gradient, and the input
    /// gradient (lhs dilation 2, as torch_xla spells it).
    const TRAINING: &str = r#"func.func public @main(%x: tensor<8x128x56x56xf32>, %w: tensor<128x128x3x3xf32>, %dy: tensor<8x128x28x28xf32>) -> (tensor<8x128x28x28xf32>, tensor<3x3x128x128xf32>, tensor<8x128x56x56xf32>) {
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [2, 2], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x128x56x56xf32>, tensor<128x128x3x3xf32>) -> tensor<8x128x28x28xf32>
  %1 = stablehlo.convolution(%x, %dy) dim_numbers = [f, b, 0, 1]x[i, o, 0, 1]->[0, 1, b, f], window = {stride = [1, 1], pad = [[1, 0], [1, 0]], lhs_dilate = [1, 1], rhs_dilate = [2, 2], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x128x56x56xf32>, tensor<8x128x28x28xf32>) -> tensor<3x3x128x128xf32>
  %2 = stablehlo.reverse %w, dims = [2, 3] : tensor<128x128x3x3xf32>
  %3 = stablehlo.convolution(%dy, %2) dim_numbers = [b, f, 0, 1]x[i, o, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 2], [1, 2]], lhs_dilate = [2, 2], rhs_dilate = [1, 1], reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<8x128x28x28xf32>, tensor<128x128x3x3xf32>) -> tensor<8x128x56x56xf32>
  return %0, %1, %3 : tensor<8x128x28x28xf32>, tensor<3x3x128x128xf32>, tensor<8x128x56x56xf32>
}"#;

    #[test]
    fn training_convolutions_follow_the_route() {
        let routed = |route| routed_text(TRAINING, route);
        // The library: all three on the host kernel.
        let out = routed(WeightGradRoute::OneDnn);
        assert_eq!(out.matches("@hlobridge_conv(").count(), 3, "{out}");
        assert!(!out.contains("onednn$convolution"), "{out}");
        assert!(!out.contains("stablehlo.convolution"), "{out}");
        // The library for the gradients: the forward on the plugin's thunk.
        let out = routed(WeightGradRoute::OneDnnGradients);
        assert_eq!(out.matches("@hlobridge_conv(").count(), 2, "{out}");
        assert_eq!(out.matches("onednn$convolution").count(), 1, "{out}");
        // XLA's route: the forward on the thunk, both gradients on XLA.
        let out = routed(WeightGradRoute::Xla);
        assert!(!out.contains("@hlobridge_conv("), "{out}");
        assert_eq!(out.matches("stablehlo.convolution").count(), 2, "{out}");
    }

    #[test]
    fn takes_only_the_kernels_forms() {
        use super::takes;
        use WeightGradRoute::{Host, OneDnn, Xla};
        let t = |route, f32, w: &[i64], o: &[i64], d: &[i64], rev| {
            takes(route, f32, w, o, d, &[1, 1], rev)
        };
        assert!(t(Host, true, &[56, 56], &[3, 3], &[1, 1], false));
        assert!(
            !t(Host, true, &[56, 56], &[3, 3], &[2, 2], false),
            "lhs dilation"
        );
        assert!(
            !t(Host, true, &[56, 56], &[3, 3], &[1, 1], true),
            "reversed"
        );
        assert!(
            !t(Host, true, &[14, 14], &[3, 3], &[1, 1], false),
            "under 256 taps"
        );
        assert!(
            !t(Host, true, &[3, 3], &[56, 56], &[1, 1], false),
            "a forward convolution"
        );
        // oneDNN: small maps too, f32 only, never a forward convolution.
        assert!(t(OneDnn, true, &[7, 7], &[3, 3], &[1, 1], false));
        assert!(!t(OneDnn, false, &[7, 7], &[3, 3], &[1, 1], false), "f64");
        assert!(
            !t(OneDnn, true, &[3, 3], &[7, 7], &[1, 1], false),
            "a forward convolution"
        );
        // oneDNN: a strided forward's input gradient (3×3/2 on 28²: lhs
        // dilation 2, window stride 1), reversed or not; not with a window
        // stride too, nor in f64.
        assert!(t(OneDnn, true, &[3, 3], &[28, 28], &[2, 2], false));
        assert!(t(OneDnn, true, &[3, 3], &[28, 28], &[2, 2], true));
        assert!(!takes(
            OneDnn,
            true,
            &[3, 3],
            &[14, 14],
            &[2, 2],
            &[2, 2],
            false
        ));
        assert!(!t(OneDnn, false, &[3, 3], &[28, 28], &[2, 2], false), "f64");
        assert!(!t(Host, true, &[3, 3], &[28, 28], &[2, 2], false));
        assert!(!t(Xla, true, &[56, 56], &[3, 3], &[1, 1], false));
    }
}
