//! The Python face of the compile service ([`hlobridge_compile`]):
//! `hlobridge._native.compile` turns StableHLO text into an [`Executable`]
//! through the same steps as every other front end (CPU semantics, host
//! lowering, memory and disk caches, fallback), with the in-process policy
//! ([`CompilePolicy::in_process`]), and keeps the extension's counters.
//!
//! The memory cache's key is the exact content (client, options, lowering,
//! environment, text; a hash collision can never hand back the wrong
//! program). Two modules with the same text share one compilation while
//! either is held; the few most recently used are kept alive besides
//! (`HLOBRIDGE_MEMORY_CACHE_ENTRIES`); `clear_compile_cache()` drops it.
//!
//! Lock rule (for every lock in this extension, and the service's): never
//! emit a `tracing` event, call into Python, or drop anything whose
//! destructor may do either while a Rust lock is held. Events are forwarded
//! to Python `logging` under the GIL, and Python code can hand the GIL to
//! another thread, which may be waiting for that lock with the GIL held: a
//! process-wide deadlock. The service compiles with the GIL released.

use crate::errors::pjrt_to_py;
use crate::runtime;
use crate::stats;
use hlobridge_compile::{CompileError, CompilePolicy};
use pjrt_client::disk_cache::{self, Config};
use pjrt_client::{CompileOptions, XlaOption};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};
use std::sync::Arc;

/// A compiled program plus what Python wants to know about it (the
/// service's answer).
pub use hlobridge_compile::Compiled;

/// A compiled, loaded program (`hlobridge._native.compile`).
#[pyclass(frozen, module = "hlobridge._native")]
pub struct Executable {
    pub(crate) inner: Arc<Compiled>,
}

#[pymethods]
impl Executable {
    /// Number of outputs.
    #[getter]
    fn num_outputs(&self) -> usize {
        self.inner.exe.num_outputs()
    }
    /// Output element types (MLIR spellings: `f32`, `bf16`, `i1`, ...).
    #[getter]
    fn output_dtypes(&self) -> Vec<&'static str> {
        self.inner
            .exe
            .output_info()
            .iter()
            .map(|a| a.dtype.mlir_name())
            .collect()
    }
    /// Output shapes.
    #[getter]
    fn output_shapes(&self) -> Vec<Vec<i64>> {
        self.inner
            .exe
            .output_info()
            .iter()
            .map(|a| a.dims.to_vec())
            .collect()
    }
    /// Content fingerprint of the module text and compile options (hex).
    #[getter]
    fn fingerprint(&self) -> &str {
        &self.inner.fingerprint
    }
    /// Seconds the PJRT compilation took (loading time when it came from
    /// the disk cache).
    #[getter]
    fn compile_time_s(&self) -> f64 {
        self.inner.compile_s
    }
    /// Whether it was loaded from the persistent compile cache.
    #[getter(from_disk_cache)]
    fn loaded_from_disk(&self) -> bool {
        self.inner.from_disk
    }
    /// The host-kernel custom calls the program makes, by target
    /// (`{"hlobridge_gemm_nn": 2, "hlobridge_conv": 1}`): what the host
    /// lowering rewrote, the same names every front end reports.
    #[getter]
    fn host_kernels(&self) -> std::collections::BTreeMap<String, usize> {
        self.inner.host.kernels.clone()
    }
    /// The fusions of the optimized (post-XLA-pass) program, each as
    /// `(name, kind, opcodes)`: the fusion instruction's name, its kind
    /// (`kLoop`, `kInput`, `kOutput`, ...) and the opcodes fused into it.
    #[getter]
    fn fusions(&self) -> PyResult<Vec<(String, String, Vec<String>)>> {
        let hlo = self.inner.exe.optimized_hlo().map_err(pjrt_to_py)?;
        Ok(hlo
            .fusions()
            .into_iter()
            .map(|f| (f.name, f.kind, f.opcodes))
            .collect())
    }
    /// Platform the executable runs on.
    #[getter]
    fn platform(&self) -> &str {
        self.inner.exe.client().platform_name()
    }
    fn __repr__(&self) -> String {
        format!(
            "Executable(fingerprint={:?}, outputs={})",
            self.inner.fingerprint,
            self.inner.exe.num_outputs()
        )
    }
}

fn xla_option(key: &str, v: &Bound<'_, PyAny>) -> PyResult<XlaOption> {
    // bool first: Python bools are ints.
    if v.is_instance_of::<PyBool>() {
        Ok(XlaOption::Bool(v.extract()?))
    } else if v.is_instance_of::<PyInt>() {
        Ok(XlaOption::Int(v.extract()?))
    } else if v.is_instance_of::<PyFloat>() {
        Ok(XlaOption::Double(v.extract()?))
    } else if v.is_instance_of::<PyString>() {
        Ok(XlaOption::Str(v.extract()?))
    } else {
        Err(crate::errors::ArgumentError::new_err(format!(
            "xla option {key:?}: value must be bool, int, float or str, got {}",
            v.get_type().name()?
        )))
    }
}

