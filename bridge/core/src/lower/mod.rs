//! Target-specific rewrites applied to a finished program just before it is
//! compiled for one backend (they are not part of stitching: a stitched
//! module stays portable, and the runtime lowers it for the plugin it runs
//! on).

pub mod collectives;
pub mod dot_operands;
pub mod host_conv;
pub mod host_gemm;
pub mod onednn_bias;
pub mod onednn_call;
pub mod onednn_softmax;
pub mod reduce_stages;

pub use collectives::{
    rewrite_collectives, rewrite_collectives_text, CollectiveTarget, CollectivesReport,
};
pub use dot_operands::{rewrite_dot_operands, DotOperandsReport};
pub use host_conv::{rewrite_host_conv, HostConvPolicy, HostConvReport};
pub use host_gemm::{rewrite_host_gemm, HostGemmPolicy, HostGemmReport};
pub use reduce_stages::{rewrite_reduce_stages, ReduceStagesReport};

use crate::{parse_module, print_module, PrintOptions};

/// Settings of the host lowering, read from the environment:
/// `HLOBRIDGE_HOST_GEMM=off` keeps every product with XLA, and
/// `HLOBRIDGE_HOST_CONV=off` every convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLowering {
    /// The host GEMM rewrite, if on.
    pub gemm: Option<HostGemmPolicy>,
    /// The host convolution rewrite, if on.
    pub conv: Option<HostConvPolicy>,
    /// The oneDNN softmax rewrite ([`onednn_softmax`]) from this many
    /// elements, if on.
    pub softmax: Option<u64>,
    /// The dot operand rewrite ([`dot_operands`]) for the products left to
    /// XLA, if on.
    pub dot_operands: bool,
    /// The two-stage rewrite of large reductions ([`reduce_stages`]), if on.
    pub reduce_stages: bool,
}

impl HostLowering {
    /// The default lowering, unless `HLOBRIDGE_HOST_GEMM` turns it off.
    ///
    /// `HLOBRIDGE_HOST_GEMM=all` rewrites every eligible product whatever
    /// its size (for testing the kernels on whole suites).
    pub fn from_env() -> Self {
        use hlobridge_config::{is_off, level, Level, Var};
        let gemm = match level(Var::HostGemm) {
            Level::Off => None,
            Level::All => Some(HostGemmPolicy::all()),
            Level::On => Some(HostGemmPolicy::default()),
        }
        .map(|p| {
            p.with_onednn(onednn_matmul_from_env())
                // `HLOBRIDGE_ONEDNN_MATMUL_REORIENT=0` keeps every
                // product's orientation.
                .with_onednn_reorient(
                    (!is_off(Var::OneDnnMatmulReorient))
                        .then_some(host_gemm::ONEDNN_REORIENT_FROM_N),
                )
        });
        // `HLOBRIDGE_HOST_CONV`: `off` keeps every convolution with XLA,
        // `all` rewrites every eligible one whatever its size.
        let conv = match level(Var::HostConv) {
            Level::Off => None,
            Level::All => Some(HostConvPolicy::all()),
            // `HLOBRIDGE_ONEDNN_CONV=plain`: the oneDNN route without
            // channels-last activations (rewrite version 5's).
            Level::On => Some(
                HostConvPolicy::default()
                    .with_onednn(!is_off(Var::OneDnnConv))
                    .with_onednn_channels_last(
                        hlobridge_config::get(Var::OneDnnConv).as_deref() != Some("plain"),
                    )
                    // `fuse`: channels-last calls with their epilogues folded.
                    .with_onednn_fuse(
                        hlobridge_config::get(Var::OneDnnConv).as_deref() == Some("fuse"),
                    )
                    // `HLOBRIDGE_CONV_WGRAD`: weight gradients on the host
                    // kernel (`host`, `all`) or XLA's convolution (`xla`).
                    .with_wgrad(host_conv::WeightGradRoute::from_env()),
            ),
        };
        // `HLOBRIDGE_ONEDNN_SOFTMAX=0` keeps XLA's softmax, `all` sends
        // every size.
        let softmax = match level(Var::OneDnnSoftmax) {
            Level::Off => None,
            Level::All => Some(0),
            Level::On => Some(onednn_softmax::MIN_ELEMENTS),
        };
        HostLowering {
            gemm,
            conv,
            softmax,
            // `HLOBRIDGE_DOT_OPERANDS=0` leaves XLA's products as they are.
            dot_operands: !is_off(Var::DotOperands),
            // `HLOBRIDGE_REDUCE_STAGES=0` leaves reductions to XLA's own split.
            reduce_stages: !is_off(Var::ReduceStages),
        }
    }

