//! `hlobridge run FILE [--plugin P] [--devices N] [--input KEY=FILE.npy]...
//! [--xla-option NAME=VALUE]... [--out DIR]`: parse a module, print it,
//! lower it for the host and compile it, bind `.npy` inputs to
//! the entry parameters ([`crate::bind`]), run it ([`crate::runtime`]) and
//! write the outputs ([`crate::npy`]); prints a receipt. Compiling is the
//! compile service's ([`hlobridge_compile`]).

use crate::bind::bind_inputs;
use crate::error::{CliError, Result};
use crate::npy::write_npy;
use crate::runtime::{
    compile_options, execute, load_plugin, parse_xla_option, tensor_info, type_string,
    xla_option_string,
};
use clap::Args;
use hlobridge::ir::Module;
use hlobridge_compile::CompilePolicy;
use pjrt_client::{Client, ClientOptions};
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `hlobridge run`.
#[derive(Args)]
#[command(after_long_help = RUN_HELP)]
pub struct RunArgs {
    /// The module to run (text form; `-` for standard input).
    pub file: PathBuf,
    /// How to run it.
    #[command(flatten)]
    pub opts: RunOpts,
}

/// Plugin, devices, input bindings and outputs: shared by `run` and
/// `stitch --run`.
#[derive(Args, Clone)]
pub struct RunOpts {
    /// PJRT plugin shared library (default: discovery: HLOBRIDGE_PLUGIN,
    /// PJRT_NAMES_AND_LIBRARY_PATHS, plugin wheels in ./.venv or python3).
    #[arg(long, value_name = "P")]
    pub plugin: Option<PathBuf>,
    /// Number of devices the client creates (CPU plugin); modules with
    /// `mhlo.num_partitions`/`mhlo.num_replicas` > 1 need that many.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub devices: usize,
    /// Bind an entry parameter: `INDEX=FILE.npy` (0-based) or `NAME=FILE.npy`
    /// (`argN`, the SSA name, or a `jax.arg_info` / `mhlo.name` attribute).
    #[arg(long = "input", short = 'i', value_name = "NAME_OR_INDEX=FILE")]
    pub inputs: Vec<String>,
    /// Write output `i` to `DIR/i.npy` (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Override an XLA compiler option on top of the plugin's defaults
    /// (repeatable; `true`/`false`, numbers, else a string; see
    /// docs/conformance.md), e.g.
    /// `xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_REDUCE`.
    #[arg(long = "xla-option", value_name = "NAME=VALUE")]
    pub xla_options: Vec<String>,
    /// Hand the module to the compiler in MLIR's generic op form.
    #[arg(long)]
    pub generic: bool,
    /// Print the receipt as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

const RUN_HELP: &str = "\
.npy files: format versions 1-3; dtypes |b1 (i1), i1/i2/i4/i8 (i8..i64), u1..u8 (ui8..ui64), \
f2/f4/f8 (f16/f32/f64), c8/c16 (complex<f32>/complex<f64>); little- or big-endian; C or Fortran order.
Types numpy lacks (bf16, f8E*, f4E2M1FN, i4/ui4/i2/ui2) travel as raw bits in a void dtype of the \
element's host size, exactly what np.save writes for ml_dtypes arrays: bf16 is '<V2', the others \
'|V1' (sub-byte integers: one element per byte). Read them back with \
np.load(p).view(ml_dtypes.bfloat16); as inputs, raw unsigned ints of the same size ('<u2', '|u1') \
are accepted too.

Outputs: with --out DIR, output i goes to DIR/i.npy; when a multi-device program returns a \
sharded output, each device's shard goes to DIR/i.dD.npy instead. Multi-device programs (mhlo.num_partitions / mhlo.num_replicas > 1; pass --devices N) get every input whole on every device; parameters the program shards are rejected. Errors exit with status 1.

Compile options: hlobridge sends no DebugOptions, so the plugin compiles with its own defaults; \
--xla-option NAME=VALUE overrides one option on top of them. jax/jaxlib instead send jaxlib's full \
DebugOptions, whose defaults can differ from the plugin's (docs/conformance.md: with jax 0.10.2 and \
xla-cpu-pjrt 0.0.1, --xla-option \
xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_REDUCE,LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT \
reproduces what jaxlib's options compute). Products eligible for the host GEMM kernels are \
rewritten first on the CPU plugin (HLOBRIDGE_HOST_GEMM=off / HLOBRIDGE_HOST_CONV=off keep them with XLA); compiling goes through the same compile service as the Python runtime and `hlobridge serve`.

Receipt (stdout; --json for one JSON object): plugin, platform, devices, compile options, host \
GEMM and convolution calls, the host kernels by name (`name=count`, the same list the Python runtime and `hlobridge serve` log), parse/compile/run times, and one line per output: `output I: tensor<...> [-> PATH]`.";

/// Run `run`.
pub fn run(a: RunArgs) -> Result<()> {
    let (name, text) = crate::cmd_inspect::read_input(&a.file)?;
    let t0 = Instant::now();
    let m = hlobridge::parse_module_named(&name, &text)
        .map_err(|e| CliError::Parse(format!("parse error: {e}")))?;
    let parse_time = t0.elapsed();
    let receipt = run_module(&name, &m, parse_time, &a.opts)?;
    if a.opts.json {
        println!("{receipt}");
    } else {
        print_receipt(&receipt);
    }
    Ok(())
}

/// Bind `a`'s inputs to `m`'s entry, compile (through the compile service,
/// [`hlobridge_compile`]: the same options, host lowering and fallback as
/// the Python runtime and `hlobridge serve`; no caches), run, write
/// outputs; returns the receipt (shared by `run` and `stitch --run`).
pub(crate) fn run_module(
    name: &str,
    m: &Module,
    parse_time: std::time::Duration,
    a: &RunOpts,
) -> Result<serde_json::Value> {
    // Bind inputs before touching the plugin, so binding errors are cheap.
    let xla_options = a
        .xla_options
        .iter()
        .map(|s| parse_xla_option(s))
        .collect::<Result<Vec<_>>>()?;
    let inputs = bind_inputs(m, &a.inputs)?;

    let program = hlobridge::print_module(
        m,
        &hlobridge::PrintOptions {
            generic: a.generic,
            debug_info: true,
        },
    );
    let (plugin, plugin_path) = load_plugin(a.plugin.as_deref())?;
    hlobridge_compile::snapshot_environment();
    let client = Client::new(
        &plugin,
        &ClientOptions::new().cpu_device_count(a.devices.max(1) as i64),
    )
    .map_err(|e| CliError::Plugin(format!("creating PJRT client: {e}")))?;
    let policy = CompilePolicy::uncached().with_xla_overrides(xla_options);
    let options = hlobridge_compile::prepare(&client, compile_options(m), &policy)?.options;
    let t1 = Instant::now();
    let fetched = hlobridge_compile::compile(&client, &program, compile_options(m), &policy)?;
    let compile_time = t1.elapsed();
    let compiled = &fetched.compiled;
    let exe = &compiled.exe;
    let host = &compiled.host;
    tracing::info!(kernels = %host.kernels_line(), "hlobridge run: compiled");

    let t2 = Instant::now();
    let global: Option<Vec<Vec<i64>>> = hlobridge::conform::entry_results(m).ok().map(|ts| {
        ts.iter()
            .map(|&t| tensor_info(m, t).map(|(_, d)| d).unwrap_or_default())
            .collect()
    });
    let outputs = execute(&client, exe, &inputs, global.as_deref())?;
    let run_time = t2.elapsed();

    let mut receipt = serde_json::json!({
        "file": name,
        "plugin": plugin_path.display().to_string(),
        "platform": client.platform_name(),
        "platform_version": client.platform_version(),
        "devices": client.addressable_devices().iter().map(|d| d.to_string_lossy()).collect::<Vec<_>>(),
        "parse_ms": ms(parse_time),
        "compile_ms": ms(compile_time),
        "host_gemm_calls": host.gemm_rewritten,
        "host_conv_calls": host.conv_rewritten,
        "host_kernels": host.kernels,
        "host_lowering_fell_back": host.fell_back,
        "fingerprint": compiled.fingerprint,
        "xla_options": options.xla_options.iter().map(|(k, v)| xla_option_string(k, v)).collect::<Vec<_>>(),
        "run_ms": ms(run_time),
    });
    let mut outs = Vec::new();
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).map_err(|e| CliError::io(dir.display(), e))?;
    }
    for (i, shards) in outputs.iter().enumerate() {
        let mut files = Vec::new();
        for (d, (dtype, dims, bytes)) in shards.iter().enumerate() {
            if let Some(dir) = &a.out {
                let p = if shards.len() == 1 {
                    dir.join(format!("{i}.npy"))
                } else {
                    dir.join(format!("{i}.d{d}.npy"))
                };
                write_npy(&p, *dtype, dims, bytes)?;
                files.push(p.display().to_string());
            }
        }
        let (dtype, dims, _) = &shards[0];
        outs.push(serde_json::json!({
            "index": i,
            "type": type_string(*dtype, dims),
            "shards": shards.len(),
            "files": files,
        }));
    }
    receipt["outputs"] = serde_json::Value::Array(outs);
    Ok(receipt)
}

