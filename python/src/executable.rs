//! Compiling StableHLO text into an [`Executable`], with a process-wide
//! compile cache.
//!
//! The cache key is the exact content: the encoded `CompileOptionsProto`
//! followed by the module text (the map hashes it; equal keys are compared
//! byte for byte, so a hash collision can never hand back the wrong
//! program). Two modules with the same text (e.g. the same JAX function
//! defined twice) share one compilation. The cache is unbounded; use
//! `clear_compile_cache()` to drop it.
//!
//! Lock rule (for every lock in this extension): never emit a `tracing`
//! event, call into Python, or drop anything whose destructor may do either
//! while a Rust lock is held. Events are forwarded to Python `logging` under
//! the GIL, and Python code can hand the GIL to another thread, which may be
//! waiting for that lock with the GIL held: a process-wide deadlock.
//!
//! Behind it sits the persistent cache ([`crate::disk_cache`]): on an
//! in-memory miss the serialized executable is looked up on disk (keyed by
//! plugin identity, options and text) and deserialized; a real compile
//! stores its serialized executable there.

use crate::errors::pjrt_to_py;
use crate::runtime;
use crate::stats;
use pjrt_client::disk_cache::{self, Config, Key, Store};
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
    /// Seconds the PJRT compilation took (for an executable loaded from
    /// the disk cache: seconds reading and deserializing it).
    pub compile_s: f64,
    /// Loaded from the disk cache rather than compiled.
    pub from_disk: bool,
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

/// The CPU runtime's compile options: [`pjrt_client::CPU_SEMANTICS`]
/// (NaN-propagating min/max, as torch and jax) under the caller's overrides.
fn compile_options(xla_options: Option<&Bound<'_, PyDict>>) -> PyResult<CompileOptions> {
    let mut opts = CompileOptions::default();
    opts.xla_options = pjrt_client::with_cpu_semantics(Vec::new());
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
        opts.xla_options = pjrt_client::with_cpu_semantics(items);
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
    let rt = runtime::shared(py)?;
    // The host lowering is part of both cache keys: a program compiled with
    // host GEMM calls must not be served to a caller that turned them off.
    let lowering = host_lowering(&rt);
    let mut encoded = opts.encode();
    if let Some(l) = &lowering {
        encoded.extend_from_slice(b"\0lowering=");
        encoded.extend_from_slice(l.cache_tag().as_bytes());
    }
    let mut key = Vec::with_capacity(8 + encoded.len() + text.len());
    key.extend_from_slice(&(encoded.len() as u64).to_le_bytes());
    key.extend_from_slice(&encoded);
    key.extend_from_slice(text.as_bytes());
    // The guard is a temporary of this statement: the lock is released
    // before anything below logs (a `tracing` event takes the GIL, and
    // Python may hand the GIL to a thread waiting for this lock).
    let hit = lock(cache()).get(&key).cloned();
    if let Some(hit) = hit {
        stats::CACHE_HITS.add(1);
        tracing::debug!(fingerprint = %hit.fingerprint, "compile cache hit");
        return Ok((Executable { inner: hit }, true));
    }
    let fp = fingerprint(&key);
    let cfg = Config::from_env();
    let ident = if cfg.enabled {
        plugin_identity(&rt)
    } else {
        ""
    };
    let compiled = py
        .allow_threads(|| {
            let host = if cfg.enabled {
                disk_cache::host_id()
            } else {
                String::new()
            };
            let dkey = Key {
                plugin: ident,
                host: &host,
                options: &encoded,
                text,
            };
            let store = disk_cache::open(&cfg);
            if let Some(store) = &store {
                if let Some(c) = load_from_disk(&rt, store, &dkey, &fp) {
                    return Ok(c);
                }
            }
            // Refused in a forked child whose parent had compiled (XLA
            // would abort): see crate::runtime.
            runtime::check_compile()?;
            let t0 = Instant::now();
            let lowered = lowering
                .as_ref()
                .and_then(|l| hlobridge::lower::lower_text_for_host_report(text, l));
            if let Some((_, full)) = &lowered {
                stats::HOST_CONV_CALLS.add(full.conv.rewritten as u64);
                let report = &full.gemm;
                stats::HOST_GEMM_CALLS.add(report.rewritten as u64);
                tracing::debug!(rewritten = report.rewritten, products = report.products, "host GEMM lowering");
            }
            let exe = match &lowered {
                Some((program, _)) => match rt.client.compile(&Program::mlir_text(program), &opts) {
                    Ok(exe) => exe,
                    // The lowered text should compile whenever the original
                    // does; if it ever does not, run the original program.
                    Err(e) => {
                        tracing::warn!(error = %e, "host lowering: the lowered program does not compile; compiling the original");
                        rt.client.compile(&Program::mlir_text(text), &opts)?
                    }
                },
                None => rt.client.compile(&Program::mlir_text(text), &opts)?,
            };
            let compiled = Compiled {
                exe,
                fingerprint: fp,
                compile_s: t0.elapsed().as_secs_f64(),
                from_disk: false,
            };
            if let Some(store) = &store {
                match compiled.exe.serialize() {
                    Ok(bytes) => store.store(&dkey, &bytes),
                    Err(e) => tracing::warn!(error = %e, "compile cache: the plugin cannot serialize executables; not cached on disk"),
                }
            }
            Ok::<_, pjrt_client::Error>(compiled)
        })
        .map_err(pjrt_to_py)?;
    if compiled.from_disk {
        stats::DISK_CACHE_HITS.add(1);
        tracing::info!(
            fingerprint = %compiled.fingerprint,
            seconds = compiled.compile_s,
            "loaded program from the disk compile cache"
        );
    } else {
        stats::COMPILES.add(1);
        tracing::info!(
            fingerprint = %compiled.fingerprint,
            seconds = compiled.compile_s,
            bytes = text.len(),
            "compiled program"
        );
    }
    // Another thread may have compiled the same module meanwhile: keep the
    // first entry so every caller shares one executable. The duplicate is
    // dropped after the lock is released (destroying an executable may log).
    let (entry, duplicate) = {
        let mut c = lock(cache());
        match c.get(&key) {
            Some(first) => (first.clone(), Some(compiled)),
            None => {
                let e = Arc::new(compiled);
                c.insert(key, e.clone());
                (e, None)
            }
        }
    };
    drop(duplicate);
    Ok((Executable { inner: entry }, false))
}

