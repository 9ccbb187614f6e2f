//! Wiring: [`serve`] runs the service on a bound listener until a shutdown
//! future resolves, then drains; [`run`] is the CLI's entry: load, bind,
//! print the address, serve until SIGTERM/SIGINT.
//!
//! Connections are accepted here (not by tonic's server), so that:
//!
//! - at most `max_connections` are open: one more is closed as soon as it
//!   is accepted;
//! - each is served as HTTP/2 with keepalive PINGs, at most
//!   `max_concurrent_streams` streams, and closed (GOAWAY) after
//!   `idle_timeout` without a stream open;
//! - every request passes through the [`Gate`] (deadline, request timeout,
//!   size, in-flight bytes, draining, the log line).
//!
//! Shutdown drains: the listener is closed at once (new connections are
//! refused by the OS), health answers NOT_SERVING on the connections that
//! stay open, new Predict calls get UNAVAILABLE, the requests in flight
//! finish; then every connection gets a GOAWAY. After `drain_timeout` the
//! server returns whatever is still running.

use crate::config::ServeConfig;
use crate::error::ServeError;
use crate::gate::{Gate, Limits, Shared};
use crate::pb::predictor_server::PredictorServer;
use crate::service::PredictorService;
use crate::worker;
use hlobridge_deploy::{LoadOptions, Model};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::future::Future;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tonic_health::ServingStatus;

/// The service name the health service reports.
pub const SERVICE_NAME: &str = "hlobridge.serve.v1.Predictor";

/// Per-connection HTTP/2 settings.
#[derive(Debug, Clone)]
struct ConnSettings {
    keepalive_interval: Duration,
    keepalive_timeout: Duration,
    max_concurrent_streams: u32,
    idle_timeout: Duration,
}

/// A connection's open streams and when the last one ended.
struct Activity {
    open: AtomicUsize,
    last: Mutex<Instant>,
}

/// Counts one open stream while it lives.
struct Open(Arc<Activity>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
        if let Ok(mut l) = self.0.last.lock() {
            *l = Instant::now();
        }
    }
}

/// Serves one connection until it ends, it idles past `idle_timeout`, or
/// `close` says the server is going.
async fn serve_conn(
    stream: TcpStream,
    svc: Gate<tonic::service::Routes>,
    settings: ConnSettings,
    mut close: watch::Receiver<bool>,
    _permit: OwnedSemaphorePermit,
) {
    use tower_service::Service;
    let activity = Arc::new(Activity {
        open: AtomicUsize::new(0),
        last: Mutex::new(Instant::now()),
    });
    let act = activity.clone();
    let hyper_svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let mut svc = svc.clone();
        act.open.fetch_add(1, Ordering::SeqCst);
        let open = Open(act.clone());
        async move {
            let r = svc.call(req.map(tonic::body::boxed)).await;
            drop(open);
            r
        }
    });
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(settings.keepalive_interval))
        .keep_alive_timeout(settings.keepalive_timeout)
        .max_concurrent_streams(settings.max_concurrent_streams)
        .max_header_list_size(64 << 10);
    let conn = builder.serve_connection(TokioIo::new(stream), hyper_svc);
    tokio::pin!(conn);
    let tick = (settings.idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    let mut ticker = tokio::time::interval(tick);
    // After a GOAWAY, how long the connection may take to close on its own.
    let mut closing: Option<tokio::time::Instant> = None;
    const GRACE: Duration = Duration::from_secs(2);
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended");
                }
                return;
            }
            _ = close.changed(), if closing.is_none() => {
                conn.as_mut().graceful_shutdown();
                closing = Some(tokio::time::Instant::now() + GRACE);
            }
            _ = ticker.tick() => {
                if let Some(t) = closing {
                    if tokio::time::Instant::now() >= t {
                        return; // dropping the connection closes it
                    }
                    continue;
                }
                let idle = activity.open.load(Ordering::SeqCst) == 0
                    && activity.last.lock().map(|l| l.elapsed() >= settings.idle_timeout).unwrap_or(false);
                if idle {
                    tracing::debug!("closing an idle connection");
                    conn.as_mut().graceful_shutdown();
                    closing = Some(tokio::time::Instant::now() + GRACE);
                }
            }
        }
    }
}

/// Waits until the worker stops (its [`worker::Liveness`] turns false or its
/// sender is gone), then reports NOT_SERVING for the service and the server.
async fn report_when_stopped(
    mut alive: worker::Liveness,
    mut reporter: tonic_health::server::HealthReporter,
) {
    while alive.changed().await.is_ok() {
        if !*alive.borrow() {
            break;
        }
    }
    tracing::error!("the execution thread stopped: health is NOT_SERVING");
    not_serving(&mut reporter).await;
}

/// Health says NOT_SERVING for the service and for the server as a whole.
async fn not_serving(reporter: &mut tonic_health::server::HealthReporter) {
    reporter
        .set_service_status(SERVICE_NAME, ServingStatus::NotServing)
        .await;
    reporter
        .set_service_status("", ServingStatus::NotServing)
        .await;
}

