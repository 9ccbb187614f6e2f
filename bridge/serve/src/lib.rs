//! The gRPC service behind `hlobridge serve ARTIFACT`: a tonic server that
//! runs an exported artifact ([`hlobridge_deploy::Model`]).
//!
//! - `hlobridge.serve.v1.Predictor/Predict` (named tensors in and out) and
//!   `/Metadata` (the manifest), from `proto/proto/serve.proto`;
//! - the standard gRPC health service (`grpc.health.v1.Health`);
//! - a bounded queue in front of one execution thread (`RESOURCE_EXHAUSTED`
//!   when full), a maximum request size, a per-request deadline (the
//!   server's, or the client's `grpc-timeout` if shorter);
//! - optional dynamic batching along the manifest's batch dim
//!   ([`worker`]);
//! - loopback by default; any other address needs a bearer token read from
//!   a file and compared in constant time ([`auth`]);
//! - graceful shutdown on SIGTERM/SIGINT: stop accepting, finish the
//!   requests in flight, then exit.
//!
//! Error messages name only the artifact's own inputs, never request data.

pub mod auth;
pub mod config;
pub mod error;
pub mod server;
pub mod service;
pub mod worker;

/// The generated protobuf messages, server and client.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("hlobridge.serve.v1");
}

pub use config::ServeConfig;
pub use error::ServeError;
pub use server::{run, serve};
