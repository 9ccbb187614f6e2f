//! The process-global PJRT runtime: one client on one plugin, discovered
//! lazily on first use and shared by every thread, and what happens to it
//! when the process forks.
//!
//! Discovery order: `HLOBRIDGE_PLUGIN` → `xla_plugins`/`jax_plugins` entry
//! points in the running interpreter's `sys.path` (so the plugin wheel of the
//! active venv is found from any directory) → the rest of
//! [`pjrt_client::find_plugin`] (`PJRT_NAMES_AND_LIBRARY_PATHS`, `VIRTUAL_ENV`,
//! `./.venv`, `TPU_LIBRARY_PATH`). CPU plugins are preferred. A failed
//! discovery is not cached: the next call tries again.
//!
//! Fork safety. A PJRT client owns worker threads; `fork()` copies only the
//! forking thread, so in a child the inherited client is a shell whose work
//! queues nobody serves: running anything on it hangs, and destroying it
//! joins threads that do not exist. The plugin's process-wide state is
//! inherited the same way: XLA's compile watchdog (`SlowCompilationAlarm`, a
//! static thread waiting on a static `absl::CondVar`, started by the first
//! compilation) is gone in the child, and the next compilation aborts the
//! process in abseil (`Mutex::Fer with pending CondVar queueing`, measured).
//!
//! So the runtime records the pid that created the client. A
//! `pthread_atfork` child handler marks the process as forked (one atomic
//! store, async-signal-safe), and Python's `os.register_at_fork` hook
//! ([`_after_fork_in_child`]) also drops the compile and fast-path caches
//! without running a destructor (their executables belong to the inherited
//! client). On the child's first use the inherited client is leaked (never
//! destroyed), then `HLOBRIDGE_AFTER_FORK` decides:
//!
//! * `error` (default): every use raises `ForkError`, naming the cause and
//!   the fix (the `spawn` or `forkserver` start method);
//! * `reinit`: a fresh client is created on the same plugin. Programs the
//!   parent compiled load from the persistent compile cache (deserializing
//!   needs no compiler); a program that needs a real XLA compilation raises
//!   `ForkError` instead of aborting ([`check_compile`]) when an ancestor
//!   process had compiled (a child of a process that never compiled may).
//!
//! An executable compiled before the fork never runs in the child
//! ([`check_client`] raises `ForkError`, checked before every execution);
//! `call_jax` forgets its compiled signatures in the child.

use crate::errors::{pjrt_to_py, ArgumentError, ForkError};
use pjrt_client::{find_plugin, Client, ClientOptions, DiscoveryOptions, FoundPlugin, Plugin};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The shared client and where its plugin came from.
pub struct Shared {
    /// The PJRT client (cheap to clone).
    pub client: Client,
    /// The plugin that was loaded.
    pub found: FoundPlugin,
}

/// The runtime in use and the pid of the process that created its client.
struct Current {
    shared: Arc<Shared>,
    pid: u32,
}

static CURRENT: Mutex<Option<Current>> = Mutex::new(None);
static INIT: Mutex<()> = Mutex::new(());
/// Set in a child process by the `pthread_atfork` handler: from then on the
/// current runtime's pid is compared with this process's before use.
static FORKED: AtomicBool = AtomicBool::new(false);
/// In a child that inherited a client: the pid that created it (0: none).
static INHERITED_FROM: AtomicU32 = AtomicU32::new(0);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a forked child does with a client inherited from its parent
/// (`HLOBRIDGE_AFTER_FORK`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum AfterFork {
    /// Leak the inherited client and create a fresh one.
    Reinit,
    /// Raise `ForkError` on every use (default).
    Error,
}

fn after_fork_mode() -> PyResult<AfterFork> {
    match hlobridge_config::get(hlobridge_config::Var::AfterFork).as_deref() {
        None | Some("error") => Ok(AfterFork::Error),
        Some("reinit") => Ok(AfterFork::Reinit),
        Some(other) => Err(ArgumentError::new_err(format!(
            "HLOBRIDGE_AFTER_FORK must be \"error\" or \"reinit\", got {other:?}"
        ))),
    }
}

