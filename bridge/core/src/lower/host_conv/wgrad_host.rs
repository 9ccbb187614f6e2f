//! Which weight gradients go to the host kernel's weight-gradient path
//! instead of XLA's convolution (`HLOBRIDGE_CONV_WGRAD`).
//!
//! A weight gradient in StableHLO is a convolution whose window is the
//! output gradient's map and whose result is the forward window (`[f, b,
//! 0, 1]x[i, o, 0, 1]->[0, 1, b, f]`). Ungrouped ones of at least
//! [`HostConvPolicy::xla_from_work`](super::HostConvPolicy::xla_from_work)
//! multiply-adds stay with XLA (ResNet-50's 3×3 and strided 1×1 weight
//! gradients). `HLOBRIDGE_CONV_WGRAD=host` sends them to the host kernel
//! instead, which runs them as GEMMs over an im2col of the input chunked
//! over the contraction (`pjrt-client/src/host_kernels/conv/wgrad.rs`,
//! which takes exactly the forms [`takes`] admits). Measured slower than
//! XLA's convolution inside ResNet-50's training step (process CPU time
//! per step +10 %: the host GEMM, about 55 G multiply-adds/s per core
//! here, is the limit), so XLA stays the default; docs/host_conv.md.

/// Where weight gradients go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WeightGradRoute {
    /// The default: XLA's convolution from `xla_from_work`, 1×1 ones over
    /// large maps as batched products (rewrite version 6's routing).
    Xla,
    /// The host kernel for those XLA would take (the batched products
    /// stay).
    Host,
    /// The host kernel for every one, the 1×1 products' too.
    HostAll,
}

impl WeightGradRoute {
    /// `HLOBRIDGE_CONV_WGRAD`: `xla` (the default, or an off word), `host`,
    /// `all`; anything else is logged and the default used.
    pub fn from_env() -> Self {
        use hlobridge_config::{get, is_off_word, Var};
        match get(Var::ConvWgrad).map(|v| v.trim().to_ascii_lowercase()) {
            None => WeightGradRoute::Xla,
            Some(v) if v == "host" => WeightGradRoute::Host,
            Some(v) if v == "all" => WeightGradRoute::HostAll,
            Some(v) if v == "xla" || is_off_word(&v) => WeightGradRoute::Xla,
            Some(v) => {
                tracing::warn!(
                    value = %v,
                    "HLOBRIDGE_CONV_WGRAD must be `xla`, `host` or `all`; using `xla`"
                );
                WeightGradRoute::Xla
            }
        }
    }

    /// A short tag for compile-cache keys.
    pub fn tag(self) -> &'static str {
        match self {
            WeightGradRoute::Xla => "",
            WeightGradRoute::Host => ":wg",
            WeightGradRoute::HostAll => ":wgall",
        }
    }
}

/// Fewest window taps (the kernel's `wgrad::MIN_TAPS`).
const MIN_TAPS: i64 = 256;

/// Whether the host kernel's weight-gradient path takes an ungrouped
/// convolution with these attributes: no lhs dilation, no reversal, a
/// window of at least [`MIN_TAPS`] taps and at least as many taps as result
/// positions.
pub(super) fn takes(
    window: &[i64],
    out_spatial: &[i64],
    lhs_dilation: &[i64],
    reversed: bool,
) -> bool {
    let taps: i64 = window.iter().product();
    let positions: i64 = out_spatial.iter().product();
    !reversed && lhs_dilation.iter().all(|&d| d == 1) && taps >= MIN_TAPS && taps >= positions
}
