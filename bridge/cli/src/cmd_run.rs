//! `hlobridge run FILE [--plugin P] [--devices N] [--input KEY=FILE.npy]...
//! [--out DIR]`: parse a module, print it, compile it through PJRT, bind
//! `.npy` inputs to the entry parameters, run it and write the outputs.
//!
//! Also home of what `run` and `conform` share: plugin loading, the mapping
//! from IR tensor types to PJRT element types, and a small `.npy`
//! reader/writer (format versions 1–3, little- and big-endian numeric
//! dtypes, bool, complex, C and Fortran order).

use clap::Args;
use hlobridge::ir::{Attribute, Module, Type, TypeId, DYNAMIC};
use pjrt_client::{
    Buffer, Client, ClientOptions, CompileOptions, ElementType, ExecuteOptions, LoadedExecutable,
    Partitioner, Plugin, Program,
};
use std::path::{Path, PathBuf};
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

Receipt (stdout; --json for one JSON object): plugin, platform, devices, parse/compile/run \
times, and one line per output: `output I: tensor<...> [-> PATH]`.";

/// Run `run`.
pub fn run(a: RunArgs) -> Result<(), String> {
    let (name, text) = crate::cmd_inspect::read_input(&a.file)?;
    let t0 = Instant::now();
    let m = hlobridge::parse_module_named(&name, &text).map_err(|e| format!("parse error: {e}"))?;
    let parse_time = t0.elapsed();
    let receipt = run_module(&name, &m, parse_time, &a.opts)?;
    if a.opts.json {
        println!("{receipt}");
    } else {
        print_receipt(&receipt);
    }
    Ok(())
}

