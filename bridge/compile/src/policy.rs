//! What a front end may choose, as values: the only way front ends differ.
//! Every step (options, host lowering, caches, fallback) is the service's.

use pjrt_client::XlaOption;

/// Whether the host lowering (host GEMM / convolution kernels) is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostLoweringMode {
    /// On the `cpu` platform, when the client registered the host kernels,
    /// with the settings of `HLOBRIDGE_HOST_GEMM` / `HLOBRIDGE_HOST_CONV`
    /// ([`hlobridge::lower::host_lowering_for`]).
    #[default]
    Auto,
    /// Never: the program is compiled as given.
    Off,
}

/// Whether the persistent compile cache is used.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DiskCacheMode {
    /// As `HLOBRIDGE_CACHE*` say ([`pjrt_client::disk_cache::Config`]).
    #[default]
    Auto,
    /// In this directory (other settings from `HLOBRIDGE_CACHE_*`), whatever
    /// `HLOBRIDGE_CACHE` says.
    At(std::path::PathBuf),
    /// Never read or written.
    Off,
}

/// How one front end wants its programs compiled.
#[derive(Debug, Clone)]
pub struct CompilePolicy {
    /// XLA options on top of the plugin's defaults (and of
    /// [`pjrt_client::CPU_SEMANTICS`]); sorted by name by the service, so
    /// the order given does not change the cache keys.
    pub xla_overrides: Vec<(String, XlaOption)>,
    /// Add [`pjrt_client::CPU_SEMANTICS`] on the `cpu` platform (default
    /// on: NaN-propagating min/max, as torch and jax).
    pub cpu_semantics: bool,
    /// The host lowering.
    pub host_lowering: HostLoweringMode,
    /// Keep executables in the process-wide memory cache (keyed by client
    /// and content) and hand the same one to every caller.
    pub memory_cache: bool,
    /// The persistent compile cache.
    pub disk_cache: DiskCacheMode,
    /// Called right before every real compilation (never for a cache hit);
    /// an error refuses the compile (the Python extension refuses in a
    /// forked child).
    pub before_compile: Option<fn() -> pjrt_client::Result<()>>,
}

impl Default for CompilePolicy {
    fn default() -> Self {
        CompilePolicy {
            xla_overrides: Vec::new(),
            cpu_semantics: true,
            host_lowering: HostLoweringMode::Auto,
            memory_cache: false,
            disk_cache: DiskCacheMode::Auto,
            before_compile: None,
        }
    }
}

impl CompilePolicy {
    /// The Python extension's policy: memory and disk caches on.
    pub fn in_process() -> Self {
        CompilePolicy {
            memory_cache: true,
            ..CompilePolicy::default()
        }
    }

    /// A one-shot tool's policy (CLI `run`, `conform`, `compile`): no
    /// caches, every run a real compile.
    pub fn uncached() -> Self {
        CompilePolicy {
            disk_cache: DiskCacheMode::Off,
            ..CompilePolicy::default()
        }
    }

    /// `self` with `overrides` as the XLA overrides.
    pub fn with_xla_overrides(mut self, overrides: Vec<(String, XlaOption)>) -> Self {
        self.xla_overrides = overrides;
        self
    }
}
