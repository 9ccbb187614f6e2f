//! Compile options hlobridge adds on the XLA CPU plugin, per program.
//!
//! The `xla-cpu-pjrt` plugin's cost model keeps matrix multiplies on its
//! Eigen path even where its XNNPACK graph fusion is much faster. Measured
//! on the project's 2-core machine (same run, each program both ways):
//!
//! | program | Eigen (default) | XNNPACK fusion |
//! |---|---|---|
//! | whole train step, batch 64, 256→512→256 | 2.56 ms | 1.99 ms |
//! | whole train step, batch 256, 512→512→512 | 10.5 ms | 9.3 ms |
//! | hybrid step, batch 64, 128→128 | 408 µs | 335 µs |
//! | hybrid step, batch 256, 512→512 | 6.47 ms | 4.44 ms |
//! | whole train step, batch 16, 64→128→64 | 246 µs | 296 µs |
//! | hybrid step, batch 16, 32→32 | 124 µs | 272 µs |
//!
//! With `HLOBRIDGE_CPU_XNN=auto`, programs whose largest dot does at least
//! [`MIN_DOT_MACS`] multiply-accumulates (estimated statically,
//! [`hlobridge::cost`]) are compiled with
//! `xla_cpu_experimental_xnn_graph_fusion_mode =
//! XNN_GRAPH_FUSION_MODE_BYPASS_COST_MODEL`; smaller ones keep the default,
//! where XNNPACK's per-call overhead loses.
//!
//! It is opt-in (default `never`) for two reasons: this plugin cannot
//! serialize XNNPACK fusions (`XnnFusionThunk is not serializable`), so such
//! programs skip the persistent compile cache and every new process
//! compiles them again; and XLA documents the bypass value as a testing
//! knob. `HLOBRIDGE_CPU_XNN` (read once): `never`/`0` (default), `auto`, or
//! `always`/`1`. Options the caller passes explicitly always win, and only
//! the `cpu` platform is touched. If a compile with the added option fails,
//! the program is compiled again without it.

use std::sync::OnceLock;

use pjrt_client::{CompileOptions, XlaOption};

/// The XLA option hlobridge sets.
pub const XNN_OPTION: &str = "xla_cpu_experimental_xnn_graph_fusion_mode";
/// Its value.
pub const XNN_VALUE: &str = "XNN_GRAPH_FUSION_MODE_BYPASS_COST_MODEL";
/// Smallest largest-dot work (multiply-accumulates) that gets XNNPACK.
pub const MIN_DOT_MACS: f64 = (1u64 << 20) as f64;

/// The `HLOBRIDGE_CPU_XNN` policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// By the program's dot work.
    Auto,
    /// Every program.
    Always,
    /// Never.
    Never,
}

/// The process-wide policy (`HLOBRIDGE_CPU_XNN`, read once).
pub fn mode() -> Mode {
    static MODE: OnceLock<Mode> = OnceLock::new();
    *MODE.get_or_init(|| match std::env::var("HLOBRIDGE_CPU_XNN").as_deref() {
        Err(_) | Ok("") | Ok("0") | Ok("never") | Ok("off") => Mode::Never,
        Ok("auto") => Mode::Auto,
        Ok("1") | Ok("always") | Ok("on") => Mode::Always,
        Ok(other) => {
            tracing::warn!(value = other, "HLOBRIDGE_CPU_XNN is not never, auto or always; using never");
            Mode::Never
        }
    })
}

/// Adds the XNNPACK option to `opts` when the policy says so for this
/// program; returns whether it did.
pub fn tune(platform: &str, text: &str, opts: &mut CompileOptions) -> bool {
    if platform != "cpu" || opts.xla_options.iter().any(|(k, _)| k == XNN_OPTION) {
        return false;
    }
    let wanted = match mode() {
        Mode::Never => false,
        Mode::Always => true,
        Mode::Auto => match hlobridge::parse::parse_module(text) {
            Ok(module) => {
                let work = hlobridge::cost::dot_work(&module);
                tracing::debug!(dots = work.dots, max_macs = work.max_macs, "dot work of the program");
                work.max_macs >= MIN_DOT_MACS
            }
            // The compile reports the error in its own words.
            Err(_) => false,
        },
    };
    if wanted {
        opts.xla_options
            .push((XNN_OPTION.to_string(), XlaOption::Str(XNN_VALUE.to_string())));
        opts.xla_options.sort_by(|a, b| a.0.cmp(&b.0));
    }
    wanted
}
