//! The hlobridge artifact format, defined once (docs/deploy.md). Python's
//! `hlobridge.export` writes and reads artifacts through this crate (via
//! the extension), `hlobridge-deploy` runs them, and `hb.serve.Client`
//! encodes its gRPC messages with [`wire`].
//!
//! An artifact is a directory: the stitched StableHLO module(s) (one per
//! exported batch size; or ONE with `?` dims, refined per shape:
//! [`dynamic`]), the
//! weights as `safetensors` ([`safetensors`]), and `manifest.json`
//! ([`manifest`]: named inputs and outputs, versions, batch dim, file
//! sizes, the row-independence check, and a content hash over every
//! file). [`writer`] writes one; [`reader`] reads one defensively (regular
//! files only, sizes capped before reading, each file read once, the hash
//! and the weights checked).
//!
//! No pyo3 and no PJRT calls here: element types come from `pjrt-client`'s
//! [`pjrt_client::ElementType`] only.

pub mod dynamic;
pub mod error;
pub mod manifest;
pub mod reader;
pub mod safetensors;
pub mod wire;
pub mod writer;

pub use error::{ArtifactError, Result};
pub use manifest::{
    Dim, Dynamic, Manifest, ModuleFile, Output, Param, ShapeViolation, Symbol, FORMAT, FORMATS,
    FORMAT_DYNAMIC,
};
pub use reader::{read_artifact, Verified};
