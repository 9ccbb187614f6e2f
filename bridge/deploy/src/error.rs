//! The crate's single error type. Messages name the artifact's own inputs
//! and files, never the bytes or values of a request.

/// Everything that can go wrong loading or running an artifact.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The artifact is unreadable, refused or inconsistent (files, manifest,
    /// hash, versions, weights: [`hlobridge_artifact::ArtifactError`]).
    #[error(transparent)]
    Artifact(#[from] hlobridge_artifact::ArtifactError),
    /// A request input does not fit the model.
    #[error("{0}")]
    BadInput(String),
    /// A request's shapes break a dynamic artifact's constraints: the
    /// manifest's (a symbol's range, inputs that share a symbol) or the
    /// module's own shape assertions (checked by the refinement). Names the
    /// dimension and the constraint.
    #[error("shape constraint violated: {dim} must satisfy {constraint} ({message})")]
    ShapeConstraint {
        /// The dimension (`input x dim 0`, or the module's `args[1].shape[0]`
        /// / dimension variable).
        dim: String,
        /// The constraint (`batch >= 2`).
        constraint: String,
        /// The whole message.
        message: String,
    },
    /// The program ran but its results do not fit the manifest (a result
    /// without the batch rows the request needs, a wrong dtype), or the
    /// execution panicked.
    #[error("execution: {0}")]
    Execution(String),
    /// The PJRT plugin failed (load, compile, transfer or execute).
    #[error("pjrt: {0}")]
    Pjrt(#[from] pjrt_client::Error),
}

/// Result alias for this crate.
pub type Result<T, E = DeployError> = std::result::Result<T, E>;
