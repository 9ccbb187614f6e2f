//! Target-specific rewrites applied to a finished program just before it is
//! compiled for one backend (they are not part of stitching: a stitched
//! module stays portable, and the runtime lowers it for the plugin it runs
//! on).

pub mod collectives;
pub mod host_gemm;

pub use collectives::{
    rewrite_collectives, rewrite_collectives_text, CollectiveTarget, CollectivesReport,
};
pub use host_gemm::{rewrite_host_gemm, HostGemmPolicy, HostGemmReport};

use crate::{parse_module, print_module, PrintOptions};

/// Settings of the host lowering, read from the environment:
/// `HLOBRIDGE_HOST_GEMM=off` keeps every product with XLA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLowering {
    /// The host GEMM rewrite, if on.
    pub gemm: Option<HostGemmPolicy>,
}

impl HostLowering {
    /// The default lowering, unless `HLOBRIDGE_HOST_GEMM` turns it off.
    ///
    /// `HLOBRIDGE_HOST_GEMM=all` rewrites every eligible product whatever
    /// its size (for testing the kernels on whole suites).
    pub fn from_env() -> Self {
        let gemm = match std::env::var("HLOBRIDGE_HOST_GEMM").as_deref() {
            Ok("0") | Ok("off") | Ok("false") | Ok("no") => None,
            Ok("all") => Some(HostGemmPolicy::all()),
            _ => Some(HostGemmPolicy::default()),
        };
        HostLowering { gemm }
    }

    /// A short stable tag of these settings, for compile-cache keys (a
    /// program lowered differently must not share a cache entry).
    pub fn cache_tag(&self) -> String {
        match self.gemm {
            Some(p) => format!(
                "host_gemm.v{}:{}:{}:{}",
                host_gemm::REWRITE_VERSION,
                p.min_work,
                p.max_work,
                p.min_side
            ),
            None => String::new(),
        }
    }
}

impl HostLowering {
    /// Whether any host rewrite is on (every CPU-only rewrite added to
    /// [`HostLowering`] must be counted here).
    pub fn any(&self) -> bool {
        self.gemm.is_some()
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

/// Lowers module `text` for a host (CPU) plugin that has the host kernels:
/// returns the rewritten text and what was rewritten, or `None` when nothing
/// applies (no products, none admitted, or text this parser does not read,
/// which is then compiled as it is).
pub fn lower_text_for_host(
    text: &str,
    lowering: &HostLowering,
) -> Option<(String, HostGemmReport)> {
    let policy = lowering.gemm?;
    if !text.contains("dot") {
        return None;
    }
    let mut m = match parse_module(text) {
        Ok(m) => m,
        Err(e) => {
            tracing::debug!(error = %e, "host lowering skipped: module does not parse");
            return None;
        }
    };
    let report = rewrite_host_gemm(&mut m, &policy);
    if report.rewritten == 0 {
        return None;
    }
    Some((print_module(&m, &PrintOptions::default()), report))
}
