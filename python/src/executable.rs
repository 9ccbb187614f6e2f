//! Compiling StableHLO text into an [`Executable`], with a process-wide
//! compile cache.
//!
//! The cache key is the exact content: the encoded `CompileOptionsProto`
//! followed by the module text (the map hashes it; equal keys are compared
//! byte for byte, so a hash collision can never hand back the wrong
//! program). Two modules with the same text (e.g. the same JAX function
//! defined twice) share one compilation. The cache is unbounded; use
//! `clear_compile_cache()` to drop it.

use crate::errors::pjrt_to_py;
use crate::runtime;
use crate::stats;
use pjrt_client::{CompileOptions, LoadedExecutable, Program, XlaOption};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// A compiled program plus what Python wants to know about it.
pub struct Compiled {
    /// The PJRT executable.
    pub exe: LoadedExecutable,
    /// Short content fingerprint (hex) of the module text and options.
    pub fingerprint: String,
    /// Seconds the PJRT compilation took.
    pub compile_s: f64,
}

type Cache = Mutex<HashMap<Vec<u8>, Arc<Compiled>>>;

fn cache() -> &'static Cache {
    static C: OnceLock<Cache> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

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
    /// Seconds the PJRT compilation took.
    #[getter]
    fn compile_time_s(&self) -> f64 {
        self.inner.compile_s
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

fn compile_options(xla_options: Option<&Bound<'_, PyDict>>) -> PyResult<CompileOptions> {
    let mut opts = CompileOptions::default();
    if let Some(d) = xla_options {
        let mut items: Vec<(String, XlaOption)> = Vec::with_capacity(d.len());
        for (k, v) in d.iter() {
            let k: String = k.extract()?;
            let o = xla_option(&k, &v)?;
            items.push((k, o));
        }
        // Sorted, so the encoded options (part of the cache key) do not
        // depend on dict order.
        items.sort_by(|a, b| a.0.cmp(&b.0));
        opts.xla_options = items;
    }
    Ok(opts)
}

fn fingerprint(key: &[u8]) -> String {
    // Display only (receipts, repr); the cache compares full keys.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    format!("{:016x}", h.finish())
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
    let opts = compile_options(xla_options)?;
    let encoded = opts.encode();
    let mut key = Vec::with_capacity(8 + encoded.len() + text.len());
    key.extend_from_slice(&(encoded.len() as u64).to_le_bytes());
    key.extend_from_slice(&encoded);
    key.extend_from_slice(text.as_bytes());
    if let Some(hit) = lock(cache()).get(&key) {
        stats::CACHE_HITS.add(1);
        tracing::debug!(fingerprint = %hit.fingerprint, "compile cache hit");
        return Ok((Executable { inner: hit.clone() }, true));
    }
    let rt = runtime::shared(py)?;
    let fp = fingerprint(&key);
    let compiled = py
        .allow_threads(|| {
            let t0 = Instant::now();
            let exe = rt.client.compile(&Program::mlir_text(text), &opts)?;
            Ok(Compiled {
                exe,
                fingerprint: fp,
                compile_s: t0.elapsed().as_secs_f64(),
            })
        })
        .map_err(pjrt_to_py)?;
    stats::COMPILES.add(1);
    tracing::info!(
        fingerprint = %compiled.fingerprint,
        seconds = compiled.compile_s,
        bytes = text.len(),
        "compiled program"
    );
    // Another thread may have compiled the same module meanwhile: keep the
    // first entry so every caller shares one executable.
    let entry = lock(cache())
        .entry(key)
        .or_insert_with(|| Arc::new(compiled))
        .clone();
    Ok((Executable { inner: entry }, false))
}

/// Drops every cached executable; returns how many there were. Executables
/// still referenced from Python stay valid.
#[pyfunction]
pub fn clear_compile_cache() -> usize {
    let mut c = lock(cache());
    let n = c.len();
    c.clear();
    n
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
