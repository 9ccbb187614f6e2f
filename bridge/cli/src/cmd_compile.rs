//! `hlobridge compile FILE --target T`: deviceless compile of a StableHLO
//! module for a TPU (libtpu), an NVIDIA GPU (the CUDA PJRT plugin) or the
//! CPU, with a report of memory use against the device's capacity, fusions,
//! custom calls / Pallas kernels and compile time.
//!
//! Targets are data: `targets/targets.toml` (shipped, embedded) plus an
//! optional user file named by `HLOBRIDGE_TARGETS`. A program that does not
//! fit the device's memory (HBM, VMEM, shared memory) is the named error
//! [`CompileError::OutOfMemory`], exit status 2; other errors exit 1.

use clap::Args;
use pjrt_client::{accel, CompileOptions, OptionValue, Plugin, Program, Topology};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `hlobridge compile`.
#[derive(Args)]
pub struct CompileArgs {
    /// StableHLO module (text or MLIR bytecode; `-` for stdin).
    pub file: PathBuf,
    /// tpu:v5e[:2x2], tpu:v6e[:2x2], tpu:v5p[:2x2x1], tpu:v4[:2x2x1],
    /// cuda:h100[:N] (N devices), a target from HLOBRIDGE_TARGETS, or cpu
    /// (only where the CPU plugin offers topologies; xla-cpu-pjrt 0.0.1 does
    /// not).
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

/// Errors of `hlobridge compile` (the name leads every message).
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The compiled program does not fit the device's memory.
    #[error("OutOfMemory: the program does not fit {space} on {target}: needs {needed}, available {available}. Compiler: {message}")]
    OutOfMemory {
        /// Target string.
        target: String,
        /// hbm, vmem, smem, shared memory, ...
        space: String,
        /// Bytes needed (human readable, as the compiler reported).
        needed: String,
        /// Bytes available.
        available: String,
        /// The compiler's message (or ours, for a post-compile check).
        message: String,
    },
    /// The accelerator compiler is not installed.
    #[error("AcceleratorNotInstalled: {what} not found; searched {searched}. `HLOBRIDGE_ACCEL=1 scripts/setup.sh` installs it into .venv/accel")]
    NotInstalled {
        /// What is missing.
        what: &'static str,
        /// Where it was looked for.
        searched: String,
    },
    /// The target string names no known target.
    #[error("UnknownTarget: {0}")]
    UnknownTarget(String),
    /// The compiler rejected the program for another reason.
    #[error("CompileFailed: {0}")]
    Failed(String),
}

impl CompileError {
    /// Process exit status: 2 for out-of-memory, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            CompileError::OutOfMemory { .. } => 2,
            _ => 1,
        }
    }
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

const SHIPPED_TARGETS: &str = include_str!("../targets/targets.toml");
const SHIPPED_CONFIGS: &[(&str, &str)] =
    &[("h100_sxm.txtpb", include_str!("../targets/h100_sxm.txtpb"))];

/// One resolved target.
#[derive(Debug, Clone)]
enum Target {
    Cpu {
        devices: usize,
    },
    Tpu {
        topology: String,
        hbm: Option<i64>,
        vmem: Option<i64>,
    },
    Cuda {
        devices: usize,
        config: String,
        hbm: Option<i64>,
    },
}

fn int(t: &toml::Table, k: &str) -> Option<i64> {
    t.get(k).and_then(|v| v.as_integer())
}

fn targets_table() -> Result<(toml::Table, Option<PathBuf>), CompileError> {
    let mut all: toml::Table = SHIPPED_TARGETS
        .parse()
        .map_err(|e| CompileError::Failed(format!("shipped targets.toml: {e}")))?;
    let user = std::env::var_os("HLOBRIDGE_TARGETS")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    if let Some(p) = &user {
        let text = std::fs::read_to_string(p).map_err(|e| {
            CompileError::UnknownTarget(format!("HLOBRIDGE_TARGETS={}: {e}", p.display()))
        })?;
        let t: toml::Table = text
            .parse()
            .map_err(|e| CompileError::UnknownTarget(format!("{}: {e}", p.display())))?;
        for (fam, v) in t {
            if let (Some(dst), Some(src)) = (
                all.entry(fam.clone())
                    .or_insert(toml::Value::Table(Default::default()))
                    .as_table_mut(),
                v.as_table(),
            ) {
                for (k, e) in src {
                    dst.insert(k.clone(), e.clone());
                }
            }
        }
    }
    Ok((all, user))
}

