//! `hlobridge serve ARTIFACT`: serve an exported artifact over gRPC
//! (`hlobridge_serve`; docs/deploy.md).

use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Flags of `hlobridge serve`.
#[derive(Args)]
pub struct ServeArgs {
    /// The artifact directory written by `hlobridge.export`.
    artifact: PathBuf,
    /// Address to listen on (loopback by default; port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:8500")]
    addr: SocketAddr,
    /// File with the bearer token clients must send (required for a
    /// non-loopback address).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Batch concurrent requests along the manifest's batch dim.
    #[arg(long)]
    batching: bool,
    /// How long a batch waits for more requests, in microseconds.
    #[arg(long, default_value_t = 2000)]
    max_delay_us: u64,
    /// Requests queued before new ones get RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = 256)]
    max_queue: usize,
    /// Largest request message, in bytes.
    #[arg(long, default_value_t = 64 << 20)]
    max_message_bytes: usize,
    /// Per-request deadline in milliseconds (a shorter client deadline wins).
    #[arg(long, default_value_t = 30_000)]
    deadline_ms: u64,
    /// PJRT plugin (default: discovery).
    #[arg(long)]
    plugin: Option<PathBuf>,
}

/// Runs the server until SIGTERM/SIGINT.
pub fn run(a: ServeArgs) -> Result<(), String> {
    let cfg = hlobridge_serve::ServeConfig {
        addr: a.addr,
        token_file: a.token_file,
        batching: a.batching,
        max_delay: Duration::from_micros(a.max_delay_us),
        max_queue: a.max_queue,
        max_message_bytes: a.max_message_bytes,
        deadline: Duration::from_millis(a.deadline_ms),
        plugin: a.plugin,
    };
    hlobridge_serve::run(&a.artifact, &cfg).map_err(|e| format!("hlobridge serve: {e}"))
}