/// Bind `a`'s inputs to `m`'s entry, compile, run, write outputs; returns
/// the receipt (shared by `run` and `stitch --run`).
pub(crate) fn run_module(
    name: &str,
    m: &Module,
    parse_time: std::time::Duration,
    a: &RunOpts,
) -> Result<serde_json::Value, String> {
    // Bind inputs before touching the plugin, so binding errors are cheap.
    let params = hlobridge::conform::entry_params(m).map_err(|e| e.to_string())?;
    let mut bound: Vec<Option<(PathBuf, Npy)>> = (0..params.len()).map(|_| None).collect();
    for spec in &a.inputs {
        let (key, path) = spec
            .split_once('=')
            .ok_or_else(|| format!("--input {spec:?}: expected NAME_OR_INDEX=FILE.npy"))?;
        let idx = resolve_param(&params, key)?;
        if bound[idx].is_some() {
            return Err(format!("--input {key}: parameter {idx} is bound twice"));
        }
        let (ty, dims) = tensor_info(m, params[idx].0)
            .map_err(|e| format!("parameter {idx} ({}): {e}", params[idx].1[0]))?;
        let npy = read_npy(Path::new(path), Some(ty))
            .map_err(|e| format!("--input {key}: {path}: {e}"))?;
        check_shape(&dims, &npy.shape).map_err(|e| {
            format!(
                "--input {key}: {path}: shape {:?} does not match parameter {idx} ({}: {}): {e}",
                npy.shape,
                params[idx].1[0],
                hlobridge::print::type_to_string(m, params[idx].0)
            )
        })?;
        bound[idx] = Some((PathBuf::from(path), npy));
    }
    if let Some(i) = bound.iter().position(|b| b.is_none()) {
        return Err(format!(
            "missing input for parameter {i} ({}: {}); pass --input {i}=FILE.npy or --input {}=FILE.npy",
            params[i].1.join(" / "),
            hlobridge::print::type_to_string(m, params[i].0),
            params[i].1[0],
        ));
    }
    let inputs: Vec<Npy> = bound.into_iter().flatten().map(|(_, n)| n).collect();

    let mut program = hlobridge::print_module(
        m,
        &hlobridge::PrintOptions {
            generic: a.generic,
            debug_info: true,
        },
    );
    let (plugin, plugin_path) = load_plugin(a.plugin.as_deref())?;
    let client = Client::new(
        &plugin,
        &ClientOptions::new().cpu_device_count(a.devices.max(1) as i64),
    )
    .map_err(|e| format!("creating PJRT client: {e}"))?;
    let mut host_gemm = 0;
    if client.host_kernels().gemm {
        if let Some((lowered, report)) = hlobridge::lower::lower_text_for_host(
            &program,
            &hlobridge::lower::HostLowering::from_env(),
        ) {
            host_gemm = report.rewritten;
            program = lowered;
        }
    }
    let options = compile_options(m);
    let need = options.num_partitions * options.num_replicas;
    if need > client.device_count() {
        return Err(format!(
            "the module needs {need} devices (mhlo.num_partitions = {}, mhlo.num_replicas = {}) but the client has {}; pass --devices {need}",
            options.num_partitions,
            options.num_replicas,
            client.device_count()
        ));
    }
    let t1 = Instant::now();
    let exe = client
        .compile(&Program::mlir_text(&program), &options)
        .map_err(|e| format!("compile error: {e}"))?;
    let compile_time = t1.elapsed();

    let t2 = Instant::now();
    let global: Option<Vec<Vec<i64>>> = hlobridge::conform::entry_results(m).ok().map(|ts| {
        ts.iter()
            .map(|&t| tensor_info(m, t).map(|(_, d)| d).unwrap_or_default())
            .collect()
    });
    let outputs = execute(&client, &exe, &inputs, global.as_deref())?;
    let run_time = t2.elapsed();

    let mut receipt = serde_json::json!({
        "file": name,
        "plugin": plugin_path.display().to_string(),
        "platform": client.platform_name(),
        "platform_version": client.platform_version(),
        "devices": client.addressable_devices().iter().map(|d| d.to_string_lossy()).collect::<Vec<_>>(),
        "parse_ms": ms(parse_time),
        "compile_ms": ms(compile_time),
        "host_gemm_calls": host_gemm,
        "run_ms": ms(run_time),
    });
    let mut outs = Vec::new();
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
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
                write_npy(&p, *dtype, dims, bytes).map_err(|e| format!("{}: {e}", p.display()))?;
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

/// `tensor<2x3xf32>` for an element type and dims.
pub(crate) fn type_string(dtype: ElementType, dims: &[i64]) -> String {
    let mut s = String::from("tensor<");
    for d in dims {
        s.push_str(&format!("{d}x"));
    }
    s.push_str(dtype.mlir_name());
    s.push('>');
    s
}

fn resolve_param(params: &[(TypeId, Vec<String>)], key: &str) -> Result<usize, String> {
    if let Ok(i) = key.parse::<usize>() {
        return if i < params.len() {
            Ok(i)
        } else {
            Err(format!(
                "--input {key}: parameter index out of range (the entry function takes {} parameter(s))",
                params.len()
            ))
        };
    }
    let hits: Vec<usize> = (0..params.len())
        .filter(|&i| params[i].1.iter().any(|n| n == key))
        .collect();
    match hits.as_slice() {
        [i] => Ok(*i),
        [] => {
            let known: Vec<String> = params.iter().map(|p| p.1.join("/")).collect();
            Err(format!(
                "--input {key}: unknown input name; parameters are: {}",
                if known.is_empty() {
                    "(none)".to_string()
                } else {
                    known.join(", ")
                }
            ))
        }
        many => Err(format!(
            "--input {key}: ambiguous name (parameters {many:?}); bind by index"
        )),
    }
}

fn check_shape(want: &[i64], got: &[i64]) -> Result<(), String> {
    if want.len() != got.len() {
        return Err(format!("rank {} vs {}", got.len(), want.len()));
    }
    for (i, (&w, &g)) in want.iter().zip(got).enumerate() {
        if w != DYNAMIC && w != g {
            return Err(format!("dimension {i} is {g}, expected {w}"));
        }
    }
    Ok(())
}

/// Loads the plugin at `explicit`, or the one discovery finds; returns it
/// with its path.
pub(crate) fn load_plugin(explicit: Option<&Path>) -> Result<(Plugin, PathBuf), String> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => {
            pjrt_client::find_plugin(&pjrt_client::DiscoveryOptions::default())
                .map_err(|e| e.to_string())?
                .path
        }
    };
    let plugin = Plugin::load(&path).map_err(|e| e.to_string())?;
    Ok((plugin, path))
}

/// Element type and dims of a tensor type (rejects non-tensors and element
/// types PJRT has no buffer type for, such as `!quant.uniform`).
pub(crate) fn tensor_info(m: &Module, t: TypeId) -> Result<(ElementType, Vec<i64>), String> {
    match m.ty(t) {
        Type::Tensor { dims, elem, .. } => Ok((element_type(m, *elem)?, dims.to_vec())),
        _ => Err(format!(
            "{} is not a ranked tensor",
            hlobridge::print::type_to_string(m, t)
        )),
    }
}