    /// A short stable tag of these settings, for compile-cache keys (a
    /// program lowered differently must not share a cache entry).
    pub fn cache_tag(&self) -> String {
        let conv = match self.conv {
            Some(p) => {
                format!(
                    "host_conv.v{}:{}:{}{}",
                    host_conv::REWRITE_VERSION,
                    p.min_work,
                    p.xla_from_work.unwrap_or(0),
                    match (p.onednn, p.onednn_channels_last) {
                        (false, _) => "",
                        (true, false) => ":onednn",
                        (true, true) if p.onednn_fuse => ":onednn:nhwc:fuse",
                        (true, true) => ":onednn:nhwc",
                    },
                ) + p.wgrad.tag()
            }
            None => String::new(),
        };
        let gemm = match self.gemm {
            Some(p) => format!(
                "host_gemm.v{}:{}:{}:{}:{}{}",
                host_gemm::REWRITE_VERSION,
                p.min_work,
                p.max_work,
                p.min_side,
                p.skinny_from_weights,
                p.onednn_from_work.map_or_else(String::new, |w| format!(
                    ":onednn{w}{}",
                    p.onednn_reorient_from_n
                        .map_or_else(String::new, |n| format!(":reorient{n}"))
                ))
            ),
            None => String::new(),
        };
        let mut tag = if conv.is_empty() {
            gemm
        } else {
            format!("{gemm};{conv}")
        };
        if let Some(min) = self.softmax {
            tag.push_str(&format!(";onednn_softmax.v1:{min}"));
        }
        if self.dot_operands {
            tag.push_str(&format!(";dot_operands.v{}", dot_operands::REWRITE_VERSION));
        }
        if self.reduce_stages {
            tag.push_str(&format!(
                ";reduce_stages.v{}",
                reduce_stages::REWRITE_VERSION
            ));
        }
        tag
    }
}

/// Smallest work (`batch·m·n·k`) of an f32 product sent to the plugin's
/// oneDNN matrix product by default: 256³. Measured on a 2-core Intel Xeon
/// (AVX-512; `benches/gemm_bench.py`, docs/host_gemm.md): from 256³ oneDNN
/// ran 1.4–1.8× the host kernel's throughput (attention's batched products
/// included) and 1.05–1.3× XLA's dot above the host kernel's window; at
/// 128³ its per-call set-up made it 0.75× the host kernel.
pub const ONEDNN_MATMUL_FROM_WORK: u64 = 256 * 256 * 256;

/// `HLOBRIDGE_ONEDNN_MATMUL` as the policy's `onednn_from_work`.
fn onednn_matmul_from_env() -> Option<u64> {
    use hlobridge_config::{get, is_off_word, is_on_word, Var};
    match get(Var::OneDnnMatmul).as_deref().map(str::trim) {
        Some(v) if is_off_word(v) => None,
        Some(v) if v.eq_ignore_ascii_case("all") => Some(0),
        Some(v) if is_on_word(v) => Some(ONEDNN_MATMUL_FROM_WORK),
        // `auto` (and anything else): where it was measured faster.
        _ => cpu_is_intel().then_some(ONEDNN_MATMUL_FROM_WORK),
    }
}

/// Whether this machine's CPU is an Intel one (`vendor_id` in
/// `/proc/cpuinfo`; false where that cannot be read). Read once.
pub fn cpu_is_intel() -> bool {
    static INTEL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *INTEL.get_or_init(|| {
        std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|info| {
            info.lines()
                .find(|l| l.starts_with("vendor_id"))
                .is_some_and(|l| l.contains("GenuineIntel"))
        })
    })
}

