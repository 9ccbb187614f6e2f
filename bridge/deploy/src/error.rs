//! The crate's single error type. Messages name the artifact's own inputs
//! and files, never the bytes or values of a request.

use std::path::PathBuf;

/// Everything that can go wrong loading or running an artifact.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// A file of the artifact could not be read.
    #[error("artifact file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `manifest.json` is not a valid manifest.
    #[error("manifest.json: {0}")]
    Manifest(String),
    /// The content hash in the manifest does not match the files.
    #[error("content hash mismatch: the manifest says {expected}, the files hash to {actual} (the artifact was modified or truncated)")]
    HashMismatch {
        /// The manifest's hash.
        expected: String,
        /// The files' hash.
        actual: String,
    },
    /// The artifact was written by an incompatible format or hlobridge version.
    #[error("version mismatch: {0}")]
    Version(String),
    /// `weights.safetensors` is malformed.
    #[error("safetensors: {0}")]
    Safetensors(String),
    /// A request input does not fit the model.
    #[error("{0}")]
    BadInput(String),
    /// The PJRT plugin failed (load, compile, transfer or execute).
    #[error("pjrt: {0}")]
    Pjrt(#[from] pjrt_client::Error),
}

/// Result alias for this crate.
pub type Result<T, E = DeployError> = std::result::Result<T, E>;
