//! [`ServeConfig`]: address, limits, batching and security settings, with
//! the check that a non-loopback address has a bearer token.

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
    /// Largest request message in bytes.
    pub max_message_bytes: usize,
    /// Per-request deadline (a shorter client `grpc-timeout` wins).
    pub deadline: Duration,
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
            plugin: None,
        }
    }
}

impl ServeConfig {
    /// Checks the settings and reads the token: a non-loopback address
    /// without a token file is refused.
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
        if self.max_queue == 0 {
            return Err(ServeError::Config("--max-queue must be at least 1".into()));
        }
        Ok(token)
    }
}
