//! The crate's single error type (startup errors; request errors are gRPC
//! statuses).

/// Why the server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The artifact could not be loaded.
    #[error("loading the artifact: {0}")]
    Load(#[from] hlobridge_deploy::DeployError),
    /// The configuration is refused (e.g. a public address without a token).
    #[error("{0}")]
    Config(String),
    /// Binding or serving failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The gRPC transport failed.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}
