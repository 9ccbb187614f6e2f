//! Wiring: [`serve`] runs the service on a bound listener until a shutdown
//! future resolves (then drains the requests in flight); [`run`] is the
//! CLI's entry: load, bind, print the address, serve until SIGTERM/SIGINT.

use crate::config::ServeConfig;
use crate::error::ServeError;
use crate::pb::predictor_server::PredictorServer;
use crate::service::PredictorService;
use crate::worker;
use hlobridge_deploy::{LoadOptions, Model};
use std::future::Future;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic_health::ServingStatus;

/// The service name the health service reports.
pub const SERVICE_NAME: &str = "hlobridge.serve.v1.Predictor";

/// Serves `model` on `listener` until `shutdown` resolves, then stops
/// accepting, finishes the requests in flight and returns.
pub async fn serve(
    model: Arc<Model>,
    cfg: &ServeConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let token = cfg.security()?;
    let (queue, worker) = worker::start(model.clone(), cfg.max_queue, cfg.batching, cfg.max_delay);
    let (mut reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status(SERVICE_NAME, ServingStatus::Serving)
        .await;
    let svc = PredictorServer::new(PredictorService::new(model, queue, cfg.deadline))
        .max_decoding_message_size(cfg.max_message_bytes);
    #[allow(clippy::result_large_err)] // tonic's Interceptor signature
    let check = move |req: tonic::Request<()>| match &token {
        Some(t) => t.check(req),
        None => Ok(req),
    };
    let svc = tonic_interceptor(svc, check);
    let mut stop_reporter = reporter.clone();
    let result = tonic::transport::Server::builder()
        .add_service(health)
        .add_service(svc)
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async move {
            shutdown.await;
            stop_reporter
                .set_service_status(SERVICE_NAME, ServingStatus::NotServing)
                .await;
            stop_reporter
                .set_service_status("", ServingStatus::NotServing)
                .await;
        })
        .await;
    // The server (and with it every queue handle) is gone: the worker
    // drains what is left and exits.
    let _ = tokio::task::spawn_blocking(move || worker.join()).await;
    result.map_err(ServeError::from)
}

fn tonic_interceptor<S, F>(svc: S, f: F) -> tonic::service::interceptor::InterceptedService<S, F>
where
    F: tonic::service::Interceptor,
{
    tonic::service::interceptor::InterceptedService::new(svc, f)
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
    rt.block_on(async {
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
    })
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
    tracing::info!("shutting down: draining requests in flight");
}
