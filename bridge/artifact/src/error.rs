//! The crate's single error type. Messages name the artifact's own files
//! and tensors, never request values.

use std::path::PathBuf;

/// Everything that can be wrong with an artifact or a wire message.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// A file of the artifact could not be read or written.
    #[error("artifact file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file of the artifact is refused before it is read: a symlink,
    /// not a regular file, or larger than the manifest (or a fixed cap) allows.
    #[error("artifact file {path}: {reason}")]
    Refused {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
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
    /// `weights.safetensors` is malformed or disagrees with the manifest.
    #[error("safetensors: {0}")]
    Safetensors(String),
    /// A protobuf message of serve.proto is malformed.
    #[error("malformed message: {0}")]
    Wire(String),
}

/// Result alias for this crate.
pub type Result<T, E = ArtifactError> = std::result::Result<T, E>;
