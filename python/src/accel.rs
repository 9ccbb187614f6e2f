//! `_native.compile_for_target`: compile a finished (stitched) StableHLO
//! module for a target (`tpu:v5e`, `cuda:h100:8`, `cpu`, ...) through
//! [`pjrt_client::targets`], for `hb.compile_for`.
//!
//! TPU and CUDA targets compile deviceless with the real compilers (libtpu,
//! the CUDA PJRT plugin); the program is compiled as given: no CPU-only
//! rewrite (host GEMM, ...) is applied, because
//! [`hlobridge::lower::host_lowering_for`] lowers only for `cpu`. The `cpu`
//! target compiles on the process's CPU runtime client with the compile
//! service's options and host lowering ([`hlobridge_compile::prepare`]),
//! i.e. the program hlobridge runs here.
//! The GIL is released around the compile.

use crate::errors::pjrt_to_py;
use crate::runtime;
use pjrt_client::targets::{compile_for_target as compile_target, Target, TargetKind};
use pjrt_client::CompileOptions;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

fn options(partitions: usize, replicas: usize, shardy: bool) -> CompileOptions {
    CompileOptions::for_devices(partitions, replicas, shardy)
}

/// Compiles module `text` for `target` with `partitions` × `replicas`
/// devices (Shardy partitioner when `shardy`). Returns a dict: `target`,
/// `platform`, `device_kind`, `topology_devices`, `plugin_api`,
/// `partitions`, `replicas`, `compile_s`, `generated_code_bytes`,
/// `serialized` (bytes), `memory` (dict or None), `capacity`,
/// `vmem_capacity`, `fusions`, `custom_calls`, `kernels` (list of
/// `(custom call target, backend, count)`), `optimized_text`,
/// `host_lowering` (host GEMM calls rewritten; 0 except for `cpu`).
#[pyfunction]
#[pyo3(signature = (target, text, partitions = 1, replicas = 1, shardy = false))]
pub fn compile_for_target<'py>(
    py: Python<'py>,
    target: &str,
    text: &str,
    partitions: usize,
    replicas: usize,
    shardy: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let opts = options(partitions.max(1), replicas, shardy);
    let needed = opts.num_partitions.max(1) * opts.num_replicas.max(1);
    let mut t = Target::resolve(target, None).map_err(pjrt_to_py)?;
    // `cpu`: the process's runtime client (the host kernels and the lowering
    // call_jax applies), unless the program needs more devices than it has.
    let rt = match t.kind {
        TargetKind::Cpu { devices } => {
            t.kind = TargetKind::Cpu {
                devices: devices.max(needed),
            };
            let rt = runtime::shared(py)?;
            (rt.client.device_count() >= needed).then_some(rt)
        }
        _ => None,
    };
    let (result, rewritten) = py
        .allow_threads(|| {
            runtime::check_compile()?;
            let Some(rt) = rt.as_ref() else {
                return Ok(compile_target(&t, text, &opts, None).map(|c| (c, 0))?);
            };
            // The compile service's options, host lowering and fallback, as
            // for every program this runtime runs.
            let policy = hlobridge_compile::CompilePolicy::uncached();
            let prepared = hlobridge_compile::prepare(&rt.client, opts.clone(), &policy)?;
            let (c, host) = prepared.compile_with(text, |p| {
                compile_target(&t, p, &prepared.options, Some(&rt.client))
            })?;
            Ok::<_, hlobridge_compile::CompileError>((c, host.gemm_rewritten))
        })
        .map_err(crate::executable::compile_error_to_py)?;
    let d = PyDict::new(py);
    d.set_item("target", &result.target)?;
    d.set_item("platform", &result.platform)?;
    d.set_item("device_kind", &result.device_kind)?;
    d.set_item("topology_devices", result.topology_devices)?;
    d.set_item("plugin_api", &result.plugin_api)?;
    d.set_item("partitions", result.partitions)?;
    d.set_item("replicas", result.replicas)?;
    d.set_item("compile_s", result.compile_time.as_secs_f64())?;
    d.set_item("generated_code_bytes", result.generated_code)?;
    d.set_item("serialized", PyBytes::new(py, &result.serialized))?;
    match result.memory {
        Some(s) => {
            let m = PyDict::new(py);
            m.set_item("arguments", s.arguments)?;
            m.set_item("outputs", s.outputs)?;
            m.set_item("alias", s.alias)?;
            m.set_item("temporaries", s.temp)?;
            m.set_item("generated_code", s.generated_code)?;
            m.set_item("total", s.device_total())?;
            m.set_item("peak", s.peak)?;
            d.set_item("memory", m)?;
        }
        None => d.set_item("memory", py.None())?,
    }
    d.set_item("capacity", result.capacity)?;
    d.set_item("vmem_capacity", result.vmem_capacity)?;
    d.set_item(
        "fusions",
        result.fusions.clone().into_iter().collect::<Vec<_>>(),
    )?;
    d.set_item(
        "custom_calls",
        result.custom_calls.clone().into_iter().collect::<Vec<_>>(),
    )?;
    d.set_item("kernels", result.kernels())?;
    d.set_item("optimized_text", result.optimized_text.as_deref())?;
    d.set_item("host_lowering", rewritten)?;
    Ok(d)
}

/// Every known target name (`cpu`, `tpu:v5e`, `cuda:h100`, ...): the
/// shipped table plus `HLOBRIDGE_TARGETS`.
#[pyfunction]
pub fn known_targets() -> PyResult<Vec<String>> {
    pjrt_client::targets::known_targets().map_err(pjrt_to_py)
}

/// libtpu's load-time variables and the values hlobridge gives them
/// (`pjrt_client::accel::TPU_LOAD_ENV`), for a worker's environment.
#[pyfunction]
pub fn tpu_load_env() -> Vec<(&'static str, &'static str)> {
    pjrt_client::accel::TPU_LOAD_ENV.to_vec()
}

/// Where the accelerator compilers are: `{"libtpu": path|None,
/// "cuda_plugin": path|None, "cuda_data_dir": path|None,
/// "mosaic_gpu_runtime": path|None}`.
#[pyfunction]
pub fn accelerators(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    use pjrt_client::accel;
    let d = PyDict::new(py);
    let s = |p: Option<std::path::PathBuf>| p.map(|p| p.display().to_string());
    d.set_item("libtpu", s(accel::find_libtpu()))?;
    d.set_item("cuda_plugin", s(accel::find_cuda_plugin()))?;
    d.set_item("cuda_data_dir", s(accel::find_cuda_data_dir()))?;
    d.set_item("mosaic_gpu_runtime", s(accel::find_mosaic_gpu_runtime()))?;
    Ok(d)
}
