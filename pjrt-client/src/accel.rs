//! Finding accelerator compilers for deviceless compilation: libtpu (the
//! `libtpu` pip package), the CUDA PJRT plugin (`jax-cuda12-pjrt`, its
//! `jax_plugins/xla_cuda12` package), the CUDA toolkit pieces it needs
//! (`ptxas`, `libdevice` from `nvidia-cuda-nvcc-cu12`) and the Mosaic GPU
//! runtime (`jax-cuda12-plugin`'s `libmosaic_gpu_runtime.so`), whose host
//! symbols a Pallas Mosaic GPU kernel's custom call resolves at compile
//! time.
//!
//! Search order for each: an explicit environment variable
//! (`TPU_LIBRARY_PATH`, `HLOBRIDGE_CUDA_PLUGIN`, `HLOBRIDGE_CUDA_DATA_DIR`),
//! then `HLOBRIDGE_ACCEL_DIR`, then `<venv>/accel` (where `scripts/setup.sh`
//! installs them, kept off `sys.path` so that `import jax` never sees
//! them) for `VIRTUAL_ENV` and a `.venv` above the current directory or this
//! crate, then every site-packages of [`crate::discovery::site_packages_dirs`].

use std::path::{Path, PathBuf};

/// Directories that may hold the accelerator packages, in search order.
pub fn accel_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(d) = hlobridge_config::path(hlobridge_config::Var::AccelDir) {
        dirs.push(d);
    }
    if let Some(v) = std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
        dirs.push(Path::new(&v).join("accel"));
    }
    let mut starts = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        starts.push(cwd);
    }
    starts.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    for s in starts {
        if let Some(v) = s.ancestors().map(|a| a.join(".venv")).find(|v| v.is_dir()) {
            dirs.push(v.join("accel"));
        }
    }
    dirs.extend(crate::discovery::site_packages_dirs());
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| seen.insert(d.clone()));
    dirs
}

/// Where an accelerator piece was looked for, for error messages.
pub fn searched(env_var: &str, rel: &str) -> String {
    let dirs: Vec<String> = accel_dirs()
        .iter()
        .map(|d| d.join(rel).display().to_string())
        .collect();
    format!("${env_var}, {}", dirs.join(", "))
}

fn find(env_var: &str, rel: &str) -> Option<PathBuf> {
    // `HLOBRIDGE_*` through the config table; `TPU_LIBRARY_PATH` is libtpu's.
    let set = match hlobridge_config::Var::from_name(env_var) {
        Some(var) => hlobridge_config::path(var),
        None => std::env::var_os(env_var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
    };
    if let Some(p) = set {
        return p.exists().then_some(p);
    }
    accel_dirs()
        .into_iter()
        .map(|d| d.join(rel))
        .find(|p| p.exists())
}

/// Path of `libtpu.so` relative to an accel dir / site-packages.
pub const LIBTPU_REL: &str = "libtpu/libtpu.so";
/// Path of the CUDA 12 PJRT plugin relative to an accel dir / site-packages.
pub const CUDA_PLUGIN_REL: &str = "jax_plugins/xla_cuda12/xla_cuda_plugin.so";
/// The CUDA data dir (with `bin/ptxas` and `nvvm/libdevice`) relative to an
/// accel dir / site-packages.
pub const CUDA_DATA_REL: &str = "nvidia/cuda_nvcc";

/// The Mosaic GPU runtime relative to an accel dir / site-packages.
pub const MOSAIC_GPU_RUNTIME_REL: &str = "jax_cuda12_plugin/libmosaic_gpu_runtime.so";

/// `libtpu.so`: `TPU_LIBRARY_PATH`, else `libtpu/libtpu.so` in [`accel_dirs`].
pub fn find_libtpu() -> Option<PathBuf> {
    find("TPU_LIBRARY_PATH", LIBTPU_REL)
}

/// The CUDA PJRT plugin: `HLOBRIDGE_CUDA_PLUGIN`, else
/// `jax_plugins/xla_cuda12/xla_cuda_plugin.so` in [`accel_dirs`].
pub fn find_cuda_plugin() -> Option<PathBuf> {
    find("HLOBRIDGE_CUDA_PLUGIN", CUDA_PLUGIN_REL)
}

/// A CUDA data dir holding `bin/ptxas` and `nvvm/libdevice`:
/// `HLOBRIDGE_CUDA_DATA_DIR`, else `nvidia/cuda_nvcc` in [`accel_dirs`].
pub fn find_cuda_data_dir() -> Option<PathBuf> {
    find("HLOBRIDGE_CUDA_DATA_DIR", CUDA_DATA_REL)
        .filter(|d| d.join("bin/ptxas").exists() && d.join("nvvm/libdevice").is_dir())
}

/// The variables libtpu reads when it loads, and the values
/// [`skip_tpu_metadata_query`] gives them: `TPU_SKIP_MDS_QUERY=1` (without
/// it libtpu queries the cloud metadata server at load time and hangs off
/// GCP) and `ALLOW_MULTIPLE_LIBTPU_LOAD=1` (deviceless compiles claim no
/// chip, so several processes may load libtpu at once instead of failing on
/// `/tmp/libtpu_lockfile`).
pub const TPU_LOAD_ENV: &[(&str, &str)] = &[
    ("TPU_SKIP_MDS_QUERY", "1"),
    ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"),
];

/// Whether this process has exactly one thread (Linux: `/proc/self/task`;
/// elsewhere `false`).
pub fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|d| d.count() == 1)
}