fn resolve_target(spec: &str, devices: Option<usize>) -> Result<Target, CompileError> {
    let parts: Vec<&str> = spec.split(':').collect();
    let (all, user) = targets_table()?;
    let known = || {
        let mut v = vec!["cpu".to_string()];
        for (fam, t) in &all {
            if let Some(t) = t.as_table() {
                v.extend(t.keys().map(|k| format!("{fam}:{k}")));
            }
        }
        v.join(", ")
    };
    let entry = |fam: &str, name: &str| -> Result<toml::Table, CompileError> {
        all.get(fam)
            .and_then(|f| f.get(name))
            .and_then(|t| t.as_table())
            .cloned()
            .ok_or_else(|| {
                CompileError::UnknownTarget(format!("{spec:?}; known targets: {}", known()))
            })
    };
    match parts.as_slice() {
        ["cpu"] => Ok(Target::Cpu {
            devices: devices.unwrap_or(1),
        }),
        ["tpu", name] | ["tpu", name, _] => {
            let t = entry("tpu", name)?;
            let shape = match parts.get(2) {
                Some(s) => s.to_string(),
                None => t
                    .get("default_shape")
                    .and_then(|v| v.as_str())
                    .unwrap_or("2x2")
                    .to_string(),
            };
            Ok(Target::Tpu {
                topology: format!("{name}:{shape}"),
                hbm: int(&t, "hbm_bytes"),
                vmem: int(&t, "vmem_bytes"),
            })
        }
        ["cuda", name] | ["cuda", name, _] => {
            let t = entry("cuda", name)?;
            let n = match parts.get(2) {
                Some(s) => s.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                    CompileError::UnknownTarget(format!(
                        "{spec:?}: device count {s:?} is not a positive integer"
                    ))
                })?,
                None => 1,
            };
            let file = t
                .get("target_config")
                .and_then(|v| v.as_str())
                .ok_or_else(|| {
                    CompileError::UnknownTarget(format!("cuda.{name} has no target_config"))
                })?;
            let config = match SHIPPED_CONFIGS.iter().find(|(f, _)| *f == file) {
                Some((_, text)) if user.is_none() || !user_defines(&user, name) => text.to_string(),
                _ => {
                    let base = user
                        .as_deref()
                        .and_then(Path::parent)
                        .unwrap_or(Path::new("."));
                    std::fs::read_to_string(base.join(file)).map_err(|e| {
                        CompileError::UnknownTarget(format!(
                            "cuda.{name} target_config {file}: {e}"
                        ))
                    })?
                }
            };
            Ok(Target::Cuda {
                devices: n.max(devices.unwrap_or(1)),
                config,
                hbm: int(&t, "hbm_bytes"),
            })
        }
        _ => Err(CompileError::UnknownTarget(format!(
            "{spec:?}; known targets: {}",
            known()
        ))),
    }
}

fn user_defines(user: &Option<PathBuf>, name: &str) -> bool {
    user.as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|t| t.parse::<toml::Table>().ok())
        .is_some_and(|t| t.get("cuda").and_then(|c| c.get(name)).is_some())
}

fn load_target_plugin(target: &Target) -> Result<Plugin, CompileError> {
    let load = |p: PathBuf| Plugin::load(&p).map_err(|e| CompileError::Failed(e.to_string()));
    match target {
        Target::Cpu { .. } => crate::runtime::load_plugin(None)
            .map(|(p, _)| p)
            .map_err(CompileError::Failed),
        Target::Tpu { .. } => {
            let path = accel::find_libtpu().ok_or_else(|| CompileError::NotInstalled {
                what: "libtpu",
                searched: accel::searched("TPU_LIBRARY_PATH", accel::LIBTPU_REL),
            })?;
            accel::skip_tpu_metadata_query();
            load(path)
        }
        Target::Cuda { .. } => {
            let path = accel::find_cuda_plugin().ok_or_else(|| CompileError::NotInstalled {
                what: "the CUDA PJRT plugin (jax-cuda12-pjrt)",
                searched: accel::searched("HLOBRIDGE_CUDA_PLUGIN", accel::CUDA_PLUGIN_REL),
            })?;
            let data = accel::find_cuda_data_dir().ok_or_else(|| CompileError::NotInstalled {
                what: "ptxas and libdevice (nvidia-cuda-nvcc-cu12)",
                searched: accel::searched("HLOBRIDGE_CUDA_DATA_DIR", accel::CUDA_DATA_REL),
            })?;
            accel::set_cuda_data_dir_flag(&data);
            load(path)
        }
    }
}

