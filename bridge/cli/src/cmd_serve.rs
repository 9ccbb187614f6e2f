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
    /// Time from a stream opening to its request having fully arrived, in
    /// milliseconds.
    #[arg(long, default_value_t = 10_000)]
    request_timeout_ms: u64,
    /// Request bytes all streams together may hold (RESOURCE_EXHAUSTED
    /// beyond); at least --max-message-bytes.
    #[arg(long, default_value_t = 256 << 20)]
    max_inflight_bytes: usize,
    /// HTTP/2 streams one connection may have open.
    #[arg(long, default_value_t = 64)]
    max_concurrent_streams: u32,
    /// Connections open at once (one more is closed at once).
    #[arg(long, default_value_t = 256)]
    max_connections: usize,
    /// HTTP/2 keepalive PING interval, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    keepalive_interval_ms: u64,
    /// Close a connection whose keepalive PING is not answered within this,
    /// in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    keepalive_timeout_ms: u64,
    /// Close a connection with no stream open for this long, in milliseconds.
    #[arg(long, default_value_t = 300_000)]
    idle_timeout_ms: u64,
    /// After SIGTERM, how long requests in flight may take to finish before
    /// the server exits anyway, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    drain_timeout_ms: u64,
    /// Log level or filter (`info` logs one line per request; default:
    /// HLOBRIDGE_LOG, else `warn`).
    #[arg(long)]
    log_level: Option<String>,
    /// PJRT plugin (default: discovery).
    #[arg(long)]
    plugin: Option<PathBuf>,
}

/// Installs the log subscriber `--log-level` asks for (before the CLI's
/// default one, which then stays out).
pub fn init_logging(a: &ServeArgs) {
    if let Some(level) = &a.log_level {
        match tracing_subscriber::EnvFilter::try_new(level) {
            Ok(filter) => {
                use std::io::IsTerminal;
                let _ = tracing_subscriber::fmt()
                    .with_env_filter(filter)
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::stderr().is_terminal())
                    .try_init();
            }
            Err(e) => eprintln!("hlobridge serve: --log-level {level:?} ignored: {e}"),
        }
    }
}

/// Runs the server until SIGTERM/SIGINT.
pub fn run(a: ServeArgs) -> crate::error::Result<()> {
    let cfg = hlobridge_serve::ServeConfig {
        addr: a.addr,
        token_file: a.token_file,
        batching: a.batching,
        max_delay: Duration::from_micros(a.max_delay_us),
        max_queue: a.max_queue,
        max_message_bytes: a.max_message_bytes,
        deadline: Duration::from_millis(a.deadline_ms),
        request_timeout: Duration::from_millis(a.request_timeout_ms),
        max_inflight_bytes: a.max_inflight_bytes,
        max_concurrent_streams: a.max_concurrent_streams,
        max_connections: a.max_connections,
        keepalive_interval: Duration::from_millis(a.keepalive_interval_ms),
        keepalive_timeout: Duration::from_millis(a.keepalive_timeout_ms),
        idle_timeout: Duration::from_millis(a.idle_timeout_ms),
        drain_timeout: Duration::from_millis(a.drain_timeout_ms),
        plugin: a.plugin,
    };
    hlobridge_serve::run(&a.artifact, &cfg)
        .map_err(|e| crate::error::CliError::Serve(e.to_string()))
}