/// Drops every cached executable; returns how many there were. Executables
/// still referenced from Python stay valid.
#[pyfunction]
pub fn clear_compile_cache() -> usize {
    // Taken out under the lock, dropped after it: destroying executables
    // may log, and nothing may log while a Rust lock is held.
    let old = std::mem::take(&mut *lock(cache()));
    let n = old.len();
    drop(old);
    n
}

/// The host lowering to apply before compiling on this runtime: only when
/// its plugin registered the host kernels and `HLOBRIDGE_HOST_GEMM` allows it.
fn host_lowering(rt: &runtime::Shared) -> Option<hlobridge::lower::HostLowering> {
    if !rt.client.host_kernels().gemm {
        return None;
    }
    hlobridge::lower::host_lowering_for(rt.client.platform_name())
}

/// The plugin identity of the shared runtime (computed once).
fn plugin_identity(rt: &runtime::Shared) -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| disk_cache::plugin_identity(&rt.client, &rt.found.path))
}

/// The executable for `key` from the disk cache, or `None` (miss, or an
/// entry that does not deserialize: logged, deleted, compile instead).
fn load_from_disk(
    rt: &runtime::Shared,
    store: &Store,
    key: &Key<'_>,
    fp: &str,
) -> Option<Compiled> {
    let t0 = Instant::now();
    let bytes = store.load(key)?;
    match rt.client.deserialize_executable(&bytes, None) {
        Ok(exe) => Some(Compiled {
            exe,
            fingerprint: fp.to_string(),
            compile_s: t0.elapsed().as_secs_f64(),
            from_disk: true,
        }),
        Err(e) => {
            let path = disk_cache::entry_path(store.dir(), key);
            tracing::warn!(
                path = %path.display(),
                error = %e,
                "compile cache: entry does not deserialize (corrupt or incompatible); deleting it and compiling"
            );
            store.discard(key);
            None
        }
    }
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// In a forked child: forgets every cached executable without destroying it
/// (they belong to the client inherited from the parent, which must never
/// be touched here; see [`crate::runtime`]).
pub(crate) fn leak_for_fork() {
    std::mem::forget(std::mem::take(&mut *lock(cache())));
}