/// Serves `model` on `listener` until `shutdown` resolves, then drains (see
/// the module docs) and returns.
pub async fn serve(
    model: Arc<Model>,
    cfg: &ServeConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let token = cfg.security()?;
    if cfg.batching && model.manifest().rows_independent == Some(false) {
        return Err(ServeError::Config(format!(
            "--batching refused for this artifact: {}",
            model
                .manifest()
                .batching_refused
                .as_deref()
                .unwrap_or("the exporter found that its output rows are not independent")
        )));
    }
    let (queue, worker, alive) =
        worker::start(model.clone(), cfg.max_queue, cfg.batching, cfg.max_delay).map_err(
            |source| ServeError::Io {
                context: "starting the worker thread".into(),
                source,
            },
        )?;
    let (mut reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status(SERVICE_NAME, ServingStatus::Serving)
        .await;
    // The worker gone means the model cannot run: say so.
    let watcher = tokio::spawn(report_when_stopped(alive, reporter.clone()));
    let predictor = PredictorServer::new(PredictorService::new(model, queue))
        .max_decoding_message_size(cfg.max_message_bytes)
        .max_encoding_message_size(usize::MAX);
    #[allow(clippy::result_large_err)] // tonic's Interceptor signature
    let check = move |req: tonic::Request<()>| match &token {
        Some(t) => t.check(req),
        None => Ok(req),
    };
    let predictor = tonic::service::interceptor::InterceptedService::new(predictor, check);
    let routes = tonic::service::Routes::new(health)
        .add_service(predictor)
        .prepare();
    let shared = Shared::new(Limits {
        deadline: cfg.deadline,
        request_timeout: cfg.request_timeout,
        max_message_bytes: cfg.max_message_bytes,
        max_inflight_bytes: cfg.max_inflight_bytes,
    });
    let gate = Gate::new(routes, shared.clone());
    let settings = ConnSettings {
        keepalive_interval: cfg.keepalive_interval,
        keepalive_timeout: cfg.keepalive_timeout,
        max_concurrent_streams: cfg.max_concurrent_streams,
        idle_timeout: cfg.idle_timeout,
    };
    let slots = Arc::new(Semaphore::new(cfg.max_connections));
    let (close_tx, close_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            r = listener.accept() => {
                let (stream, _peer) = match r {
                    Ok(x) => x,
                    Err(e) => {
                        // Out of descriptors and the like: back off, go on.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    tracing::warn!(max = cfg.max_connections, "connection limit reached: closing a new connection");
                    drop(stream);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                conns.spawn(serve_conn(stream, gate.clone(), settings.clone(), close_rx.clone(), permit));
            }
        }
    }
    // Drain.
    drop(listener);
    let hard = tokio::time::Instant::now() + cfg.drain_timeout;
    shared.start_draining();
    not_serving(&mut reporter).await;
    tracing::info!(
        in_flight = shared.in_flight(),
        "shutting down: listener closed, draining requests in flight"
    );
    let drained = tokio::time::timeout_at(hard, shared.idle()).await.is_ok();
    let _ = close_tx.send(true);
    let closed = tokio::time::timeout_at(
        hard.max(tokio::time::Instant::now() + Duration::from_secs(3)),
        async { while conns.join_next().await.is_some() {} },
    )
    .await
    .is_ok();
    conns.abort_all();
    watcher.abort();
    drop(gate);
    if drained && closed {
        // Every queue handle is gone: the worker finishes and exits.
        let _ = tokio::task::spawn_blocking(move || worker.join()).await;
    } else {
        tracing::warn!(
            in_flight = shared.in_flight(),
            "drain deadline passed: exiting with requests still in flight"
        );
    }
    Ok(())
}

/// Loads `artifact`, listens on `cfg.addr`, prints
/// `hlobridge serve: listening on ADDR` to stdout, and serves until SIGTERM
/// or SIGINT.
pub fn run(artifact: &Path, cfg: &ServeConfig) -> Result<(), ServeError> {
    cfg.security()?;
    let model = Arc::new(Model::load_with(
        artifact,
        &LoadOptions {
            plugin: cfg.plugin.clone(),
        },
    )?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| ServeError::Io {
            context: "starting the runtime".into(),
            source,
        })?;
    let r = rt.block_on(async {
        let listener = TcpListener::bind(cfg.addr)
            .await
            .map_err(|source| ServeError::Io {
                context: format!("binding {}", cfg.addr),
                source,
            })?;
        let local = listener.local_addr().map_err(|source| ServeError::Io {
            context: "local address".into(),
            source,
        })?;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "hlobridge serve: listening on {local}");
        let _ = out.flush();
        drop(out);
        serve(model, cfg, listener, shutdown_signal()).await
    });
    // Do not wait for a worker stuck past the drain deadline.
    rt.shutdown_timeout(Duration::from_millis(500));
    r
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => {},
                _ = i.recv() => {},
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    tracing::info!("signal received: shutting down");
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_health::pb::health_check_response::ServingStatus as S;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn health_says_not_serving_once_the_worker_stops() {
        let (mut reporter, health) = tonic_health::server::health_reporter();
        reporter
            .set_service_status(SERVICE_NAME, ServingStatus::Serving)
            .await;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(health)
                .serve_with_incoming(tokio_stream_listener(listener)),
        );
        let ch = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut c = HealthClient::new(ch);
        let status = |c: &mut HealthClient<tonic::transport::Channel>| {
            let mut c = c.clone();
            async move {
                c.check(HealthCheckRequest {
                    service: SERVICE_NAME.into(),
                })
                .await
                .unwrap()
                .into_inner()
                .status
            }
        };
        assert_eq!(status(&mut c).await, S::Serving as i32);
        // A worker thread that dies (here: unwinds) flips its liveness.
        let (tx, rx) = watch::channel(true);
        let watcher = tokio::spawn(report_when_stopped(rx, reporter.clone()));
        let t = std::thread::spawn(move || {
            let _alive = tx;
            panic!("the worker dies");
        });
        assert!(t.join().is_err());
        watcher.await.unwrap();
        assert_eq!(status(&mut c).await, S::NotServing as i32);
    }

    fn tokio_stream_listener(
        l: TcpListener,
    ) -> impl tokio_stream::Stream<Item = std::io::Result<TcpStream>> {
        tokio_stream::wrappers::TcpListenerStream::new(l)
    }
}