/// Makes sure each of [`TPU_LOAD_ENV`] is set; call before loading libtpu.
/// libtpu reads them with `getenv` when it initializes, and no PJRT option
/// replaces them, so they must be in the environment.
///
/// Writing the environment races with a `getenv` on another thread (glibc's
/// `setenv` may reallocate `environ` under a concurrent reader), so a
/// missing variable is written only when the process has one thread
/// ([`single_threaded`], checked right before the write; only this thread
/// could start another): the CLI (`hlobridge compile --target tpu:...`
/// loads libtpu before any client or thread exists) and single-threaded Rust
/// programs. A multithreaded process with a variable missing gets
/// [`crate::Error::TpuEnvironment`] and nothing is written: export the
/// variables before the process starts ([`TPU_LOAD_ENV`] lists them, for a
/// child's environment). `hb.compile_for` in Python does exactly that: it
/// compiles for TPU and CUDA in a worker process started with them set.
/// Returns whether a write happened.
pub fn skip_tpu_metadata_query() -> crate::Result<bool> {
    let missing: Vec<&(&str, &str)> = TPU_LOAD_ENV
        .iter()
        .filter(|(var, _)| std::env::var_os(var).is_none())
        .collect();
    if missing.is_empty() {
        return Ok(false);
    }
    if !single_threaded() {
        let names: Vec<String> = missing.iter().map(|(k, v)| format!("{k}={v}")).collect();
        return Err(crate::Error::TpuEnvironment {
            missing: names.join(" "),
        });
    }
    for (var, value) in missing {
        // The process has one thread (checked above), so no `getenv` can run
        // concurrently with this write.
        std::env::set_var(var, value);
    }
    Ok(true)
}

/// The CUDA data dir recorded by [`set_cuda_data_dir_flag`].
static CUDA_DATA_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Records `dir` as the CUDA data dir every CUDA compile is pointed at
/// ([`cuda_xla_options`]); the first call wins. Nothing is written to the
/// environment: the directory travels as the `xla_gpu_cuda_data_dir`
/// compile option (an `env_option_overrides` entry), so this is safe to
/// call from any thread at any time. (It used to append
/// `--xla_gpu_cuda_data_dir` to `XLA_FLAGS` with `set_var`, which races
/// with every `getenv` of the plugin's own threads.)
pub fn set_cuda_data_dir_flag(dir: &Path) {
    let _ = CUDA_DATA_DIR.set(dir.to_path_buf());
}