/// The pid of the last process that ran a real XLA compilation through
/// this extension (0: none). Inherited through `fork()`, which is the
/// point: a child sees that an ancestor started XLA's compile watchdog.
static COMPILED_IN: AtomicU32 = AtomicU32::new(0);

/// Why a compilation was refused in a forked child. Travels inside
/// `pjrt_client::Error::Io` (the compile path's error type) and becomes
/// `ForkError` in [`crate::errors::pjrt_to_py`].
#[derive(Debug)]
pub struct ForkRefusal(pub String);

impl std::fmt::Display for ForkRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ForkRefusal {}

/// Called right before every real XLA compilation (not for disk cache
/// loads). In a child forked from a process that had compiled, XLA's
/// compile watchdog thread does not exist and compiling would abort the
/// process: refuse with an error that becomes `ForkError`.
pub fn check_compile() -> pjrt_client::Result<()> {
    let pid = std::process::id();
    let last = COMPILED_IN.load(Ordering::Relaxed);
    if last != 0 && last != pid {
        return Err(std::io::Error::other(ForkRefusal(format!(
            "hlobridge: cannot compile a new program in this process (pid {pid}): it was forked \
             from a process (pid {last}) that had already compiled with XLA, whose compile \
             watchdog thread does not exist in a forked child (compiling would abort the \
             process). Programs the parent compiled still load from the persistent compile \
             cache (HLOBRIDGE_AFTER_FORK=reinit). Start worker processes with the 'spawn' or \
             'forkserver' method (multiprocessing.get_context('spawn'), \
             DataLoader(..., multiprocessing_context='spawn')), or compile this signature in \
             the parent before forking"
        )))
        .into());
    }
    COMPILED_IN.store(pid, Ordering::Relaxed);
    Ok(())
}

fn fork_error(parent: u32) -> PyErr {
    ForkError::new_err(format!(
        "hlobridge: this process (pid {}) was forked from pid {parent} after hlobridge had \
         created its PJRT client there; the client's worker threads do not exist in a forked \
         child, so it cannot be used (HLOBRIDGE_AFTER_FORK=error). Start worker processes with \
         the 'spawn' or 'forkserver' method (multiprocessing.get_context('spawn'), \
         DataLoader(..., multiprocessing_context='spawn')), or set HLOBRIDGE_AFTER_FORK=reinit \
         to create a fresh client in the child (it runs the programs the parent compiled, \
         loaded from the persistent compile cache, but cannot compile new ones)",
        std::process::id()
    ))
}

/// Leaks everything that belongs to a client inherited through `fork()`:
/// the client itself (its destructor would join threads that do not exist
/// here) and the compiled programs cached for it. Returns the pid that
/// created it, if there was one to leak.
fn leak_inherited(pid: u32) -> Option<u32> {
    let inherited = {
        let mut cur = lock(&CURRENT);
        match &*cur {
            Some(c) if c.pid != pid => cur.take(),
            _ => None,
        }
    };
    let from = inherited.map(|c| {
        let from = c.pid;
        std::mem::forget(c.shared);
        from
    });
    if let Some(from) = from {
        INHERITED_FROM.store(from, Ordering::Relaxed);
    }
    if FORKED.load(Ordering::Relaxed) {
        crate::executable::leak_for_fork();
        crate::fastcall::leak_for_fork();
    }
    from
}

/// The current runtime if it belongs to this process. In a forked child the
/// inherited one is leaked first: `Ok(None)` means "create a fresh one",
/// or `ForkError` under `HLOBRIDGE_AFTER_FORK=error`.
fn current() -> PyResult<Option<Arc<Shared>>> {
    let pid = if FORKED.load(Ordering::Relaxed) {
        std::process::id()
    } else {
        0
    };
    {
        let cur = lock(&CURRENT);
        if let Some(c) = &*cur {
            if pid == 0 || c.pid == pid {
                return Ok(Some(c.shared.clone()));
            }
        }
    }
    if pid == 0 {
        return Ok(None);
    }
    leak_inherited(pid);
    let from = INHERITED_FROM.load(Ordering::Relaxed);
    if from != 0 && after_fork_mode()? == AfterFork::Error {
        return Err(fork_error(from));
    }
    Ok(None)
}