fn element_type(m: &Module, elem: TypeId) -> Result<ElementType, String> {
    let s = hlobridge::print::type_to_string(m, elem);
    let norm = match m.ty(elem) {
        Type::Integer { width: 1, .. } => "i1".to_string(),
        _ => s.strip_prefix("si").map_or(s.clone(), |w| format!("i{w}")),
    };
    ElementType::from_mlir_name(&norm)
        .ok_or_else(|| format!("element type {s} has no PJRT buffer type"))
}

fn module_int_attr(m: &Module, name: &str) -> Option<i64> {
    let top = m.top_ops().find(|&o| m.op_name(o) == "builtin.module")?;
    match m.attr(m.op_attr(top, name)?) {
        Attribute::Integer { text, .. } => hlobridge::parse::parse_int_text(text),
        _ => None,
    }
}

/// Compile options from the module's `mhlo.num_partitions` /
/// `mhlo.num_replicas` (Shardy when the module declares an `sdy.mesh`).
pub(crate) fn compile_options(m: &Module) -> CompileOptions {
    let partitions = module_int_attr(m, "mhlo.num_partitions")
        .unwrap_or(1)
        .max(1) as usize;
    let replicas = module_int_attr(m, "mhlo.num_replicas").unwrap_or(1).max(1) as usize;
    let mut o = if partitions > 1 {
        let shardy = m.ops.iter().any(|o| m.str(o.name) == "sdy.mesh");
        CompileOptions::spmd(
            partitions,
            if shardy {
                Partitioner::Shardy
            } else {
                Partitioner::Gspmd
            },
        )
    } else {
        CompileOptions::default()
    };
    o.num_replicas = replicas;
    o
}

/// One output of one device: element type, dims, dense host bytes.
pub(crate) type HostArray = (ElementType, Vec<i64>, Vec<u8>);

/// Runs `exe` with `inputs` (fed whole to every device) and copies every
/// output to the host: `result[output][device]`. An output that every
/// device returned identically, with the whole shape (`global`, the entry's
/// result dims, when known), is kept once.
pub(crate) fn execute(
    client: &Client,
    exe: &LoadedExecutable,
    inputs: &[Npy],
    global: Option<&[Vec<i64>]>,
) -> Result<Vec<Vec<HostArray>>, String> {
    let devices = exe.devices();
    if let Some(params) = exe.parameter_info() {
        for (i, (p, x)) in params.iter().zip(inputs).enumerate() {
            if p.dims[..] != x.shape[..] {
                return Err(format!(
                    "parameter {i} is sharded across devices (per-device {p}, input {}); `run` feeds whole arrays only",
                    type_string(x.dtype, &x.shape)
                ));
            }
        }
    }
    let mut per_device: Vec<Vec<Buffer>> = Vec::with_capacity(devices.len());
    for d in &devices {
        let mut bufs = Vec::with_capacity(inputs.len());
        for (i, x) in inputs.iter().enumerate() {
            bufs.push(
                client
                    .buffer_from_host_bytes(&x.data, x.dtype, &x.shape, Some(d))
                    .map_err(|e| format!("input {i}: {e}"))?,
            );
        }
        per_device.push(bufs);
    }
    let refs: Vec<Vec<&Buffer>> = per_device.iter().map(|v| v.iter().collect()).collect();
    let outs = exe
        .execute_sharded(&refs, &ExecuteOptions::default())
        .map_err(|e| format!("run error: {e}"))?;
    let n = outs.first().map_or(0, |o| o.len());
    let mut result = Vec::with_capacity(n);
    for i in 0..n {
        let mut shards = Vec::new();
        for dev in &outs {
            let b = &dev[i];
            let dtype = b.element_type().map_err(|e| format!("output {i}: {e}"))?;
            let dims = b.dims().map_err(|e| format!("output {i}: {e}"))?.to_vec();
            let bytes = b.to_host_bytes().map_err(|e| format!("output {i}: {e}"))?;
            shards.push((dtype, dims, bytes));
        }
        // Replicated outputs: keep one copy.
        let whole = global
            .and_then(|g| g.get(i))
            .is_none_or(|g| g[..] == shards[0].1[..]);
        if whole && shards.iter().all(|s| s == &shards[0]) {
            shards.truncate(1);
        }
        result.push(shards);
    }
    Ok(result)
}

