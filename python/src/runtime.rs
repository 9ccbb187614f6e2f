//! The process-global PJRT runtime: one client on one plugin, discovered
//! lazily on first use and shared by every thread.
//!
//! Discovery order: `HLOBRIDGE_PLUGIN` → `xla_plugins`/`jax_plugins` entry
//! points in the running interpreter's `sys.path` (so the plugin wheel of the
//! active venv is found from any directory) → the rest of
//! [`pjrt_client::find_plugin`] (`PJRT_NAMES_AND_LIBRARY_PATHS`, `VIRTUAL_ENV`,
//! `./.venv`, `TPU_LIBRARY_PATH`). CPU plugins are preferred. A failed
//! discovery is not cached: the next call tries again.

use crate::errors::pjrt_to_py;
use pjrt_client::{find_plugin, Client, ClientOptions, DiscoveryOptions, FoundPlugin, Plugin};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// The shared client and where its plugin came from.
pub struct Shared {
    /// The PJRT client (cheap to clone).
    pub client: Client,
    /// The plugin that was loaded.
    pub found: FoundPlugin,
}

static RUNTIME: OnceLock<Arc<Shared>> = OnceLock::new();
static INIT: Mutex<()> = Mutex::new(());

/// The shared runtime, discovering and creating it on first use. The GIL
/// is released while the plugin is loaded and the client created.
pub fn shared(py: Python<'_>) -> PyResult<Arc<Shared>> {
    if let Some(r) = RUNTIME.get() {
        return Ok(r.clone());
    }
    let site_dirs = python_site_dirs(py);
    py.allow_threads(move || {
        let _guard = INIT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = RUNTIME.get() {
            return Ok(r.clone());
        }
        let found = discover(&site_dirs)?;
        let plugin = Plugin::load(&found.path)?;
        let client = Client::new(&plugin, &ClientOptions::new())?;
        let r = Arc::new(Shared { client, found });
        // We hold INIT and checked above, so this `set` succeeds.
        let _ = RUNTIME.set(r.clone());
        Ok(r)
    })
    .map_err(pjrt_to_py)
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
    if std::env::var_os("HLOBRIDGE_PLUGIN").is_some_and(|v| !v.is_empty()) {
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