/// The shared runtime, discovering and creating it on first use (and, in a
/// forked child, replacing the inherited one: see the module docs). The GIL
/// is released while the plugin is loaded and the client created.
pub fn shared(py: Python<'_>) -> PyResult<Arc<Shared>> {
    if let Some(r) = current()? {
        return Ok(r);
    }
    let site_dirs = python_site_dirs(py);
    let pid = std::process::id();
    py.allow_threads(move || {
        let _guard = lock(&INIT);
        {
            let cur = lock(&CURRENT);
            if let Some(c) = &*cur {
                if c.pid == pid {
                    return Ok(c.shared.clone());
                }
            }
        }
        let found = discover(&site_dirs)?;
        let plugin = Plugin::load(&found.path)?;
        // The environment the plugin reads into code generation, as it is
        // when the plugin first reads it (compile-cache keys).
        hlobridge_compile::snapshot_environment();
        let client = Client::new(&plugin, &ClientOptions::new())?;
        let r = Arc::new(Shared { client, found });
        // An inherited runtime was taken out by `current()`; anything here
        // now is this process's own (we hold INIT), so this replaces `None`.
        let old = lock(&CURRENT).replace(Current {
            shared: r.clone(),
            pid,
        });
        if let Some(old) = old {
            std::mem::forget(old.shared);
        }
        Ok(r)
    })
    .map_err(pjrt_to_py)
}

/// Fails with `ForkError` when `client` was created by another process (a
/// program compiled before this process was forked): running it would hang.
/// One relaxed atomic load unless this process is a forked child.
#[inline]
pub fn check_client(client: &Client) -> PyResult<()> {
    if !FORKED.load(Ordering::Relaxed) {
        return Ok(());
    }
    check_client_forked(client)
}

#[cold]
fn check_client_forked(client: &Client) -> PyResult<()> {
    let pid = std::process::id();
    let creator = {
        let cur = lock(&CURRENT);
        match &*cur {
            Some(c) if c.pid == pid && c.shared.client.raw() == client.raw() => return Ok(()),
            Some(c) => c.pid,
            None => INHERITED_FROM.load(Ordering::Relaxed),
        }
    };
    if creator != pid && after_fork_mode()? == AfterFork::Error {
        return Err(fork_error(creator));
    }
    Err(ForkError::new_err(format!(
        "hlobridge: this program was compiled on the PJRT client of another process (this \
         process, pid {pid}, was forked after compiling it); it cannot run here. Compile it \
         again in this process (hlobridge.call_jax does so by itself; for torch.compile / \
         compile_train_step, compile the model in the child), or start workers with the \
         'spawn' or 'forkserver' method"
    )))
}

#[cfg(unix)]
extern "C" {
    fn pthread_atfork(
        prepare: Option<unsafe extern "C" fn()>,
        parent: Option<unsafe extern "C" fn()>,
        child: Option<unsafe extern "C" fn()>,
    ) -> std::os::raw::c_int;
}

/// Runs in a child right after `fork()`: async-signal-safe (one store).
#[cfg(unix)]
unsafe extern "C" fn mark_forked() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Called by Python's `os.register_at_fork(after_in_child=...)` in a child
/// forked by `os.fork()` (multiprocessing's `fork` start method): drops the
/// compiled programs of the inherited client without running their
/// destructors, so the child compiles afresh. Idempotent.
#[pyfunction]
pub fn _after_fork_in_child() {
    FORKED.store(true, Ordering::Relaxed);
    leak_inherited(std::process::id());
}

/// Installs the fork handlers (once per process): a `pthread_atfork` child
/// handler (covers every `fork()`, also from C) and Python's
/// `os.register_at_fork` hook [`_after_fork_in_child`].
pub fn install_fork_handlers(m: &Bound<'_, PyModule>) -> PyResult<()> {
    #[cfg(unix)]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            // SAFETY: `mark_forked` is a plain function that lives as long
            // as the process (the extension is never unloaded) and only does
            // an atomic store, which is async-signal-safe.
            let rc = unsafe { pthread_atfork(None, None, Some(mark_forked)) };
            if rc != 0 {
                tracing::warn!(
                    rc,
                    "pthread_atfork failed; fork detection relies on os.register_at_fork"
                );
            }
        });
    }
    let py = m.py();
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("after_in_child", m.getattr("_after_fork_in_child")?)?;
    py.import("os")?
        .getattr("register_at_fork")?
        .call((), Some(&kwargs))?;
    Ok(())
}

