//! The one place where Rust errors become Python exceptions: every
//! exception is a class of `hlobridge.errors` (defined in Python, in
//! `python/hlobridge/_src/errors.py`, so that it pickles by its import path)
//! and derives from `hlobridge.BridgeError`. The classes the Rust half raises
//! (the Python-side ones, such as `CompileBackendError`, are listed there):
//!
//! ```text
//! BridgeError
//! ├── ParseError            malformed StableHLO/MLIR text (file:line:col)
//! ├── InvalidIrError        structurally invalid IR
//! ├── ShapeRefinementError  a dynamic module cannot be refined to given shapes
//! ├── StitchError           stitch plans: bad plan, seam mismatch, cycle, conflict
//! │   └── CollectiveRewriteError  a collective hlobridge.spmd cannot rewrite
//! ├── FileError             (also an OSError) reading/writing a file
//! ├── PluginError           finding or loading a PJRT plugin
//! │   ├── PluginNotFoundError
//! │   └── PluginLoadError
//! ├── PjrtError             a PJRT C API call failed (.function, .code)
//! │   └── CompileError      PJRT_Client_Compile failed
//! ├── TargetError           hb.compile_for: compiling for a target
//! │   ├── UnknownTargetError            the target string names no target
//! │   ├── AcceleratorNotInstalledError  libtpu / the CUDA plugin / ptxas missing
//! │   └── OutOfMemoryError              the program does not fit the device
//! ├── ArgumentError         bad inputs: count, shape, device, size, layout
//! │   ├── DtypeError        unsupported or mismatched element type
//! │   └── ShapeAssertionError  a shape assertion fails for given shapes (.dim)
//! ├── OutputError           a function's result holds a leaf that is not an array
//! ├── BufferDeletedError    a buffer used after it was deleted or donated
//! └── ForkError             the PJRT client was inherited through fork()
//! ```

use pyo3::prelude::*;

/// Rust handles on the classes of `hlobridge.errors` (defined in Python,
/// `python/hlobridge/_src/errors.py`, so that they pickle by their import
/// path). Each is looked up by name on first use and kept in a
/// `GILOnceCell` (pyo3's `import_exception!`); `T::new_err(msg)` is lazy and
/// needs no GIL.
macro_rules! python_errors {
    ($($name:ident),* $(,)?) => {
        $(pyo3::import_exception!(hlobridge.errors, $name);)*

        /// Put the classes on the native module too (`hlobridge._native.ForkError`
        /// is `hlobridge.errors.ForkError`).
        pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
            let py = m.py();
            $(m.add(stringify!($name), py.get_type::<$name>())?;)*
            Ok(())
        }
    };
}

python_errors!(
    BridgeError,
    ParseError,
    InvalidIrError,
    ShapeRefinementError,
    ShapeAssertionError,
    StitchError,
    CollectiveRewriteError,
    FileError,
    PluginError,
    PluginNotFoundError,
    PluginLoadError,
    PjrtError,
    CompileError,
    ArgumentError,
    DtypeError,
    OutputError,
    BufferDeletedError,
    ForkError,
    TargetError,
    UnknownTargetError,
    AcceleratorNotInstalledError,
    OutOfMemoryError,
);

/// Map a core error to its Python exception.
pub fn to_py(e: hlobridge::Error) -> PyErr {
    use hlobridge::Error as E;
    match e {
        E::Parse(p) => ParseError::new_err(p.to_string()),
        E::Io { .. } => FileError::new_err(e.to_string()),
        E::Invalid(msg) => InvalidIrError::new_err(msg),
        E::Plan(_) | E::SeamMismatch(_) | E::Cycle(_) | E::Conflict(_) | E::Alias(_) => {
            StitchError::new_err(e.to_string())
        }
        E::Collective(_) => CollectiveRewriteError::new_err(e.to_string()),
        E::ShapeRefinement { .. } => ShapeRefinementError::new_err(e.to_string()),
        E::ShapeAssertion { ref dimension, .. } => {
            let dim = dimension.clone();
            let err = ShapeAssertionError::new_err(e.to_string());
            Python::with_gil(|py| {
                // As in with_attrs: a failed assignment still raises the error.
                let _ = err.value(py).setattr("dim", dim);
            });
            err
        }
    }
}

/// Map a PJRT runtime error to its Python exception.
pub fn pjrt_to_py(e: pjrt_client::Error) -> PyErr {
    use pjrt_client::Error as E;
    let msg = e.to_string();
    match e {
        E::PluginNotFound { .. } | E::NoPluginFound { .. } => PluginNotFoundError::new_err(msg),
        E::PluginLoad { .. }
        | E::NotAPjrtPlugin { .. }
        | E::IncompatibleApi { .. }
        | E::TpuEnvironment { .. } => PluginLoadError::new_err(msg),
        E::Unsupported { function } => {
            with_attrs(PjrtError::new_err(msg), function, "Unimplemented")
        }
        E::Pjrt { function, code, .. } => {
            let err = if function == "PJRT_Client_Compile" || function == "PJRT_Compile" {
                CompileError::new_err(msg)
            } else {
                PjrtError::new_err(msg)
            };
            with_attrs(err, function, &code.to_string())
        }
        E::ArgumentDtype { .. } | E::UnsupportedType(_) => DtypeError::new_err(msg),
        E::ArgumentCount { .. }
        | E::DeviceCount { .. }
        | E::ArgumentShape { .. }
        | E::HostSize { .. }
        | E::InvalidArgument(_) => ArgumentError::new_err(msg),
        E::BufferDeleted { .. } => BufferDeletedError::new_err(msg),
        E::Decode { .. } => PjrtError::new_err(msg),
        E::UnknownTarget(_) => UnknownTargetError::new_err(msg),
        E::AcceleratorNotInstalled { .. } => AcceleratorNotInstalledError::new_err(msg),
        E::OutOfMemory { .. } => OutOfMemoryError::new_err(msg),
        E::Io(io) => match io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<crate::runtime::ForkRefusal>())
        {
            Some(refusal) => ForkError::new_err(refusal.0.clone()),
            None => FileError::new_err(msg),
        },
    }
}

/// Sets `function` and `code` on a `PjrtError` instance.
fn with_attrs(err: PyErr, function: &str, code: &str) -> PyErr {
    Python::with_gil(|py| {
        let v = err.value(py);
        // Attribute assignment on a fresh exception instance cannot fail in
        // practice; if it does, the error itself is still worth raising.
        let _ = v.setattr("function", function);
        let _ = v.setattr("code", code);
    });
    err
}
