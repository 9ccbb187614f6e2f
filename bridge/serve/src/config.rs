//! [`ServeConfig`]: address, limits, batching, draining and security
//! settings, with the checks that a non-loopback address has a bearer
//! token and that the limits are consistent. Every default is documented in
//! docs/deploy.md ("Limits").

use crate::auth::Token;
use crate::error::ServeError;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Server settings (the CLI's flags).
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where to listen (default `127.0.0.1:8500`).
    pub addr: SocketAddr,
    /// File holding the bearer token clients must send; required for a
    /// non-loopback address.
    pub token_file: Option<PathBuf>,
    /// Batch requests along the manifest's batch dim.
    pub batching: bool,
    /// How long the first request of a batch waits for more.
    pub max_delay: Duration,
    /// Requests waiting for execution before new ones get `RESOURCE_EXHAUSTED`.
    pub max_queue: usize,
    /// Largest request message in bytes (`OUT_OF_RANGE` beyond).
    pub max_message_bytes: usize,
    /// Per-request deadline, from the stream opening to the response (a
    /// shorter client `grpc-timeout` wins); `DEADLINE_EXCEEDED` beyond.
    pub deadline: Duration,
    /// Time from a stream opening to its request having fully arrived
    /// (`DEADLINE_EXCEEDED` beyond): a client that never finishes sending
    /// cannot hold a stream, its bytes or the shutdown.
    pub request_timeout: Duration,
    /// Request bytes held by all streams together, arrived or arriving
    /// (`RESOURCE_EXHAUSTED` beyond): memory is bounded by this, not by
    /// the number of clients. At least `max_message_bytes`.
    pub max_inflight_bytes: usize,
    /// HTTP/2 streams one connection may have open at once.
    pub max_concurrent_streams: u32,
    /// Connections open at once; one more is closed as soon as it is
    /// accepted.
    pub max_connections: usize,
    /// HTTP/2 keepalive: a PING after this long without frames...
    pub keepalive_interval: Duration,
    /// ...and the connection is closed if it is not answered within this.
    pub keepalive_timeout: Duration,
    /// A connection with no stream open for this long is closed (GOAWAY).
    pub idle_timeout: Duration,
    /// After SIGTERM: how long requests in flight may take to finish; then
    /// the server exits anyway.
    pub drain_timeout: Duration,
    /// PJRT plugin path (default: discovery).
    pub plugin: Option<PathBuf>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            addr: SocketAddr::from(([127, 0, 0, 1], 8500)),
            token_file: None,
            batching: false,
            max_delay: Duration::from_millis(2),
            max_queue: 256,
            max_message_bytes: 64 << 20,
            deadline: Duration::from_secs(30),
            request_timeout: Duration::from_secs(10),
            max_inflight_bytes: 256 << 20,
            max_concurrent_streams: 64,
            max_connections: 256,
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            drain_timeout: Duration::from_secs(30),
            plugin: None,
        }
    }
}

impl ServeConfig {
    /// Checks the settings and reads the token: a non-loopback address
    /// without a token file is refused, and so are limits that cannot work.
    pub fn security(&self) -> Result<Option<Token>, ServeError> {
        let token = match &self.token_file {
            Some(p) => Some(Token::from_file(p)?),
            None => None,
        };
        if !self.addr.ip().is_loopback() && token.is_none() {
            return Err(ServeError::Config(format!(
                "refusing to listen on {} (not loopback) without --token-file: anyone who can reach it could run the model",
                self.addr
            )));
        }
        let positive = [
            (self.max_queue == 0, "--max-queue"),
            (self.max_concurrent_streams == 0, "--max-concurrent-streams"),
            (self.max_connections == 0, "--max-connections"),
            (self.request_timeout.is_zero(), "--request-timeout-ms"),
            (self.deadline.is_zero(), "--deadline-ms"),
        ];
        if let Some((_, flag)) = positive.iter().find(|(bad, _)| *bad) {
            return Err(ServeError::Config(format!("{flag} must be at least 1")));
        }
        if self.max_inflight_bytes < self.max_message_bytes {
            return Err(ServeError::Config(format!(
                "--max-inflight-bytes ({}) must be at least --max-message-bytes ({})",
                self.max_inflight_bytes, self.max_message_bytes
            )));
        }
        Ok(token)
    }
}
