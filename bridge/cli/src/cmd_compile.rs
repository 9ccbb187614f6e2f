//! `hlobridge compile FILE_OR_PLAN --target T`: compile a StableHLO module
//! (or a stitch plan, stitched first) for a TPU (libtpu, deviceless), an
//! NVIDIA GPU (the CUDA PJRT plugin, deviceless) or the CPU (through a CPU
//! client), with a report of memory use against the device's capacity,
//! fusions, custom calls / Pallas kernels and compile time.
//!
//! Targets and the compile itself live in [`pjrt_client::targets`] (shared
//! with `hb.compile_for`); for `cpu` the options and host lowering are the
//! compile service's ([`hlobridge_compile::prepare`]), as for every runtime. A program that does not fit the device's memory
//! (HBM, VMEM, shared memory) is the named `OutOfMemory` error, exit
//! status 2; other errors exit 1.

use crate::error::{CliError, Result};
use clap::Args;
use hlobridge_compile::CompilePolicy;
use pjrt_client::targets::{compile_for_target, oom::human_bytes, Target, TargetKind};
use pjrt_client::CompileOptions;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `hlobridge compile`.
#[derive(Args)]
pub struct CompileArgs {
    /// StableHLO module (text or MLIR bytecode; `-` for stdin), or a stitch
    /// plan (`.toml`/`.json`, see `hlobridge stitch --help`).
    pub file: PathBuf,
    /// tpu:v5e[:2x2], tpu:v6e[:2x2], tpu:v5p[:2x2x1], tpu:v4[:2x2x1],
    /// cuda:h100[:N] (N devices), cpu[:N] (compiled through a CPU client),
    /// or a target from HLOBRIDGE_TARGETS.
    #[arg(long)]
    pub target: String,
    /// Compile for N partitions (SPMD) instead of the module's
    /// mhlo.num_partitions.
    #[arg(long)]
    pub devices: Option<usize>,
    /// Write the serialized executable here.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Print the report (memory vs capacity, fusions, kernels, compile time).
    #[arg(long)]
    pub report: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the optimized program (HLO-like text) here.
    #[arg(long)]
    pub dump_optimized: Option<PathBuf>,
}