impl HostLowering {
    /// Whether any host rewrite is on (every CPU-only rewrite added to
    /// [`HostLowering`] must be counted here).
    pub fn any(&self) -> bool {
        self.gemm.is_some()
            || self.conv.is_some()
            || self.softmax.is_some()
            || self.dot_operands
            || self.reduce_stages
    }
}

/// The single switch for CPU-only rewrites (host GEMM and every other
/// host-kernel lowering in [`HostLowering`]): the host lowering to apply to
/// a program compiled for PJRT `platform`, or `None`. Only `cpu` is ever
/// lowered; TPU/GPU targets (`hb.compile_for`, `hlobridge compile`, a CUDA
/// runtime) get the portable stitched program as it is. Callers still check
/// that their client registered the host kernels.
pub fn host_lowering_for(platform: &str) -> Option<HostLowering> {
    if platform != "cpu" {
        return None;
    }
    let l = HostLowering::from_env();
    l.any().then_some(l)
}

/// What [`lower_text_for_host_report`] rewrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostLoweringReport {
    /// The host GEMM rewrite.
    pub gemm: HostGemmReport,
    /// The host convolution rewrite.
    pub conv: HostConvReport,
    /// Softmaxes sent to oneDNN's softmax.
    pub softmax: usize,
    /// The dot operand rewrite of the products left to XLA.
    pub dot_operands: DotOperandsReport,
    /// Reductions run in two stages.
    pub reduce_stages: ReduceStagesReport,
}

/// Lowers module `text` for a host (CPU) plugin that has the host kernels:
/// returns the rewritten text and what each rewrite did, or `None` when
/// nothing applies (no products or convolutions, none admitted, or text this
/// parser does not read, which is then compiled as it is). The compile
/// service (`hlobridge-compile`) is its one caller at run time.
pub fn lower_text_for_host_report(
    text: &str,
    lowering: &HostLowering,
) -> Option<(String, HostLoweringReport)> {
    let gemm = lowering.gemm.filter(|_| text.contains("dot"));
    let conv = lowering.conv.filter(|_| text.contains("convolution"));
    let softmax = lowering
        .softmax
        .filter(|_| text.contains("exponential") && text.contains("divide"));
    let dot_operands = lowering.dot_operands && text.contains("dot_general");
    let reduce_stages = lowering.reduce_stages && text.contains("stablehlo.reduce");
    if gemm.is_none() && conv.is_none() && softmax.is_none() && !dot_operands && !reduce_stages {
        return None;
    }
    let mut m = match parse_module(text) {
        Ok(m) => m,
        Err(e) => {
            tracing::debug!(error = %e, "host lowering skipped: module does not parse");
            return None;
        }
    };
    let mut report = HostLoweringReport::default();
    if let Some(policy) = conv {
        report.conv = rewrite_host_conv(&mut m, &policy);
    }
    if let Some(policy) = gemm {
        report.gemm = rewrite_host_gemm(&mut m, &policy);
        if report.gemm.onednn > 0 {
            report.gemm.bias_fused = onednn_bias::fuse_matmul_bias(&mut m);
        }
    }
    if dot_operands {
        // After the host GEMM rewrite: only the products left to XLA.
        report.dot_operands = dot_operands::rewrite_dot_operands(&mut m);
    }
    if let Some(min) = softmax {
        report.softmax = onednn_softmax::rewrite_onednn_softmax(&mut m, min);
    }
    if reduce_stages {
        // After the softmax rewrite, which takes its reductions whole.
        report.reduce_stages = reduce_stages::rewrite_reduce_stages(&mut m);
    }
    if report.conv.channels_last > 0 {
        // Channels-last oneDNN calls: keep the host kernels' buffers row-major.
        host_conv::pin_row_major_host_calls(&mut m);
    }
    if report.gemm.rewritten == 0
        && report.conv.rewritten == 0
        && report.softmax == 0
        && report.dot_operands.rewritten == 0
        && report.reduce_stages.rewritten == 0
    {
        return None;
    }
    Some((print_module(&m, &PrintOptions::default()), report))
}