// ----- .npy -----

/// A dense array read from a `.npy` file, in C order and native (little)
/// endianness.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Npy {
    /// Element type.
    pub dtype: ElementType,
    /// Shape.
    pub shape: Vec<i64>,
    /// Dense bytes, C order, little-endian.
    pub data: Vec<u8>,
}

/// The numpy `descr` this tool writes for an element type.
pub(crate) fn npy_descr(t: ElementType) -> String {
    use ElementType::*;
    match t {
        Pred => "|b1".into(),
        S8 => "|i1".into(),
        S16 => "<i2".into(),
        S32 => "<i4".into(),
        S64 => "<i8".into(),
        U8 => "|u1".into(),
        U16 => "<u2".into(),
        U32 => "<u4".into(),
        U64 => "<u8".into(),
        F16 => "<f2".into(),
        F32 => "<f4".into(),
        F64 => "<f8".into(),
        C64 => "<c8".into(),
        C128 => "<c16".into(),
        other => format!("<V{}", other.host_byte_size()),
    }
}

/// Reads a `.npy` file. With `want`, the file's dtype must match it (raw
/// `V`/`u` dtypes of the right size are accepted for types numpy lacks).
pub(crate) fn read_npy(path: &Path, want: Option<ElementType>) -> Result<Npy, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    parse_npy(&bytes, want)
}

fn parse_npy(bytes: &[u8], want: Option<ElementType>) -> Result<Npy, String> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err("not a .npy file (bad magic)".into());
    }
    let (hlen, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("unsupported .npy format version {v}")),
    };
    let header = bytes
        .get(start..start + hlen)
        .ok_or("truncated .npy header")?;
    let header = std::str::from_utf8(header).map_err(|_| "header is not text")?;
    let descr = dict_value(header, "descr").ok_or("header has no 'descr'")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.strip_suffix('\''))
        .ok_or_else(|| {
            format!("unsupported dtype {descr} (structured dtypes are not supported)")
        })?;
    let fortran =
        dict_value(header, "fortran_order").ok_or("header has no 'fortran_order'")? == "True";
    let shape_text = dict_value(header, "shape").ok_or("header has no 'shape'")?;
    let shape: Vec<i64> = shape_text
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<i64>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("bad shape {shape_text}"))?;
    let (order, kind, size) = split_descr(descr)?;
    let dtype = match want {
        Some(w) if dtype_accepts(w, kind, size) => w,
        Some(w) => {
            return Err(format!(
                "dtype '{descr}' does not match the parameter's element type {w} (expected '{}')",
                npy_descr(w)
            ))
        }
        None => dtype_of(kind, size).ok_or_else(|| format!("unsupported dtype '{descr}'"))?,
    };
    let count = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
        .ok_or("bad shape")?;
    let need = count.checked_mul(size).ok_or("array too large")?;
    let mut data = bytes
        .get(start + hlen..start + hlen + need)
        .ok_or_else(|| format!("truncated data: {need} bytes expected"))?
        .to_vec();
    if order == '>' && size > 1 {
        let part = if kind == 'c' { size / 2 } else { size };
        for chunk in data.chunks_mut(part) {
            chunk.reverse();
        }
    }
    if fortran && shape.len() > 1 {
        data = fortran_to_c(&data, &shape, size);
    }
    Ok(Npy { dtype, shape, data })
}

/// The text of `'key': VALUE` in a numpy header dict.
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header.find(&format!("'{key}'"))? + key.len() + 2;
    let rest = header[at..].trim_start().strip_prefix(':')?.trim_start();
    let end = if rest.starts_with('(') {
        rest.find(')')? + 1
    } else if let Some(r) = rest.strip_prefix('\'') {
        r.find('\'')? + 2
    } else {
        rest.find([',', '}'])?
    };
    Some(rest[..end].trim())
}

fn split_descr(d: &str) -> Result<(char, char, usize), String> {
    let mut chars = d.chars();
    let first = chars.next().ok_or("empty dtype")?;
    let (order, rest) = if matches!(first, '<' | '>' | '|' | '=') {
        (if first == '=' { '<' } else { first }, &d[1..])
    } else {
        ('<', d)
    };
    let kind = rest.chars().next().ok_or("empty dtype")?;
    let size: usize = rest[1..]
        .parse()
        .map_err(|_| format!("unsupported dtype '{d}'"))?;
    Ok((order, kind, size))
}

