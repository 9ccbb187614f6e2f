//! The one place where Rust errors become Python exceptions: every
//! exception derives from `hlobridge.BridgeError`.

use pyo3::create_exception;
use pyo3::prelude::*;

create_exception!(_native, BridgeError, pyo3::exceptions::PyException, "Base class of every hlobridge error.");
create_exception!(_native, ParseError, BridgeError, "Malformed StableHLO/MLIR text; the message names file:line:col.");
create_exception!(_native, InvalidIrError, BridgeError, "Structurally invalid IR for the requested operation.");
create_exception!(_native, StitchError, BridgeError, "A stitch plan is invalid: unknown handle, seam type mismatch, cycle or conflict.");

/// Register the exception classes on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("BridgeError", py.get_type::<BridgeError>())?;
    m.add("ParseError", py.get_type::<ParseError>())?;
    m.add("InvalidIrError", py.get_type::<InvalidIrError>())?;
    m.add("StitchError", py.get_type::<StitchError>())?;
    Ok(())
}

/// Map a core error to its Python exception.
pub fn to_py(e: hlobridge::Error) -> PyErr {
    match e {
        hlobridge::Error::Parse(p) => ParseError::new_err(p.to_string()),
        hlobridge::Error::Io { .. } => pyo3::exceptions::PyOSError::new_err(e.to_string()),
        hlobridge::Error::Invalid(msg) => InvalidIrError::new_err(msg),
        hlobridge::Error::Plan(_)
        | hlobridge::Error::SeamMismatch { .. }
        | hlobridge::Error::Cycle(_)
        | hlobridge::Error::Conflict(_) => StitchError::new_err(e.to_string()),
    }
}