/// The caller's XLA overrides (sorted by the service).
fn xla_overrides(xla_options: Option<&Bound<'_, PyDict>>) -> PyResult<Vec<(String, XlaOption)>> {
    let mut items: Vec<(String, XlaOption)> = Vec::new();
    if let Some(d) = xla_options {
        items.reserve(d.len());
        for (k, v) in d.iter() {
            let k: String = k.extract()?;
            let o = xla_option(&k, &v)?;
            items.push((k, o));
        }
    }
    Ok(items)
}

/// The compile service's errors as Python exceptions.
pub(crate) fn compile_error_to_py(e: CompileError) -> PyErr {
    match e {
        CompileError::Pjrt(e) => pjrt_to_py(e),
        e @ CompileError::TooFewDevices { .. } => {
            crate::errors::ArgumentError::new_err(e.to_string())
        }
        e @ CompileError::MappingLimit { .. } => {
            crate::errors::CompileError::new_err(e.to_string())
        }
    }
}

/// Compiles StableHLO module text (GIL released), or returns the cached
/// executable for identical text and options. Returns `(executable,
/// cache_hit)`.
#[pyfunction]
#[pyo3(signature = (text, xla_options = None))]
pub fn compile(
    py: Python<'_>,
    text: &str,
    xla_options: Option<&Bound<'_, PyDict>>,
) -> PyResult<(Executable, bool)> {
    let policy = CompilePolicy {
        // Refused in a forked child whose parent had compiled (XLA would
        // abort): see crate::runtime.
        before_compile: Some(runtime::check_compile),
        ..CompilePolicy::in_process()
    }
    .with_xla_overrides(xla_overrides(xla_options)?);
    let rt = runtime::shared(py)?;
    let fetched = py
        .allow_threads(|| {
            hlobridge_compile::compile(&rt.client, text, CompileOptions::default(), &policy)
        })
        .map_err(compile_error_to_py)?;
    let c = &fetched.compiled;
    if fetched.from_memory {
        stats::CACHE_HITS.add(1);
    } else if c.from_disk {
        stats::DISK_CACHE_HITS.add(1);
    } else {
        stats::COMPILES.add(1);
        stats::HOST_GEMM_CALLS.add(c.host.gemm_rewritten as u64);
        stats::HOST_CONV_CALLS.add(c.host.conv_rewritten as u64);
        stats::DOT_OPERAND_REWRITES.add(c.host.dot_operands as u64);
        stats::REDUCE_STAGES.add(c.host.reduce_stages as u64);
        let onednn = c.host.kernels.get(hlobridge::lower::onednn_call::MATMUL);
        stats::ONEDNN_MATMUL_CALLS.add(onednn.copied().unwrap_or(0) as u64);
    }
    Ok((
        Executable {
            inner: fetched.compiled,
        },
        fetched.from_memory,
    ))
}

/// Drops the memory cache (its index and the recently used programs it
/// keeps alive); returns how many indexed programs were still alive.
/// Executables still referenced from Python stay valid.
#[pyfunction]
pub fn clear_compile_cache() -> usize {
    hlobridge_compile::clear_memory_cache()
}

/// The persistent compile cache: `dir`, `enabled`, `entries`, `bytes`,
/// `max_bytes`, `disk_hits` and `disk_writes` (this process), and `host`
/// (the host identity in every key).
#[pyfunction]
pub fn compile_cache_info(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let cfg = Config::from_env();
    let (entries, bytes) = disk_cache::usage(&cfg.dir);
    let d = PyDict::new(py);
    d.set_item("dir", cfg.dir.display().to_string())?;
    d.set_item("enabled", cfg.enabled)?;
    d.set_item("entries", entries)?;
    d.set_item("bytes", bytes)?;
    d.set_item("max_bytes", cfg.max_bytes)?;
    d.set_item("disk_hits", stats::DISK_CACHE_HITS.get())?;
    d.set_item("disk_writes", disk_cache::DISK_WRITES.get())?;
    d.set_item("host", disk_cache::host_id())?;
    Ok(d)
}

/// In a forked child: forgets every cached executable without destroying it
/// (they belong to the client inherited from the parent, which must never
/// be touched here; see [`crate::runtime`]).
pub(crate) fn leak_for_fork() {
    hlobridge_compile::forget_memory_cache_for_fork();
}