/// Runs the subcommand.
pub fn run(a: CompileArgs) -> ExitCode {
    match compile(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// Reads FILE_OR_PLAN: a stitch plan (`.toml`/`.json`) is stitched first.
fn read_program(file: &Path) -> Result<(String, hlobridge::ir::Module)> {
    let is_plan = matches!(
        file.extension().and_then(|e| e.to_str()),
        Some("toml") | Some("json")
    );
    if is_plan {
        let plan = hlobridge::stitch::Program::from_plan_file(file)
            .map_err(|e| CliError::CompileFailed(format!("stitch plan: {e}")))?;
        let stitched = hlobridge::stitch::stitch(&plan)
            .map_err(|e| CliError::CompileFailed(format!("stitching {}: {e}", file.display())))?;
        return Ok((format!("{} (stitched)", file.display()), stitched.module));
    }
    let (name, text) =
        crate::cmd_inspect::read_input(file).map_err(|e| CliError::CompileFailed(e.to_string()))?;
    let m = hlobridge::parse_module_named(&name, &text)
        .map_err(|e| CliError::CompileFailed(format!("parse error: {e}")))?;
    Ok((name, m))
}

fn compile(a: &CompileArgs) -> Result<()> {
    let target = Target::resolve(&a.target, a.devices).map_err(CliError::target)?;
    let (name, m) = read_program(&a.file)?;
    let mut options: CompileOptions = crate::runtime::compile_options(&m);
    if let Some(n) = a.devices.filter(|&n| n > 1) {
        let shardy = options.partitioner == pjrt_client::Partitioner::Shardy;
        options =
            crate::runtime::compile_options_for(n as i64, options.num_replicas as i64, shardy);
    }
    let target = match target.kind {
        // The CPU client gets as many devices as the program needs.
        TargetKind::Cpu { devices } => Target {
            kind: TargetKind::Cpu {
                devices: devices.max(options.num_partitions * options.num_replicas),
            },
            ..target
        },
        _ => target,
    };
    let program_text = hlobridge::print_module(
        &m,
        &hlobridge::PrintOptions {
            generic: false,
            debug_info: true,
        },
    );
    let c = match target.kind {
        // The CPU: a CPU client and the compile service's options and host
        // lowering (with its fallback), so the program compiled is the one
        // every runtime front end runs.
        TargetKind::Cpu { devices } => {
            let client = pjrt_client::Client::discover(
                &pjrt_client::ClientOptions::new().cpu_device_count(devices as i64),
            )
            .map_err(CliError::target)?;
            let prepared =
                hlobridge_compile::prepare(&client, options, &CompilePolicy::uncached())?;
            let (c, host) = prepared
                .compile_with(&program_text, |t| {
                    compile_for_target(&target, t, &prepared.options, Some(&client))
                })
                .map_err(|e| match e {
                    hlobridge_compile::CompileError::Pjrt(e) => CliError::target(e),
                    e => CliError::CompileFailed(e.to_string()),
                })?;
            tracing::info!(kernels = %host.kernels_line(), "hlobridge compile: host lowering");
            c
        }
        // libtpu (and the CUDA plugin) print load-time noise to fd 2;
        // it becomes debug events (see `quiet_stderr`).
        _ => crate::quiet_stderr::capture(|| {
            compile_for_target(&target, &program_text, &options, None)
        })
        .map_err(CliError::target)?,
    };
    if let Some(o) = &a.output {
        std::fs::write(o, &c.serialized)
            .map_err(|e| CliError::CompileFailed(format!("writing {}: {e}", o.display())))?;
        // Confirm what was written (with --json the report carries it).
        if !a.json {
            crate::stdout::write(&format!(
                "wrote {} ({} bytes, {} executable for {})\n",
                o.display(),
                c.serialized.len(),
                c.platform,
                a.target
            ))?;
        }
    }
    if let (Some(p), Some(h)) = (&a.dump_optimized, &c.optimized_text) {
        std::fs::write(p, h)
            .map_err(|e| CliError::CompileFailed(format!("writing {}: {e}", p.display())))?;
    }
    if a.json {
        println!("{}", report_json(a, &name, &c));
    } else if a.report {
        print_report(a, &name, &c);
    }
    Ok(())
}

fn report_json(a: &CompileArgs, name: &str, c: &pjrt_client::TargetCompile) -> serde_json::Value {
    serde_json::json!({
        "target": a.target,
        "platform": c.platform,
        "device_kind": c.device_kind,
        "topology_devices": c.topology_devices,
        "plugin_api": c.plugin_api,
        "program": name,
        "partitions": c.partitions,
        "replicas": c.replicas,
        "compile_seconds": c.compile_time.as_secs_f64(),
        "generated_code_bytes": c.generated_code,
        "serialized_bytes": c.serialized.len(),
        "output": a.output.as_ref().map(|p| p.display().to_string()),
        "memory": c.memory.map(|s| serde_json::json!({
            "arguments": s.arguments, "outputs": s.outputs, "alias": s.alias,
            "temporaries": s.temp, "generated_code": s.generated_code,
            "total": s.device_total(), "peak": s.peak,
        })),
        "device_memory_capacity": c.capacity,
        "vmem_capacity": c.vmem_capacity,
        "fusions": c.fusions,
        "custom_calls": c.custom_calls,
        "kernels": c.kernels().iter()
            .map(|(t, b, n)| serde_json::json!({"target": t, "backend": b, "count": n}))
            .collect::<Vec<_>>(),
    })
}

fn print_report(a: &CompileArgs, name: &str, c: &pjrt_client::TargetCompile) {
    println!(
        "target     {} ({} × {}, PJRT C API {})",
        a.target, c.topology_devices, c.device_kind, c.plugin_api
    );
    println!(
        "program    {name} ({} partition(s), {} replica(s))",
        c.partitions, c.replicas
    );
    println!("compile    {:.3} s", c.compile_time.as_secs_f64());
    if let Some(s) = c.memory {
        let cap = c.capacity.map_or("?".into(), human_bytes);
        let pct = c.capacity.filter(|&x| x > 0).map_or(String::new(), |x| {
            format!(" ({:.2}%)", 100.0 * s.device_total() as f64 / x as f64)
        });
        println!("memory     per device, capacity {cap}");
        println!("  arguments    {}", human_bytes(s.arguments));
        println!("  outputs      {}", human_bytes(s.outputs));
        println!("  aliased      {}", human_bytes(s.alias));
        println!("  temporaries  {}", human_bytes(s.temp));
        println!("  code         {}", human_bytes(s.generated_code));
        println!("  total        {}{pct}", human_bytes(s.device_total()));
        if s.peak > 0 {
            println!("  peak         {}", human_bytes(s.peak));
        }
    } else {
        println!("memory     (the plugin reports no compiled memory stats)");
    }
    println!(
        "executable {} serialized",
        human_bytes(c.serialized.len() as i64)
    );
    let list = |m: &BTreeMap<String, usize>| {
        if m.is_empty() {
            "none".to_string()
        } else {
            m.iter()
                .map(|(k, v)| format!("{k} ×{v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    println!("fusions    {}", list(&c.fusions));
    println!("custom     {}", list(&c.custom_calls));
    for (t, b, n) in c.kernels() {
        println!("kernel     {t} ×{n}: {b}");
    }
}
