//! Process-wide runtime counters (views, copies, compiles, cache hits,
//! disk cache hits, executions), exposed to Python as `hlobridge._native.stats()`.
//!
//! Counters are relaxed atomics: they are monotonic tallies read by tests and
//! receipts, never used for synchronisation.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::atomic::{AtomicU64, Ordering};

/// One named counter.
pub struct Counter(AtomicU64);

impl Counter {
    /// A counter at zero.
    pub(crate) const fn new() -> Self {
        Counter(AtomicU64::new(0))
    }
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// Current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

/// Inputs passed to PJRT as zero-copy views of caller memory.
pub static INPUT_VIEWS: Counter = Counter::new();
/// Inputs copied into a fresh device buffer (unaligned or empty).
pub static INPUT_COPIES: Counter = Counter::new();
/// Bytes copied for `INPUT_COPIES`.
pub static INPUT_COPIED_BYTES: Counter = Counter::new();
/// Outputs handed out zero-copy (DLPack capsules).
pub static OUTPUTS: Counter = Counter::new();
/// PJRT compilations actually performed.
pub static COMPILES: Counter = Counter::new();
/// Executables served by a cache instead of compiling (native compile cache
/// and the Python per-function cache, which reports through
/// [`record_cache_hit`]).
pub static CACHE_HITS: Counter = Counter::new();
/// Executables loaded from the persistent (disk) compile cache instead of
/// compiling; not counted in `COMPILES` or `CACHE_HITS`.
pub static DISK_CACHE_HITS: Counter = Counter::new();
/// Executions.
pub static EXECUTIONS: Counter = Counter::new();
/// Matrix products compiled as host GEMM kernel calls (see
/// `hlobridge::lower::host_gemm`), over all compiles.
pub static HOST_GEMM_CALLS: Counter = Counter::new();
/// Convolutions compiled as host convolution kernel calls (see
/// `hlobridge::lower::host_conv`), over all compiles.
pub static HOST_CONV_CALLS: Counter = Counter::new();
/// Of the products, those compiled as calls of the CPU plugin's oneDNN
/// matrix product (`hlobridge::lower::onednn_call::MATMUL`).
pub static ONEDNN_MATMUL_CALLS: Counter = Counter::new();

/// Matrix products left to XLA whose operands the dot operand rewrite
/// gave unmerged (`hlobridge::lower::dot_operands`), over all compiles.
pub static DOT_OPERAND_REWRITES: Counter = Counter::new();

/// Reductions the CPU lowering ran in two stages
/// (`hlobridge::lower::reduce_stages`), over all compiles.
pub static REDUCE_STAGES: Counter = Counter::new();

const ALL: &[(&str, &Counter)] = &[
    ("input_views", &INPUT_VIEWS),
    ("input_copies", &INPUT_COPIES),
    ("input_copied_bytes", &INPUT_COPIED_BYTES),
    ("outputs", &OUTPUTS),
    ("compiles", &COMPILES),
    ("cache_hits", &CACHE_HITS),
    ("disk_cache_hits", &DISK_CACHE_HITS),
    ("executions", &EXECUTIONS),
    ("host_gemm_calls", &HOST_GEMM_CALLS),
    ("host_conv_calls", &HOST_CONV_CALLS),
    ("onednn_matmul_calls", &ONEDNN_MATMUL_CALLS),
    ("dot_operand_rewrites", &DOT_OPERAND_REWRITES),
    ("reduce_stages", &REDUCE_STAGES),
];

/// The counters as a `dict[str, int]`, and two run-time counts the host
/// convolution kernel keeps since the process started (not reset):
/// `onednn_weight_gradients`, the weight gradients it ran on oneDNN, and
/// `onednn_data_convolutions`, the grouped forwards and input gradients.
#[pyfunction]
pub fn stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (name, c) in ALL {
        d.set_item(name, c.get())?;
    }
    d.set_item(
        "onednn_weight_gradients",
        pjrt_client::host_kernels::conv::onednn_wgrad::calls(),
    )?;
    d.set_item(
        "onednn_data_convolutions",
        pjrt_client::host_kernels::conv::onednn_data::calls(),
    )?;
    Ok(d)
}

/// Resets every counter to zero (tests).
#[pyfunction]
pub fn reset_stats() {
    for (_, c) in ALL {
        c.reset();
    }
}

/// Counts one executable served from a cache outside the native compile
/// cache (the Python per-function cache); returns the new totals
/// `(cache_hits, compiles)`.
#[pyfunction]
pub fn record_cache_hit() -> (u64, u64) {
    CACHE_HITS.add(1);
    (CACHE_HITS.get(), COMPILES.get())
}
