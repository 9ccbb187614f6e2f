//! The one place where Rust errors become Python exceptions: every
//! exception derives from `hlobridge.BridgeError`.
//!
//! ```text
//! BridgeError
//! ├── ParseError            malformed StableHLO/MLIR text (file:line:col)
//! ├── InvalidIrError        structurally invalid IR
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
//! │   └── DtypeError        unsupported or mismatched element type
//! ├── OutputError           a function's result holds a leaf that is not an array
//! ├── BufferDeletedError    a buffer used after it was deleted or donated
//! └── ForkError             the PJRT client was inherited through fork()
//! ```

use pyo3::create_exception;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyTuple, PyType};

create_exception!(
    _native,
    BridgeError,
    pyo3::exceptions::PyException,
    "Base class of every hlobridge error."
);
create_exception!(
    _native,
    ParseError,
    BridgeError,
    "Malformed StableHLO/MLIR text; the message names file:line:col."
);
create_exception!(
    _native,
    InvalidIrError,
    BridgeError,
    "Structurally invalid IR for the requested operation."
);
create_exception!(
    _native,
    StitchError,
    BridgeError,
    "A stitch plan is invalid: unknown handle, seam type mismatch, cycle or conflict."
);
create_exception!(
    _native,
    CollectiveRewriteError,
    StitchError,
    "A collective in a segment cannot be rewritten for the devices the program runs on \
     (`hlobridge.spmd`)."
);
create_exception!(
    _native,
    PluginError,
    BridgeError,
    "Finding or loading a PJRT plugin failed."
);
create_exception!(
    _native,
    PluginNotFoundError,
    PluginError,
    "No PJRT plugin was found (set HLOBRIDGE_PLUGIN=/path/to/plugin.so)."
);
create_exception!(
    _native,
    PluginLoadError,
    PluginError,
    "A PJRT plugin exists but cannot be loaded or has an incompatible API."
);
create_exception!(
    _native,
    PjrtError,
    BridgeError,
    "A PJRT C API call failed; `function` and `code` name the call and its status."
);
create_exception!(
    _native,
    CompileError,
    PjrtError,
    "Compiling a program with PJRT failed."
);
create_exception!(
    _native,
    ArgumentError,
    BridgeError,
    "Invalid arguments: count, shape, device, size or memory layout."
);
create_exception!(
    _native,
    DtypeError,
    ArgumentError,
    "An unsupported or mismatched element type."
);
create_exception!(
    _native,
    OutputError,
    BridgeError,
    "A function's result cannot be handed back to torch: it holds a leaf that is not an array \
     (a string, an arbitrary object)."
);
create_exception!(
    _native,
    BufferDeletedError,
    BridgeError,
    "A buffer was used after it was deleted or donated."
);
create_exception!(
    _native,
    ForkError,
    BridgeError,
    "The process was forked after hlobridge created its PJRT client, and the inherited client \
     (or a program compiled on it) cannot be used here; start workers with the 'spawn' or \
     'forkserver' method."
);

create_exception!(
    _native,
    TargetError,
    BridgeError,
    "Compiling for a target (`hb.compile_for`, `hlobridge compile --target`) failed before or \
     around the compiler: an unknown target, a missing accelerator compiler, or a program that \
     does not fit the device."
);
create_exception!(
    _native,
    UnknownTargetError,
    TargetError,
    "The target string names no known target; the message lists the known ones."
);
create_exception!(
    _native,
    AcceleratorNotInstalledError,
    TargetError,
    "The target's compiler (libtpu, the CUDA PJRT plugin, ptxas/libdevice) is not installed; \
     the message says where it was looked for (`scripts/setup.sh` installs them into .venv/accel)."
);
create_exception!(
    _native,
    OutOfMemoryError,
    TargetError,
    "The program does not fit the target device's memory (HBM, VMEM, shared memory); the \
     message carries the compiler's numbers."
);