/// Print a run receipt as text.
pub(crate) fn print_receipt(r: &serde_json::Value) {
    let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
    println!("file: {}", s("file"));
    println!("plugin: {}", s("plugin"));
    println!("platform: {} {}", s("platform"), s("platform_version"));
    let devices: Vec<&str> = r["devices"]
        .as_array()
        .map(|v| v.iter().filter_map(|d| d.as_str()).collect())
        .unwrap_or_default();
    println!("devices: {} ({})", devices.len(), devices.join(", "));
    let overrides: Vec<&str> = r["xla_options"]
        .as_array()
        .map(|v| v.iter().filter_map(|o| o.as_str()).collect())
        .unwrap_or_default();
    if overrides.is_empty() {
        println!("compile options: plugin defaults");
    } else {
        println!(
            "compile options: plugin defaults + {}",
            overrides.join(", ")
        );
    }
    println!("host GEMM calls: {}", r["host_gemm_calls"]);
    println!("host conv calls: {}", r["host_conv_calls"]);
    let kernels: Vec<String> = r["host_kernels"]
        .as_object()
        .map(|o| o.iter().map(|(k, n)| format!("{k}={n}")).collect())
        .unwrap_or_default();
    println!(
        "host kernels: {}",
        if kernels.is_empty() {
            "-".to_string()
        } else {
            kernels.join(",")
        }
    );
    for k in ["parse", "compile", "run"] {
        println!(
            "{k}: {:.3} ms",
            r[format!("{k}_ms")].as_f64().unwrap_or(0.0)
        );
    }
    for o in r["outputs"].as_array().into_iter().flatten() {
        let files: Vec<&str> = o["files"]
            .as_array()
            .map(|v| v.iter().filter_map(|f| f.as_str()).collect())
            .unwrap_or_default();
        let shards = o["shards"].as_u64().unwrap_or(1);
        let mut line = format!(
            "output {}: {}",
            o["index"],
            o["type"].as_str().unwrap_or_default()
        );
        if shards > 1 {
            line.push_str(&format!(" (per device, {shards} shards)"));
        }
        if !files.is_empty() {
            line.push_str(&format!(" -> {}", files.join(", ")));
        }
        println!("{line}");
    }
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
