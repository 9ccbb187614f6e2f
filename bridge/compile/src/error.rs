//! The crate's single error type.

/// Why a program did not compile.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// The plugin refused the program (or a transfer of it), or a front
    /// end's `before_compile` hook refused to compile in this process.
    #[error("{0}")]
    Pjrt(#[from] pjrt_client::Error),
    /// The program needs more devices than the client has.
    #[error("the module needs {needed} devices (mhlo.num_partitions = {partitions}, mhlo.num_replicas = {replicas}) but the client has {available}; pass --devices {needed}")]
    TooFewDevices {
        /// Partitions × replicas.
        needed: usize,
        /// `num_partitions`.
        partitions: usize,
        /// `num_replicas`.
        replicas: usize,
        /// The client's devices.
        available: usize,
    },
    /// The plugin failed to compile while the process was at (or near) its
    /// limit of memory mappings: every live program holds some.
    #[error("the process uses {used} of its {limit} memory mappings (vm.max_map_count), and every loaded program holds some of its own: drop compiled programs that are no longer used (hlobridge.clear_cache() also drops the cache's own references), or raise vm.max_map_count; the plugin said: {source}")]
    MappingLimit {
        /// Mappings in use (lines of /proc/self/maps).
        used: usize,
        /// vm.max_map_count.
        limit: usize,
        /// The plugin's error.
        source: Box<pjrt_client::Error>,
    },
}

/// Result alias for this crate.
pub type Result<T, E = CompileError> = std::result::Result<T, E>;
