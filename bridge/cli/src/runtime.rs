//! What `run`, `stitch --run` and `conform` share about the runtime: plugin
//! loading, IR tensor types as PJRT element types, compile options (from the
//! module's partition/replica counts, plus `--xla-option` overrides) and
//! executing a loaded program with host inputs.
//!
//! hlobridge sends the plugin a `CompileOptionsProto` with no
//! `DebugOptions`, so the plugin compiles with its own defaults; every
//! `--xla-option` is an `env_option_overrides` entry applied on top of them
//! (docs/conformance.md explains why this matters when comparing with jax).

use crate::error::{CliError, Result};
use crate::npy::Npy;
use hlobridge::ir::{Attribute, Module, Type, TypeId};
use pjrt_client::{
    Buffer, Client, CompileOptions, ElementType, ExecuteOptions, LoadedExecutable, Plugin,
    XlaOption,
};
use std::path::{Path, PathBuf};

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

/// Loads the plugin at `explicit`, or the one discovery finds; returns it
/// with its path.
pub(crate) fn load_plugin(explicit: Option<&Path>) -> Result<(Plugin, PathBuf)> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => {
            pjrt_client::find_plugin(&pjrt_client::DiscoveryOptions::default())
                .map_err(|e| CliError::Plugin(e.to_string()))?
                .path
        }
    };
    let plugin = Plugin::load(&path).map_err(|e| CliError::Plugin(e.to_string()))?;
    Ok((plugin, path))
}

/// Element type and dims of a tensor type (rejects non-tensors and element
/// types PJRT has no buffer type for, such as `!quant.uniform`).
pub(crate) fn tensor_info(m: &Module, t: TypeId) -> Result<(ElementType, Vec<i64>)> {
    match m.ty(t) {
        Type::Tensor { dims, elem, .. } => Ok((element_type(m, *elem)?, dims.to_vec())),
        _ => Err(CliError::Input(format!(
            "{} is not a ranked tensor",
            hlobridge::print::type_to_string(m, t)
        ))),
    }
}

fn element_type(m: &Module, elem: TypeId) -> Result<ElementType> {
    let s = hlobridge::print::type_to_string(m, elem);
    let norm = match m.ty(elem) {
        Type::Integer { width: 1, .. } => "i1".to_string(),
        _ => s.strip_prefix("si").map_or(s.clone(), |w| format!("i{w}")),
    };
    ElementType::from_mlir_name(&norm)
        .ok_or_else(|| CliError::Input(format!("element type {s} has no PJRT buffer type")))
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
    let partitions = module_int_attr(m, "mhlo.num_partitions").unwrap_or(1);
    let replicas = module_int_attr(m, "mhlo.num_replicas").unwrap_or(1);
    let shardy = m.ops.iter().any(|o| m.str(o.name) == "sdy.mesh");
    compile_options_for(partitions, replicas, shardy)
}

/// Compile options for `partitions` × `replicas` devices.
pub(crate) fn compile_options_for(partitions: i64, replicas: i64, shardy: bool) -> CompileOptions {
    CompileOptions::for_devices(partitions.max(1) as usize, replicas.max(1) as usize, shardy)
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
) -> Result<Vec<Vec<HostArray>>> {
    let devices = exe.devices();
    if let Some(params) = exe.parameter_info() {
        for (i, (p, x)) in params.iter().zip(inputs).enumerate() {
            if p.dims[..] != x.shape[..] {
                return Err(CliError::Input(format!(
                    "parameter {i} is sharded across devices (per-device {p}, input {}); `run` feeds whole arrays only",
                    type_string(x.dtype, &x.shape)
                )));
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
                    .map_err(|e| CliError::Run(format!("input {i}: {e}")))?,
            );
        }
        per_device.push(bufs);
    }
    let refs: Vec<Vec<&Buffer>> = per_device.iter().map(|v| v.iter().collect()).collect();
    let outs = exe
        .execute_sharded(&refs, &ExecuteOptions::default())
        .map_err(|e| CliError::Run(format!("run error: {e}")))?;
    let n = outs.first().map_or(0, |o| o.len());
    let mut result = Vec::with_capacity(n);
    for i in 0..n {
        let mut shards = Vec::new();
        for dev in &outs {
            let b = &dev[i];
            let dtype = b
                .element_type()
                .map_err(|e| CliError::Run(format!("output {i}: {e}")))?;
            let dims = b
                .dims()
                .map_err(|e| CliError::Run(format!("output {i}: {e}")))?
                .to_vec();
            let bytes = b
                .to_host_bytes()
                .map_err(|e| CliError::Run(format!("output {i}: {e}")))?;
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

/// Parses `--xla-option NAME=VALUE`: `true`/`false` become booleans,
/// integers and floats numbers, anything else (or a value in double quotes)
/// a string.
pub(crate) fn parse_xla_option(spec: &str) -> Result<(String, XlaOption)> {
    let (name, value) = spec
        .split_once('=')
        .ok_or_else(|| CliError::Input(format!("--xla-option {spec:?}: expected NAME=VALUE")))?;
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(CliError::Input(format!(
            "--xla-option {spec:?}: bad option name {name:?}"
        )));
    }
    let v = value.trim();
    let parsed = if let Some(s) = v.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        XlaOption::Str(s.to_string())
    } else if v == "true" || v == "false" {
        XlaOption::Bool(v == "true")
    } else if let Ok(i) = v.parse::<i64>() {
        XlaOption::Int(i)
    } else if let Ok(d) = v.parse::<f64>() {
        XlaOption::Double(d)
    } else {
        XlaOption::Str(v.to_string())
    };
    Ok((name.to_string(), parsed))
}

/// `NAME=VALUE` as the receipt shows an override.
pub(crate) fn xla_option_string(name: &str, v: &XlaOption) -> String {
    match v {
        XlaOption::Str(s) => format!("{name}=\"{s}\""),
        XlaOption::Bool(b) => format!("{name}={b}"),
        XlaOption::Int(i) => format!("{name}={i}"),
        XlaOption::Double(d) => format!("{name}={d}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xla_options_are_typed() {
        let p = |s: &str| parse_xla_option(s).unwrap().1;
        assert_eq!(p("a=true"), XlaOption::Bool(true));
        assert_eq!(p("a=3"), XlaOption::Int(3));
        assert_eq!(p("a=0.5"), XlaOption::Double(0.5));
        assert_eq!(
            p("xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_REDUCE"),
            XlaOption::Str("LIBRARY_FUSION_TYPE_REDUCE".into())
        );
        assert_eq!(p("a=\"3\""), XlaOption::Str("3".into()));
        assert!(parse_xla_option("novalue").is_err());
        assert!(parse_xla_option("bad name=1").is_err());
    }
}
