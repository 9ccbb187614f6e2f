//! The `hlobridge` command line.

mod bind;
mod cmd_compile;
mod cmd_conform;
mod cmd_fmt;
mod cmd_inspect;
mod cmd_run;
mod cmd_serve;
mod cmd_stitch;
mod cmd_viz;
mod compare;
mod conform_case;
mod error;
mod known_failures;
mod npy;
mod quiet_stderr;
mod runtime;
mod stdout;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// The parser and stitcher allocate per op; mimalloc makes that ~15% faster
/// than the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// hlobridge: format, inspect, run, stitch, draw, compile and serve StableHLO
/// programs, and run the StableHLO conformance suite.
#[derive(Parser)]
#[command(name = "hlobridge", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Pretty-print (or canonicalize to generic form) a module.
    Fmt(cmd_fmt::FmtArgs),
    /// Summarize a module: functions, signatures, op histogram, custom
    /// calls, shardings, donation and size.
    Inspect(cmd_inspect::InspectArgs),
    /// Compile a module with a PJRT plugin and run it on .npy inputs.
    Run(cmd_run::RunArgs),
    /// Merge the segments of a plan into one module (and optionally run it).
    Stitch(cmd_stitch::StitchArgs),
    /// Run a StableHLO test suite (check.expect_* modules) through a PJRT
    /// plugin and compare the results on the host.
    Conform(cmd_conform::ConformArgs),
    /// Draw a stitch plan or a module as SVG, HTML or Graphviz DOT.
    Viz(cmd_viz::VizArgs),
    /// Compile a module deviceless for a TPU (libtpu), an NVIDIA GPU (CUDA
    /// plugin) or the CPU; report memory vs capacity, fusions, kernels.
    /// Out-of-memory exits 2.
    Compile(cmd_compile::CompileArgs),
    /// Serve an exported artifact over gRPC (Predict, Metadata, health).
    Serve(cmd_serve::ServeArgs),
}

fn init_logging() {
    let filter = hlobridge_config::get(hlobridge_config::Var::Log)
        .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    // Unknown `HLOBRIDGE_*` variables (typos), with the nearest known name.
    for w in hlobridge_config::check_environment() {
        tracing::warn!("{w}");
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Serve(a) = &cli.command {
        cmd_serve::init_logging(a);
    }
    init_logging();
    let result = match cli.command {
        Command::Fmt(a) => cmd_fmt::run(a),
        Command::Inspect(a) => cmd_inspect::run(a),
        Command::Run(a) => cmd_run::run(a),
        Command::Stitch(a) => cmd_stitch::run(a),
        Command::Viz(a) => cmd_viz::run(a),
        Command::Serve(a) => cmd_serve::run(a),
        Command::Compile(a) => return cmd_compile::run(a),
        Command::Conform(a) => match cmd_conform::run(a) {
            Ok(code) => return code,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
