//! The `hlobridge` command line.

mod cmd_fmt;
mod cmd_inspect;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// hlobridge: parse, inspect, stitch and run StableHLO modules.
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
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HLOBRIDGE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn main() -> ExitCode {
    init_logging();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Fmt(a) => cmd_fmt::run(a),
        Command::Inspect(a) => cmd_inspect::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
