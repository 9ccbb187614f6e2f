//! Run an exported hlobridge artifact from Rust, with no Python.
//!
//! An artifact (written by `hlobridge.export`, docs/deploy.md) is a
//! directory with the stitched StableHLO module(s), `weights.safetensors`
//! and `manifest.json`; its format is defined in [`hlobridge_artifact`]
//! (re-exported here as [`manifest`], [`safetensors`], [`writer`]).
//! [`Model::load`] reads it through [`hlobridge_artifact::read_artifact`]
//! (regular files only, sizes capped, the content hash checked over the
//! bytes read), compiles each module variant through the compile service
//! ([`hlobridge_compile`], as the Python runtime does) and binds the weights on the device once;
//! [`Model::run`] executes named host tensors. A dynamic artifact (ONE
//! module with `?` dims) is refined per request shape by the core's
//! refinement pass and compiled once per shape ([`shapes`]).
//!
//! ```no_run
//! use hlobridge_deploy::{Model, TensorRef};
//! use pjrt_client::ElementType;
//! let model = Model::load("artifact")?;
//! let x = vec![0u8; 8 * 16 * 4];
//! let outs = model.run(&[("x", TensorRef { dtype: ElementType::F32, shape: &[8, 16], data: &x })])?;
//! # Ok::<(), hlobridge_deploy::DeployError>(())
//! ```

pub mod batching;
pub mod error;
pub mod model;
pub mod shapes;
#[cfg(feature = "tch")]
pub mod tch_io;

pub use hlobridge_artifact::{manifest, safetensors, writer, ArtifactError};

pub use error::{DeployError, Result};
pub use manifest::{Manifest, Output, Param};
pub use model::{LoadOptions, Model, Prepared, Tensor, TensorRef};
