//! The `HLOBRIDGE_*` variable table (crate `hlobridge-config`) for Python:
//! the package warns about unknown variables at import from the same table
//! the Rust crates read through; and what a setting resolved to where that
//! depends on the process (`host_gemm_kernel`).

use pyo3::prelude::*;

/// Every `HLOBRIDGE_*` variable: `(name, default, meaning, read_by)`,
/// `read_by` being a comma-separated list of `rust`, `python`, `scripts`,
/// `tests`.
#[pyfunction]
pub fn config_variables() -> Vec<(&'static str, &'static str, &'static str, String)> {
    hlobridge_config::Var::ALL
        .iter()
        .map(|v| {
            let i = v.info();
            (i.name, i.default, i.meaning, i.read_by_str())
        })
        .collect()
}

/// One warning per unknown `HLOBRIDGE_*` variable in the process
/// environment, naming the nearest known one when one is close.
#[pyfunction]
pub fn check_environment() -> Vec<String> {
    hlobridge_config::check_environment()
}

/// The library the host GEMM kernel runs its products in, in this process:
/// what `HLOBRIDGE_GEMM_KERNEL` resolved to (`gemm`, `matrixmultiply`, or
/// `mkl`; `mkl` only when PyTorch's MKL was found and passed its self-check,
/// `gemm` for that setting otherwise). Resolves MKL on first call, so call
/// it after `import torch`.
#[pyfunction]
pub fn host_gemm_kernel() -> &'static str {
    use pjrt_client::host_kernels::gemm::{Kernel, Mkl};
    match Kernel::from_env() {
        Kernel::Gemm => "gemm",
        Kernel::MatrixMultiply => "matrixmultiply",
        Kernel::Mkl if Mkl::get().is_some() => "mkl",
        Kernel::Mkl => "gemm",
    }
}

/// Adds the functions to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(config_variables, m)?)?;
    m.add_function(wrap_pyfunction!(host_gemm_kernel, m)?)?;
    m.add_function(wrap_pyfunction!(check_environment, m)?)?;
    Ok(())
}
