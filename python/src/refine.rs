//! `hlobridge._native.refine_shapes`: the core's shape refinement
//! (`hlobridge::refine`) for Python, with the GIL released.

use pyo3::prelude::*;

/// Specialise the public `@main` of a module with dynamic (`?`) dimensions
/// to `arg_shapes` (one list of dims per argument) and return the static
/// module's text. Raises `ShapeAssertionError` when a shape assertion fails
/// and `ShapeRefinementError` (or `ParseError`) otherwise.
#[pyfunction]
pub fn refine_shapes(
    py: Python<'_>,
    module_text: &str,
    arg_shapes: Vec<Vec<i64>>,
) -> PyResult<String> {
    let text = module_text.to_owned();
    py.allow_threads(move || hlobridge::refine::refine_text(&text, &arg_shapes).map_err(Box::new))
        .map_err(|e| crate::errors::to_py(*e))
}
