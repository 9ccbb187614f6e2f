//! The crate's single error type.

use crate::dtype::ElementType;
use std::path::PathBuf;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Status codes carried by PJRT errors (absl status codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// Not an error.
    Ok,
    /// Operation cancelled.
    Cancelled,
    /// Unknown error.
    Unknown,
    /// Bad argument.
    InvalidArgument,
    /// Deadline exceeded.
    DeadlineExceeded,
    /// Something was not found.
    NotFound,
    /// Something already exists.
    AlreadyExists,
    /// Permission denied.
    PermissionDenied,
    /// Out of memory or another resource.
    ResourceExhausted,
    /// Operation attempted in a wrong state.
    FailedPrecondition,
    /// Aborted.
    Aborted,
    /// Out of range.
    OutOfRange,
    /// Not implemented by the plugin.
    Unimplemented,
    /// Internal plugin error.
    Internal,
    /// Unavailable.
    Unavailable,
    /// Data loss.
    DataLoss,
    /// Unauthenticated.
    Unauthenticated,
    /// A code this crate does not know.
    Other(i32),
}

impl ErrorCode {
    /// Converts a raw `PJRT_Error_Code`.
    pub fn from_raw(code: i32) -> Self {
        use ErrorCode::*;
        match code {
            0 => Ok,
            1 => Cancelled,
            2 => Unknown,
            3 => InvalidArgument,
            4 => DeadlineExceeded,
            5 => NotFound,
            6 => AlreadyExists,
            7 => PermissionDenied,
            8 => ResourceExhausted,
            9 => FailedPrecondition,
            10 => Aborted,
            11 => OutOfRange,
            12 => Unimplemented,
            13 => Internal,
            14 => Unavailable,
            15 => DataLoss,
            16 => Unauthenticated,
            c => Other(c),
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// Every error this crate returns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugin file does not exist.
    #[error("PJRT plugin not found: {path} does not exist")]
    PluginNotFound {
        /// Path that was tried.
        path: PathBuf,
    },
    /// Discovery found no plugin at all.
    #[error("no PJRT plugin found; searched: {searched}. Set HLOBRIDGE_PLUGIN=/path/to/plugin.so or install a PJRT plugin wheel (e.g. `make` sets up .venv with xla-cpu-pjrt)")]
    NoPluginFound {
        /// Human readable list of the places that were searched.
        searched: String,
    },
    /// `dlopen` failed.
    #[error("failed to load PJRT plugin {path}: {message}")]
    PluginLoad {
        /// Plugin path.
        path: PathBuf,
        /// Loader message.
        message: String,
    },
    /// The shared library does not export `GetPjrtApi`.
    #[error("{path} is not a PJRT plugin: it does not export the `GetPjrtApi` symbol")]
    NotAPjrtPlugin {
        /// Library path.
        path: PathBuf,
    },
    /// The plugin's API table is unusable (null, too small, wrong major).
    #[error("PJRT plugin {path} has an incompatible API: {reason}")]
    IncompatibleApi {
        /// Plugin path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The plugin's function table does not contain a function we need.
    #[error("PJRT plugin does not provide {function} (API table too old or entry is null)")]
    Unsupported {
        /// C function name.
        function: &'static str,
    },
    /// A PJRT C API call returned an error.
    #[error("{function} failed ({code}): {message}")]
    Pjrt {
        /// C function that failed.
        function: &'static str,
        /// Status code.
        code: ErrorCode,
        /// Plugin message.
        message: String,
    },
    /// Wrong number of arguments for an executable.
    #[error("wrong number of arguments: executable expects {expected}, got {got}")]
    ArgumentCount {
        /// Expected count.
        expected: usize,
        /// Given count.
        got: usize,
    },
    /// Wrong number of per-device argument lists.
    #[error("wrong number of devices: executable runs on {expected} device(s), got argument lists for {got}")]
    DeviceCount {
        /// Expected device count.
        expected: usize,
        /// Given count.
        got: usize,
    },
    /// Argument shape mismatch.
    #[error("argument {index}: shape mismatch: expected {expected:?}, got {got:?}")]
    ArgumentShape {
        /// Argument index.
        index: usize,
        /// Expected dims.
        expected: Vec<i64>,
        /// Given dims.
        got: Vec<i64>,
    },
    /// Argument element type mismatch.
    #[error("argument {index}: dtype mismatch: expected {expected}, got {got}")]
    ArgumentDtype {
        /// Argument index.
        index: usize,
        /// Expected element type.
        expected: ElementType,
        /// Given element type.
        got: ElementType,
    },
    /// A buffer was used after being deleted or donated.
    #[error("buffer used after it was deleted or donated ({context})")]
    BufferDeleted {
        /// Where it was used.
        context: String,
    },
    /// Host data does not match shape and element type.
    #[error("host data has {got} bytes but shape {dims:?} of {dtype} needs {expected}")]
    HostSize {
        /// Dims.
        dims: Vec<i64>,
        /// Element type.
        dtype: ElementType,
        /// Needed bytes.
        expected: usize,
        /// Given bytes.
        got: usize,
    },
    /// A type that cannot be used for this operation.
    #[error("unsupported element type {0} for this operation")]
    UnsupportedType(ElementType),
    /// Any other invalid input.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Protobuf decode failure.
    #[error("failed to decode {what}: {source}")]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// Cause.
        #[source]
        source: prost::DecodeError,
    },
    /// A compile target string names no known target (see
    /// [`crate::targets`]).
    #[error("UnknownTarget: {0}")]
    UnknownTarget(String),
    /// The compiler of an accelerator target is not installed.
    #[error("AcceleratorNotInstalled: {what} not found; searched {searched}. `HLOBRIDGE_ACCEL=1 scripts/setup.sh` installs it into .venv/accel")]
    AcceleratorNotInstalled {
        /// What is missing.
        what: &'static str,
        /// Where it was looked for.
        searched: String,
    },
    /// libtpu's load-time variables ([`crate::accel::TPU_LOAD_ENV`]) are
    /// missing and the process has several threads, so writing them would
    /// race with `getenv` elsewhere (see [`crate::accel::skip_tpu_metadata_query`]).
    #[error("TpuEnvironment: libtpu needs {missing} in the environment before it loads; this process has several threads, so hlobridge does not write them (setenv would race with getenv on another thread). Export them before starting the process")]
    TpuEnvironment {
        /// `NAME=value` pairs, space-separated.
        missing: String,
    },
    /// A program compiled for a target does not fit the device's memory
    /// (HBM, VMEM, shared memory): the compiler said so, or the compiled
    /// memory statistics exceed the capacity.
    #[error("OutOfMemory: the program does not fit {space} on {target}: needs {needed}, available {available}. Compiler: {message}")]
    OutOfMemory {
        /// Target string.
        target: String,
        /// `HBM`, `vmem`, `smem`, `shared memory`, `device memory`.
        space: String,
        /// Size needed, as the compiler wrote it (or `?`).
        needed: String,
        /// Size available.
        available: String,
        /// The compiler's message (or ours, for the post-compile check).
        message: String,
    },
    /// I/O error (e.g. reading a module or plugin discovery).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// The size in bytes of the allocation that failed, when this error is
    /// an out-of-memory report: the CPU plugin's own ("Out of memory
    /// allocating N bytes.", code `ResourceExhausted` for buffers, or
    /// `Internal` with "Error preparing computation: ..." for a program's
    /// temporaries) or this crate's host allocations (same wording, code
    /// `ResourceExhausted`).
    pub fn out_of_memory_bytes(&self) -> Option<u64> {
        let Error::Pjrt { message, .. } = self else {
            return None;
        };
        const KEY: &str = "Out of memory allocating ";
        let rest = &message[message.find(KEY)? + KEY.len()..];
        let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
        rest[digits.len()..]
            .starts_with(" bytes")
            .then(|| digits.parse().ok())
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_sizes_are_read_from_the_message() {
        let e = |code, message: &str| Error::Pjrt {
            function: "f",
            code,
            message: message.into(),
        };
        assert_eq!(
            e(
                ErrorCode::ResourceExhausted,
                "Out of memory allocating 68719476736 bytes."
            )
            .out_of_memory_bytes(),
            Some(68719476736)
        );
        assert_eq!(
            e(
                ErrorCode::Internal,
                "Error preparing computation: Out of memory allocating 8858370048 bytes."
            )
            .out_of_memory_bytes(),
            Some(8858370048)
        );
        assert_eq!(e(ErrorCode::Internal, "boom").out_of_memory_bytes(), None);
        assert_eq!(
            e(ErrorCode::Internal, "Out of memory allocating lots").out_of_memory_bytes(),
            None
        );
        assert_eq!(
            Error::InvalidArgument("x".into()).out_of_memory_bytes(),
            None
        );
    }
}