fn make_topology(plugin: &Plugin, target: &Target) -> Result<Topology, CompileError> {
    let r = match target {
        Target::Cpu { devices } => Topology::new(
            plugin,
            "",
            &[(
                "cpu_device_count".into(),
                OptionValue::Int64(*devices as i64),
            )],
        ),
        Target::Tpu { topology, .. } => Topology::new(plugin, topology, &[]),
        Target::Cuda {
            devices, config, ..
        } => Topology::new(
            plugin,
            "",
            &[
                (
                    "topology".into(),
                    OptionValue::String(format!("1x1x{devices}")),
                ),
                ("target_config".into(), OptionValue::String(config.clone())),
            ],
        ),
    };
    r.map_err(|e| CompileError::Failed(format!("creating the topology: {e}")))
}

/// Classifies a compiler error: memory-capacity failures become
/// [`CompileError::OutOfMemory`] with the compiler's numbers.
fn classify(target: &str, message: String) -> CompileError {
    match crate::compile_oom::parse(&message) {
        Some(o) => CompileError::OutOfMemory {
            target: target.to_string(),
            space: o.space,
            needed: o.needed,
            available: o.available,
            message,
        },
        None => CompileError::Failed(message),
    }
}

fn human(b: i64) -> String {
    crate::compile_oom::human_bytes(b)
}