fn dtype_of(kind: char, size: usize) -> Option<ElementType> {
    use ElementType::*;
    Some(match (kind, size) {
        ('b', 1) => Pred,
        ('i', 1) => S8,
        ('i', 2) => S16,
        ('i', 4) => S32,
        ('i', 8) => S64,
        ('u', 1) => U8,
        ('u', 2) => U16,
        ('u', 4) => U32,
        ('u', 8) => U64,
        ('f', 2) => F16,
        ('f', 4) => F32,
        ('f', 8) => F64,
        ('c', 8) => C64,
        ('c', 16) => C128,
        _ => return None,
    })
}

fn dtype_accepts(want: ElementType, kind: char, size: usize) -> bool {
    if npy_descr(want).contains('V') {
        return matches!(kind, 'V' | 'u') && size == want.host_byte_size();
    }
    dtype_of(kind, size) == Some(want)
}

fn fortran_to_c(data: &[u8], shape: &[i64], size: usize) -> Vec<u8> {
    let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let n: usize = dims.iter().product();
    let mut out = vec![0u8; data.len()];
    let mut idx = vec![0usize; dims.len()];
    for c in 0..n {
        // Fortran offset of the C-order multi-index `idx`.
        let (mut f, mut stride) = (0, 1);
        for (k, &d) in dims.iter().enumerate() {
            f += idx[k] * stride;
            stride *= d;
        }
        out[c * size..(c + 1) * size].copy_from_slice(&data[f * size..(f + 1) * size]);
        for k in (0..dims.len()).rev() {
            idx[k] += 1;
            if idx[k] < dims[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    out
}

/// Writes a C-order `.npy` (version 1, or 2 for huge headers).
pub(crate) fn write_npy(
    path: &Path,
    dtype: ElementType,
    dims: &[i64],
    data: &[u8],
) -> Result<(), String> {
    std::fs::write(path, encode_npy(dtype, dims, data)).map_err(|e| e.to_string())
}

fn encode_npy(dtype: ElementType, dims: &[i64], data: &[u8]) -> Vec<u8> {
    let shape = match dims {
        [d] => format!("({d},)"),
        _ => format!(
            "({})",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        npy_descr(dtype)
    );
    let v1 = dict.len() + 11 < 65536;
    let prefix = if v1 { 10 } else { 12 };
    let total = (prefix + dict.len() + 1).div_ceil(64) * 64;
    let mut header = dict;
    header.push_str(&" ".repeat(total - prefix - header.len() - 1));
    header.push('\n');
    let mut out = Vec::with_capacity(total + data.len());
    out.extend_from_slice(b"\x93NUMPY");
    if v1 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_round_trip() {
        let data: Vec<u8> = (0..24u8).collect();
        let enc = encode_npy(ElementType::F32, &[2, 3], &data);
        assert_eq!((enc.len() - data.len()) % 64, 0);
        let n = parse_npy(&enc, None).unwrap();
        assert_eq!(n.dtype, ElementType::F32);
        assert_eq!(n.shape, vec![2, 3]);
        assert_eq!(n.data, data);
        let s = parse_npy(
            &encode_npy(ElementType::Bf16, &[], &[1, 2]),
            Some(ElementType::Bf16),
        );
        assert_eq!(s.unwrap().shape, Vec::<i64>::new());
        assert!(parse_npy(&enc, Some(ElementType::S32)).is_err());
        assert!(parse_npy(&enc[..enc.len() - 1], None).is_err());
    }

    #[test]
    fn npy_fortran_and_big_endian() {
        // [[1, 2, 3], [4, 5, 6]] as >i2 in Fortran order.
        let mut h = b"\x93NUMPY\x01\x00".to_vec();
        let dict = "{'descr': '>i2', 'fortran_order': True, 'shape': (2, 3), }\n";
        h.extend_from_slice(&(dict.len() as u16).to_le_bytes());
        h.extend_from_slice(dict.as_bytes());
        for v in [1i16, 4, 2, 5, 3, 6] {
            h.extend_from_slice(&v.to_be_bytes());
        }
        let n = parse_npy(&h, None).unwrap();
        let vals: Vec<i16> = n
            .data
            .chunks(2)
            .map(|c| i16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(vals, vec![1, 2, 3, 4, 5, 6]);
    }
}