/// The compile options that point a CUDA compile at `ptxas`/`libdevice`:
/// `xla_gpu_cuda_data_dir = <dir>` once [`set_cuda_data_dir_flag`] recorded
/// one, unless `XLA_FLAGS` names a data dir itself (the user's wins).
pub fn cuda_xla_options() -> Vec<(String, crate::XlaOption)> {
    let user = std::env::var("XLA_FLAGS").is_ok_and(|f| f.contains("--xla_gpu_cuda_data_dir"));
    match CUDA_DATA_DIR.get() {
        Some(d) if !user => vec![(
            "xla_gpu_cuda_data_dir".to_string(),
            crate::XlaOption::Str(d.display().to_string()),
        )],
        _ => Vec::new(),
    }
}

/// Adds [`cuda_xla_options`] to `options` (a name the caller set is kept).
pub fn add_cuda_xla_options(options: &mut crate::CompileOptions) {
    for (k, v) in cuda_xla_options() {
        if !options.xla_options.iter().any(|(n, _)| *n == k) {
            options.xla_options.push((k, v));
        }
    }
}

/// The Mosaic GPU runtime: `HLOBRIDGE_MOSAIC_GPU_RUNTIME`, else
/// `jax_cuda12_plugin/libmosaic_gpu_runtime.so` in [`accel_dirs`].
pub fn find_mosaic_gpu_runtime() -> Option<PathBuf> {
    find("HLOBRIDGE_MOSAIC_GPU_RUNTIME", MOSAIC_GPU_RUNTIME_REL)
}

/// Loads the Mosaic GPU runtime into the process once, with its symbols
/// global (`RTLD_GLOBAL`): the CUDA plugin compiles a `mosaic_gpu_v2`
/// custom call by JIT-linking host code that calls `mosaic_gpu_launch_kernel`
/// & co., looked up among the process's symbols. It stays loaded. Returns
/// its path; [`crate::Error::AcceleratorNotInstalled`] when it is missing,
/// [`crate::Error::PluginLoad`] when it does not load.
pub fn load_mosaic_gpu_runtime() -> crate::Result<PathBuf> {
    static LOADED: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let r = LOADED.get_or_init(|| {
        let path = find_mosaic_gpu_runtime().ok_or_else(String::new)?;
        use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
        // SAFETY: the Mosaic GPU runtime is a plain shared library (libc,
        // libstdc++ only; CUDA is opened lazily when a kernel launches, never
        // here); loading runs only its static initializers.
        let lib = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_GLOBAL) }
            .map_err(|e| format!("{}: {e}", path.display()))?;
        // Kept for the life of the process: compiled executables refer to it.
        std::mem::forget(lib);
        tracing::info!(path = %path.display(), "loaded the Mosaic GPU runtime");
        Ok(path)
    });
    match r {
        Ok(p) => Ok(p.clone()),
        Err(m) if m.is_empty() => Err(crate::Error::AcceleratorNotInstalled {
            what: "the Mosaic GPU runtime (libmosaic_gpu_runtime.so from jax-cuda12-plugin), needed to compile a Pallas Mosaic GPU kernel",
            searched: searched("HLOBRIDGE_MOSAIC_GPU_RUNTIME", MOSAIC_GPU_RUNTIME_REL),
        }),
        Err(m) => Err(crate::Error::PluginLoad {
            path: PathBuf::from(MOSAIC_GPU_RUNTIME_REL),
            message: m.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_data_dir_travels_as_an_option_not_the_environment() {
        let before = std::env::var_os("XLA_FLAGS");
        set_cuda_data_dir_flag(Path::new("/opt/cuda-data"));
        assert_eq!(std::env::var_os("XLA_FLAGS"), before);
        let mut o = crate::CompileOptions::default();
        add_cuda_xla_options(&mut o);
        if before.is_some_and(|f| f.to_string_lossy().contains("--xla_gpu_cuda_data_dir")) {
            assert!(o.xla_options.is_empty());
        } else {
            assert_eq!(
                o.xla_options,
                vec![(
                    "xla_gpu_cuda_data_dir".to_string(),
                    crate::XlaOption::Str("/opt/cuda-data".into())
                )]
            );
        }
        // A caller's own value is kept.
        let mut mine = crate::CompileOptions::default();
        mine.xla_options.push((
            "xla_gpu_cuda_data_dir".into(),
            crate::XlaOption::Str("/x".into()),
        ));
        add_cuda_xla_options(&mut mine);
        assert_eq!(mine.xla_options.len(), 1);
    }
}
