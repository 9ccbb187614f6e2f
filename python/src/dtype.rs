//! Element types as seen from Python: MLIR spellings (`f32`, `bf16`, `i1`,
//! ...) mapped to the raw `PJRT_Buffer_Type` codes that `execute` takes.

use pjrt_client::ElementType;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `dict[str, int]`: every usable element type's MLIR name → raw code.
pub fn element_types(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for &t in ElementType::ALL {
        if !matches!(t, ElementType::Invalid | ElementType::Token) {
            d.set_item(t.mlir_name(), t.to_raw())?;
        }
    }
    Ok(d)
}

/// The element type of a raw code, or an `ArgumentError`.
pub fn from_code(code: i32) -> PyResult<ElementType> {
    match ElementType::from_raw(code) {
        Some(t) if !matches!(t, ElementType::Invalid | ElementType::Token) => Ok(t),
        _ => Err(crate::errors::ArgumentError::new_err(format!(
            "unknown element type code {code}"
        ))),
    }
}
