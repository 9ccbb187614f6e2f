//! Python bindings: the `hlobridge._native` extension module.
//!
//! Errors from the Rust crates are mapped to the `hlobridge.BridgeError`
//! hierarchy in one place ([`errors`]).
//!
//! The runtime half, used by `hlobridge.call_jax`: the process-global PJRT
//! client ([`runtime`]), compilation with a content-keyed cache
//! ([`executable`]), zero-copy execution on raw host pointers ([`execute`],
//! outputs as DLPack capsules from [`dlpack`]), counters ([`stats`]), the
//! persistent on-disk compile cache (`pjrt_client::disk_cache`), the `call_jax` hot
//! path ([`fastcall`]) and per-thread receipts ([`receipt`]).
//! Rust logs reach Python's `logging` through [`logging`].

mod accel;
mod artifact;
mod config;
mod device_runtime;
mod dlpack;
mod dtype;
mod errors;
mod executable;
mod execute;
mod fastcall;
mod graphcall;
mod logging;
mod receipt;
mod refine;
mod runtime;
mod spmd;
mod stats;
mod stitch;
mod viz;

use pyo3::prelude::*;

/// Rust allocations of the extension (parsed modules, stitcher, runtime
/// bookkeeping) go through mimalloc: faster than the system allocator for
/// the parser's many small allocations. Python and the PJRT plugin keep
/// their own allocators; no memory crosses between them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Parse module text and print it back (pretty, or generic with
/// `generic=True`). The GIL is released while parsing and printing.
#[pyfunction]
#[pyo3(signature = (text, generic = false, debug_info = true, file = "<input>"))]
fn format_module(
    py: Python<'_>,
    text: &str,
    generic: bool,
    debug_info: bool,
    file: &str,
) -> PyResult<String> {
    let text = text.to_owned();
    let file = file.to_owned();
    let out = py.allow_threads(move || {
        // Boxed: the core error is large, and this is the cold path.
        let m = hlobridge::parse_module_named(&file, &text)
            .map_err(|e| Box::new(hlobridge::Error::from(e)))?;
        let opts = hlobridge::PrintOptions {
            generic,
            debug_info,
        };
        Ok::<_, Box<hlobridge::Error>>(hlobridge::print_module(&m, &opts))
    });
    out.map_err(|e| errors::to_py(*e))
}

/// The `hlobridge._native` module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    logging::install();
    errors::register(m)?;
    artifact::register(m)?;
    m.add_function(wrap_pyfunction!(format_module, m)?)?;
    m.add_function(wrap_pyfunction!(refine::refine_shapes, m)?)?;
    m.add_class::<runtime::Runtime>()?;
    m.add_class::<executable::Executable>()?;
    m.add_class::<graphcall::GraphCall>()?;
    m.add_function(wrap_pyfunction!(runtime::runtime, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::_after_fork_in_child, m)?)?;
    runtime::install_fork_handlers(m)?;
    m.add_function(wrap_pyfunction!(executable::compile, m)?)?;
    m.add_function(wrap_pyfunction!(executable::clear_compile_cache, m)?)?;
    m.add_function(wrap_pyfunction!(executable::compile_cache_info, m)?)?;
    m.add_function(wrap_pyfunction!(execute::execute, m)?)?;
    m.add_function(wrap_pyfunction!(stats::stats, m)?)?;
    m.add_function(wrap_pyfunction!(stats::reset_stats, m)?)?;
    m.add_function(wrap_pyfunction!(stats::record_cache_hit, m)?)?;
    m.add_function(wrap_pyfunction!(stitch::stitch, m)?)?;
    m.add_function(wrap_pyfunction!(viz::viz_programs, m)?)?;
    m.add_function(wrap_pyfunction!(spmd::rewrite_collectives, m)?)?;
    m.add_function(wrap_pyfunction!(fastcall::fast_init, m)?)?;
    m.add_function(wrap_pyfunction!(fastcall::fast_call, m)?)?;
    m.add_function(wrap_pyfunction!(fastcall::fast_register, m)?)?;
    m.add_function(wrap_pyfunction!(fastcall::fast_forget, m)?)?;
    m.add_function(wrap_pyfunction!(fastcall::fast_clear, m)?)?;
    m.add_function(wrap_pyfunction!(receipt::record_receipt, m)?)?;
    m.add_function(wrap_pyfunction!(receipt::last_receipt_raw, m)?)?;
    m.add_function(wrap_pyfunction!(accel::compile_for_target, m)?)?;
    m.add_function(wrap_pyfunction!(accel::known_targets, m)?)?;
    m.add_function(wrap_pyfunction!(accel::accelerators, m)?)?;
    m.add_function(wrap_pyfunction!(accel::tpu_load_env, m)?)?;
    device_runtime::register(m)?;
    config::register(m)?;
    m.add("ELEMENT_TYPES", dtype::element_types(m.py())?)?;
    m.add("VIEW_ALIGNMENT", execute::VIEW_ALIGNMENT)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