fn compile(a: &CompileArgs) -> Result<(), CompileError> {
    let target = resolve_target(&a.target, a.devices)?;
    let (name, text) = crate::cmd_inspect::read_input(&a.file).map_err(CompileError::Failed)?;
    let m = hlobridge::parse_module_named(&name, &text)
        .map_err(|e| CompileError::Failed(format!("parse error: {e}")))?;
    let mut options: CompileOptions = crate::runtime::compile_options(&m);
    if let Some(n) = a.devices.filter(|&n| n > 1) {
        let shardy = options.partitioner == pjrt_client::Partitioner::Shardy;
        options =
            crate::runtime::compile_options_for(n as i64, options.num_replicas as i64, shardy);
    }
    let program_text = hlobridge::print_module(
        &m,
        &hlobridge::PrintOptions {
            generic: false,
            debug_info: true,
        },
    );
    let plugin = load_target_plugin(&target)?;
    let topo = make_topology(&plugin, &target)?;
    let devices = topo
        .devices()
        .map_err(|e| CompileError::Failed(format!("reading the topology's devices: {e}")))?;
    let needed_devices = options.num_partitions * options.num_replicas;
    if needed_devices > devices.len().max(1) {
        return Err(CompileError::Failed(format!(
            "the program needs {needed_devices} devices but {} has {}",
            a.target,
            devices.len()
        )));
    }
    let exe = topo
        .compile(&Program::mlir_text(&program_text), &options)
        .map_err(|e| classify(&a.target, e.to_string()))?;
    let stats = exe.memory_stats().ok();
    let capacity = devices
        .first()
        .and_then(|d| {
            d.attributes
                .iter()
                .find_map(|(k, v)| match (k.as_str(), v) {
                    ("device_memory_bytes_limit", OptionValue::Int64(b)) => Some(*b),
                    _ => None,
                })
        })
        .or(match &target {
            Target::Tpu { hbm, .. } | Target::Cuda { hbm, .. } => *hbm,
            Target::Cpu { .. } => None,
        });
    if let (Some(s), Some(cap)) = (stats, capacity) {
        if s.device_total() > cap {
            return Err(CompileError::OutOfMemory {
                target: a.target.clone(),
                space: "device memory".into(),
                needed: human(s.device_total()),
                available: human(cap),
                message: format!(
                    "compiled memory stats: arguments {} + outputs {} - alias {} + temporaries {} + code {} bytes > {cap} bytes",
                    s.arguments, s.outputs, s.alias, s.temp, s.generated_code
                ),
            });
        }
    }
    let serialized = exe
        .serialize()
        .map_err(|e| CompileError::Failed(format!("serializing: {e}")))?;
    if let Some(o) = &a.output {
        std::fs::write(o, &serialized)
            .map_err(|e| CompileError::Failed(format!("writing {}: {e}", o.display())))?;
    }
    let hlo = exe.optimized_hlo().ok();
    if let (Some(p), Some(h)) = (&a.dump_optimized, &hlo) {
        std::fs::write(p, h.to_text())
            .map_err(|e| CompileError::Failed(format!("writing {}: {e}", p.display())))?;
    }
    if !(a.report || a.json) {
        return Ok(());
    }
    let mut fusions: BTreeMap<String, usize> = BTreeMap::new();
    let mut calls: BTreeMap<String, usize> = BTreeMap::new();
    if let Some(h) = &hlo {
        for f in h.fusions() {
            *fusions
                .entry(if f.kind.is_empty() {
                    "?".into()
                } else {
                    f.kind
                })
                .or_default() += 1;
        }
        for c in &h.module.computations {
            for i in c.instructions.iter().filter(|i| i.opcode == "custom-call") {
                *calls.entry(i.custom_call_target.clone()).or_default() += 1;
            }
        }
    }
    let (platform, kind) = (
        topo.platform_name().unwrap_or_default(),
        devices.first().map(|d| d.kind.clone()).unwrap_or_default(),
    );
    let report = serde_json::json!({
        "target": a.target,
        "platform": platform,
        "device_kind": kind,
        "topology_devices": devices.len(),
        "plugin_api": format!("{}.{}", plugin.api().version().0, plugin.api().version().1),
        "program": name,
        "partitions": options.num_partitions,
        "replicas": options.num_replicas,
        "compile_seconds": exe.compile_time().as_secs_f64(),
        "generated_code_bytes": exe.generated_code_size().ok(),
        "serialized_bytes": serialized.len(),
        "memory": stats.map(|s| serde_json::json!({
            "arguments": s.arguments, "outputs": s.outputs, "alias": s.alias,
            "temporaries": s.temp, "generated_code": s.generated_code,
            "total": s.device_total(), "peak": s.peak,
        })),
        "device_memory_capacity": capacity,
        "vmem_capacity": match &target { Target::Tpu { vmem, .. } => *vmem, _ => None },
        "fusions": fusions,
        "custom_calls": calls,
        "kernels": calls.iter().filter_map(|(t, n)| kernel_backend(t).map(|b| serde_json::json!({"target": t, "backend": b, "count": n}))).collect::<Vec<_>>(),
    });
    if a.json {
        println!("{report}");
        return Ok(());
    }
    println!(
        "target     {} ({} × {}, PJRT C API {})",
        a.target,
        devices.len(),
        kind,
        report["plugin_api"].as_str().unwrap_or("")
    );
    println!(
        "program    {name} ({} partition(s), {} replica(s))",
        options.num_partitions, options.num_replicas
    );
    println!("compile    {:.3} s", exe.compile_time().as_secs_f64());
    if let Some(s) = stats {
        let cap = capacity.map_or("?".into(), human);
        let pct = capacity.filter(|&c| c > 0).map_or(String::new(), |c| {
            format!(" ({:.2}%)", 100.0 * s.device_total() as f64 / c as f64)
        });
        println!("memory     per device, capacity {cap}");
        println!("  arguments    {}", human(s.arguments));
        println!("  outputs      {}", human(s.outputs));
        println!("  aliased      {}", human(s.alias));
        println!("  temporaries  {}", human(s.temp));
        println!("  code         {}", human(s.generated_code));
        println!("  total        {}{pct}", human(s.device_total()));
        if s.peak > 0 {
            println!("  peak         {}", human(s.peak));
        }
    } else {
        println!("memory     (the plugin reports no compiled memory stats)");
    }
    println!("executable {} serialized", human(serialized.len() as i64));
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
    println!("fusions    {}", list(&fusions));
    println!("custom     {}", list(&calls));
    for (t, n) in &calls {
        if let Some(b) = kernel_backend(t) {
            println!("kernel     {t} ×{n}: {b}");
        }
    }
    Ok(())
}

/// The Pallas/kernel backend a custom-call target belongs to.
fn kernel_backend(target: &str) -> Option<&'static str> {
    match target {
        "tpu_custom_call" => Some("Pallas TPU (Mosaic)"),
        "__gpu$xla.gpu.triton" => Some("Pallas Triton"),
        t if t.starts_with("mosaic_gpu") => Some("Pallas Mosaic GPU"),
        _ => None,
    }
}
