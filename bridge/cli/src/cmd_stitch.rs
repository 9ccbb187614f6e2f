//! `hlobridge stitch PLAN [-o fused.mlir] [--run ...]`: merge the plan's
//! segments into one module, write it, and optionally compile and run it
//! with a receipt (segments, handles, ops per segment, compile and run
//! time, plugin).

use crate::cmd_run::{print_receipt, run_module, RunOpts};
use crate::error::{CliError, Result};
use clap::Args;
use hlobridge::stitch::{stitch, Program};
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `hlobridge stitch`.
#[derive(Args)]
#[command(after_long_help = STITCH_HELP)]
pub struct StitchArgs {
    /// The plan (`.toml` or `.json`); module paths are relative to it.
    pub plan: PathBuf,
    /// Write the fused module here (default: standard output, unless --run).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Keep every segment as a called function instead of inlining it.
    #[arg(long)]
    pub no_inline: bool,
    /// Compile and run the fused module after stitching.
    #[arg(long)]
    pub run: bool,
    /// With --run: how to run it (plugin, devices, inputs, outputs).
    #[command(flatten)]
    pub opts: RunOpts,
}

const STITCH_HELP: &str = "\
Plan format (TOML; JSON with the same keys):
  [[input]]    name, type (e.g. \"tensor<8x16xf32>\"), donate (optional)
  [[segment]]  name, module (path relative to the plan), entry (default \"main\"),
               inputs (handles bound to the entry's parameters),
               outputs (handle names for its results; \"_\" drops one; empty = <segment>.<port>),
               producer (torch/jax/pallas, optional), casts (handles allowed an element-type convert)
  [[output]]   handle, name (optional)
  inline = true|false (default true)

Program inputs of the fused @main are named after the plan's inputs, so --input x=x.npy binds input x.";

/// Run `stitch`.
pub fn run(a: StitchArgs) -> Result<()> {
    let t0 = Instant::now();
    let mut program =
        Program::from_plan_file(&a.plan).map_err(|e| CliError::Parse(e.to_string()))?;
    if a.no_inline {
        program.inline = false;
    }
    let stitched = stitch(&program).map_err(|e| CliError::Stitch(e.to_string()))?;
    let stitch_time = t0.elapsed();
    let text = hlobridge::print_module(
        &stitched.module,
        &hlobridge::PrintOptions {
            generic: a.opts.generic,
            debug_info: true,
        },
    );
    match &a.output {
        Some(path) => std::fs::write(path, &text).map_err(|e| CliError::io(path.display(), e))?,
        None if !a.run => print!("{text}"),
        None => {}
    }
    if !a.run {
        if a.output.is_some() {
            eprint!("{}", stitched.report);
        }
        return Ok(());
    }
    let name = format!("{} (stitched)", a.plan.display());
    let mut receipt = run_module(&name, &stitched.module, stitch_time, &a.opts)?;
    receipt["stitch_ms"] = (stitch_time.as_secs_f64() * 1e3).into();
    receipt["stitch"] =
        serde_json::to_value(&stitched.report).map_err(|e| CliError::Stitch(e.to_string()))?;
    if a.opts.json {
        println!("{receipt}");
    } else {
        print!("{}", stitched.report);
        println!("stitch: {:.2} ms", stitch_time.as_secs_f64() * 1e3);
        print_receipt(&receipt);
    }
    Ok(())
}
