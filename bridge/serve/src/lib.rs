//! The gRPC service behind `hlobridge serve ARTIFACT`: a tonic server that
//! runs an exported artifact ([`hlobridge_deploy::Model`]).
//!
//! - `hlobridge.serve.v1.Predictor/Predict` (named tensors in and out) and
//!   `/Metadata` (the manifest), from `proto/proto/serve.proto`;
//! - the standard gRPC health service (`grpc.health.v1.Health`);
//! - a bounded queue in front of one execution thread (`RESOURCE_EXHAUSTED`
//!   when full) that survives a failing or panicking execution
//!   ([`worker`]); optional dynamic batching along the manifest's batch
//!   dim, only for artifacts whose rows the exporter found independent;
//! - resource bounds on every request and connection ([`gate`],
//!   [`server`]): deadline (`DEADLINE_EXCEEDED`, always), time to receive
//!   the request, request size, a total in-flight bytes budget, HTTP/2
//!   keepalive, streams per connection, connections, idle connections;
//! - loopback by default; any other address needs a bearer token read from
//!   a file and compared in constant time ([`auth`]);
//! - draining on SIGTERM/SIGINT: the listener closes at once, health says
//!   NOT_SERVING, requests in flight finish, a hard drain deadline;
//! - one structured log line per request through `tracing`.
//!
//! Error messages name only the artifact's own inputs, never request data.

pub mod auth;
pub mod config;
pub mod error;
pub mod gate;
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
