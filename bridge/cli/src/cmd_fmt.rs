//! `hlobridge fmt FILE [--generic] [-o OUT]`.

use crate::error::{CliError, Result};
use clap::Args;
use std::path::PathBuf;

/// Arguments of `hlobridge fmt`.
#[derive(Args)]
pub struct FmtArgs {
    /// The module to format (`-` for standard input).
    pub file: PathBuf,
    /// Print every op in MLIR's generic form.
    #[arg(long)]
    pub generic: bool,
    /// Drop locations (`loc(...)`) from the output.
    #[arg(long)]
    pub strip_locations: bool,
    /// Write here instead of standard output.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// Run `fmt`.
pub fn run(a: FmtArgs) -> Result<()> {
    let (name, text) = crate::cmd_inspect::read_input(&a.file)?;
    let m =
        hlobridge::parse_module_named(&name, &text).map_err(|e| CliError::Parse(e.to_string()))?;
    let out = hlobridge::print_module(
        &m,
        &hlobridge::PrintOptions {
            generic: a.generic,
            debug_info: !a.strip_locations,
        },
    );
    match a.output {
        Some(path) => std::fs::write(&path, out).map_err(|e| CliError::io(path.display(), e)),
        None => crate::stdout::write(&out),
    }
}
