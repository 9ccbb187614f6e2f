//! The `HLOBRIDGE_*` variable table (crate `hlobridge-config`) for Python:
//! the package warns about unknown variables at import from the same table
//! the Rust crates read through.

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

/// Adds the functions to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(config_variables, m)?)?;
    m.add_function(wrap_pyfunction!(check_environment, m)?)?;
    Ok(())
}