/// The running interpreter's site-packages directories (from `sys.path`).
fn python_site_dirs(py: Python<'_>) -> Vec<PathBuf> {
    let paths: Vec<String> = py
        .import("sys")
        .and_then(|sys| sys.getattr("path"))
        .and_then(|p| p.extract())
        .unwrap_or_default();
    paths
        .into_iter()
        .filter(|p| p.contains("-packages"))
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .collect()
}

fn discover(site_dirs: &[PathBuf]) -> pjrt_client::Result<FoundPlugin> {
    let prefer_cpu = DiscoveryOptions {
        explicit: None,
        prefer: Some("cpu".into()),
    };
    if hlobridge_config::get_os(hlobridge_config::Var::Plugin).is_some() {
        return find_plugin(&prefer_cpu);
    }
    let mut found: Vec<FoundPlugin> = site_dirs
        .iter()
        .flat_map(|d| pjrt_client::discovery::scan_entry_points(d))
        .collect();
    found.sort_by_key(|f| !f.name.contains("cpu"));
    match found.into_iter().next() {
        Some(f) => Ok(f),
        None => find_plugin(&prefer_cpu),
    }
}

/// The process-wide PJRT runtime (`hlobridge.runtime()`).
#[pyclass(frozen, module = "hlobridge._native")]
pub struct Runtime {
    shared: Arc<Shared>,
}

#[pymethods]
impl Runtime {
    /// Platform name (`cpu`, `cuda`, ...).
    #[getter]
    fn platform(&self) -> &str {
        self.shared.client.platform_name()
    }
    /// Platform version string.
    #[getter]
    fn platform_version(&self) -> &str {
        self.shared.client.platform_version()
    }
    /// Number of addressable devices.
    #[getter]
    fn device_count(&self) -> usize {
        self.shared.client.device_count()
    }
    /// Path of the loaded plugin.
    #[getter]
    fn plugin_path(&self) -> String {
        self.shared.found.path.display().to_string()
    }
    /// How the plugin was found (`entry_point`, `HLOBRIDGE_PLUGIN`, ...).
    #[getter]
    fn discovered_by(&self) -> &str {
        self.shared.found.source
    }
    /// The plugin memory cache (`HLOBRIDGE_PLUGIN_MEMORY_POOL`): a dict of
    /// `installed`, `reused` (requests served from a kept block), `mapped`,
    /// `unmapped` (blocks taken from / returned to the OS), `cached_bytes`
    /// and `live_bytes`.
    #[getter]
    fn memory_pool<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let s = pjrt_client::plugin_memory::stats();
        let d = pyo3::types::PyDict::new(py);
        d.set_item("installed", pjrt_client::plugin_memory::installed())?;
        d.set_item("reused", s.reused)?;
        d.set_item("mapped", s.mapped)?;
        d.set_item("unmapped", s.unmapped)?;
        d.set_item("cached_bytes", s.cached_bytes)?;
        d.set_item("live_bytes", s.live_bytes)?;
        Ok(d)
    }
    /// Returns the plugin memory cache's kept blocks to the OS; the bytes
    /// released.
    fn trim_memory(&self) -> usize {
        pjrt_client::plugin_memory::trim()
    }
    fn __repr__(&self) -> String {
        format!(
            "Runtime(platform={:?}, devices={}, plugin={:?})",
            self.shared.client.platform_name(),
            self.shared.client.device_count(),
            self.shared.found.path.display().to_string()
        )
    }
}

/// The process-wide runtime, created on first call (plugin discovery and
/// client creation run once, with the GIL released).
#[pyfunction]
pub fn runtime(py: Python<'_>) -> PyResult<Runtime> {
    Ok(Runtime {
        shared: shared(py)?,
    })
}