/// `FileError(BridgeError, OSError)`, built at module init (pyo3's
/// `create_exception!` takes a single base).
static FILE_ERROR: GILOnceCell<Py<PyType>> = GILOnceCell::new();

fn file_error_type(py: Python<'_>) -> PyResult<&Py<PyType>> {
    FILE_ERROR.get_or_try_init(py, || {
        let bases = PyTuple::new(
            py,
            [
                py.get_type::<BridgeError>().into_any(),
                py.get_type::<pyo3::exceptions::PyOSError>().into_any(),
            ],
        )?;
        let ns = PyDict::new(py);
        ns.set_item("__module__", "_native")?;
        ns.set_item(
            "__doc__",
            "Reading or writing a file failed (also an OSError).",
        )?;
        let ty = py
            .get_type::<PyType>()
            .call1(("FileError", bases, ns))?
            .downcast_into::<PyType>()?;
        Ok(ty.unbind())
    })
}

/// Register the exception classes on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("BridgeError", py.get_type::<BridgeError>())?;
    m.add("ParseError", py.get_type::<ParseError>())?;
    m.add("InvalidIrError", py.get_type::<InvalidIrError>())?;
    m.add("StitchError", py.get_type::<StitchError>())?;
    m.add(
        "CollectiveRewriteError",
        py.get_type::<CollectiveRewriteError>(),
    )?;
    m.add("FileError", file_error_type(py)?.bind(py))?;
    m.add("PluginError", py.get_type::<PluginError>())?;
    m.add("PluginNotFoundError", py.get_type::<PluginNotFoundError>())?;
    m.add("PluginLoadError", py.get_type::<PluginLoadError>())?;
    m.add("PjrtError", py.get_type::<PjrtError>())?;
    m.add("CompileError", py.get_type::<CompileError>())?;
    m.add("ArgumentError", py.get_type::<ArgumentError>())?;
    m.add("DtypeError", py.get_type::<DtypeError>())?;
    m.add("OutputError", py.get_type::<OutputError>())?;
    m.add("BufferDeletedError", py.get_type::<BufferDeletedError>())?;
    m.add("ForkError", py.get_type::<ForkError>())?;
    m.add("TargetError", py.get_type::<TargetError>())?;
    m.add("UnknownTargetError", py.get_type::<UnknownTargetError>())?;
    m.add(
        "AcceleratorNotInstalledError",
        py.get_type::<AcceleratorNotInstalledError>(),
    )?;
    m.add("OutOfMemoryError", py.get_type::<OutOfMemoryError>())?;
    Ok(())
}

fn file_error(msg: String) -> PyErr {
    Python::with_gil(|py| match file_error_type(py) {
        Ok(ty) => PyErr::from_type(ty.bind(py).clone(), (msg,)),
        Err(e) => e,
    })
}

/// Map a core error to its Python exception.
pub fn to_py(e: hlobridge::Error) -> PyErr {
    use hlobridge::Error as E;
    match e {
        E::Parse(p) => ParseError::new_err(p.to_string()),
        E::Io { .. } => file_error(e.to_string()),
        E::Invalid(msg) => InvalidIrError::new_err(msg),
        E::Plan(_) | E::SeamMismatch(_) | E::Cycle(_) | E::Conflict(_) => {
            StitchError::new_err(e.to_string())
        }
        E::Collective(_) => CollectiveRewriteError::new_err(e.to_string()),
    }
}

/// Map a PJRT runtime error to its Python exception.
pub fn pjrt_to_py(e: pjrt_client::Error) -> PyErr {
    use pjrt_client::Error as E;
    let msg = e.to_string();
    match e {
        E::PluginNotFound { .. } | E::NoPluginFound { .. } => PluginNotFoundError::new_err(msg),
        E::PluginLoad { .. } | E::NotAPjrtPlugin { .. } | E::IncompatibleApi { .. } => {
            PluginLoadError::new_err(msg)
        }
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
            None => file_error(msg),
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
