//! [`Gate`]: what every request passes through before and after the gRPC
//! services, at the HTTP level:
//!
//! - the deadline: the client's `grpc-timeout` (taken off the request, so
//!   nothing else races it) or the server's, whichever is shorter, from the
//!   stream opening to the response; expiry is always `DEADLINE_EXCEEDED`;
//! - the request must have fully arrived within `request_timeout`
//!   (`DEADLINE_EXCEEDED`), and may be at most `max_message_bytes`
//!   (`OUT_OF_RANGE`, refused as soon as the bytes exceed it);
//! - the in-flight bytes budget: the bytes of every request held by the
//!   server (arriving, queued or running) count against
//!   `max_inflight_bytes`; a request that would exceed it is refused at
//!   once with `RESOURCE_EXHAUSTED`, and its bytes are released;
//! - draining: once shutdown starts, Predict/Metadata get `UNAVAILABLE`
//!   (health still answers: NOT_SERVING);
//! - one structured log line per request (target `hlobridge_serve::request`,
//!   level INFO): method, status, batch, queue and run time, total time;
//!   never request data.

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body_util::BodyExt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tonic::body::BoxBody;
use tonic::{Code, Status};

/// The health service's path prefix (always admitted, never counted as
/// in flight).
const HEALTH: &str = "/grpc.health.v1.Health/";

/// Parses a `grpc-timeout` header (`<1-8 digits><H|M|S|m|u|n>`).
pub fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (n, unit) = v.split_at(v.len() - 1);
    if !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// What the service reports about a request for its log line.
#[derive(Debug)]
pub struct RequestLog {
    batch: AtomicI64,
    queue_us: AtomicU64,
    run_us: AtomicU64,
    batched_with: AtomicUsize,
}

impl Default for RequestLog {
    fn default() -> Self {
        RequestLog {
            batch: AtomicI64::new(-1),
            queue_us: AtomicU64::new(u64::MAX),
            run_us: AtomicU64::new(u64::MAX),
            batched_with: AtomicUsize::new(0),
        }
    }
}

impl RequestLog {
    /// The request's batch size.
    pub fn set_batch(&self, b: i64) {
        self.batch.store(b, Ordering::Relaxed);
    }

    /// Its time queued and running, and how many requests ran with it.
    pub fn set_times(&self, queue: Duration, run: Duration, batched_with: usize) {
        self.queue_us
            .store(queue.as_micros() as u64, Ordering::Relaxed);
        self.run_us.store(run.as_micros() as u64, Ordering::Relaxed);
        self.batched_with.store(batched_with, Ordering::Relaxed);
    }
}

/// The limits the gate enforces (from [`crate::ServeConfig`]).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Server deadline.
    pub deadline: Duration,
    /// Stream open to request complete.
    pub request_timeout: Duration,
    /// Largest message.
    pub max_message_bytes: usize,
    /// Bytes held by all requests together.
    pub max_inflight_bytes: usize,
}

/// State shared by every connection's gate.
#[derive(Debug)]
pub struct Shared {
    limits: Limits,
    inflight_bytes: AtomicUsize,
    inflight_requests: AtomicUsize,
    draining: std::sync::atomic::AtomicBool,
    idle: Notify,
}

impl Shared {
    /// Fresh state.
    pub fn new(limits: Limits) -> Arc<Shared> {
        Arc::new(Shared {
            limits,
            inflight_bytes: AtomicUsize::new(0),
            inflight_requests: AtomicUsize::new(0),
            draining: false.into(),
            idle: Notify::new(),
        })
    }

    /// Starts draining: new Predict/Metadata calls get `UNAVAILABLE`.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Requests (other than health checks) in flight now.
    pub fn in_flight(&self) -> usize {
        self.inflight_requests.load(Ordering::SeqCst)
    }

    /// Request bytes held now.
    pub fn inflight_bytes(&self) -> usize {
        self.inflight_bytes.load(Ordering::SeqCst)
    }

    /// Resolves when no request (other than health checks) is in flight.
    pub async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Counts a request in flight while it lives.
struct InFlight(Arc<Shared>);

impl InFlight {
    fn enter(s: &Arc<Shared>) -> InFlight {
        s.inflight_requests.fetch_add(1, Ordering::SeqCst);
        InFlight(s.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.inflight_requests.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Bytes of the budget held by one request; released when dropped.
struct Held {
    shared: Arc<Shared>,
    bytes: usize,
}

impl Held {
    /// Takes `n` more bytes of the budget, or refuses without taking any.
    fn take(&mut self, n: usize) -> bool {
        let budget = self.shared.limits.max_inflight_bytes;
        let mut cur = self.shared.inflight_bytes.load(Ordering::SeqCst);
        loop {
            let Some(next) = cur.checked_add(n).filter(|&v| v <= budget) else {
                return false;
            };
            match self.shared.inflight_bytes.compare_exchange_weak(
                cur,
                next,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    self.bytes += n;
                    return true;
                }
                Err(v) => cur = v,
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.shared
            .inflight_bytes
            .fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

enum ReadError {
    TooLarge,
    Budget,
    Body(String),
}

/// Reads the whole request body, taking each frame's bytes from the budget
/// as it arrives.
async fn read_body(mut body: BoxBody, held: &mut Held, max: usize) -> Result<Bytes, ReadError> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ReadError::Body(e.message().to_string()))?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > max {
                return Err(ReadError::TooLarge);
            }
            if !held.take(data.len()) {
                return Err(ReadError::Budget);
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

/// The gate in front of the gRPC routes (see the module docs).
#[derive(Clone)]
pub struct Gate<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> Gate<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, shared: Arc<Shared>) -> Self {
        Gate { inner, shared }
    }
}

impl tower_service::Service<Request<BoxBody>> for Gate<tonic::service::Routes> {
    type Response = Response<BoxBody>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<BoxBody>) -> Self::Future {
        // tonic's Routes are always ready.
        let inner = self.inner.clone();
        let shared = self.shared.clone();
        Box::pin(gate(inner, shared, req))
    }
}

async fn gate(
    mut inner: tonic::service::Routes,
    shared: Arc<Shared>,
    mut req: Request<BoxBody>,
) -> Result<Response<BoxBody>, std::convert::Infallible> {
    use tower_service::Service;
    let start = Instant::now();
    let method = req.uri().path().to_string();
    let health = method.starts_with(HEALTH);
    let client = req
        .headers_mut()
        .remove("grpc-timeout")
        .and_then(|v| v.to_str().ok().and_then(parse_grpc_timeout));
    let limits = &shared.limits;
    let deadline = client.map_or(limits.deadline, |t| t.min(limits.deadline));
    let until = tokio::time::Instant::from_std(start + deadline);
    let log = Arc::new(RequestLog::default());
    req.extensions_mut().insert(log.clone());
    let _in_flight = (!health).then(|| InFlight::enter(&shared));

    let result: Result<Response<BoxBody>, Status> = async {
        if !health && shared.draining.load(Ordering::SeqCst) {
            return Err(Status::unavailable("the server is shutting down"));
        }
        let mut held = Held {
            shared: shared.clone(),
            bytes: 0,
        };
        let (parts, body) = req.into_parts();
        // gRPC frames a message with 5 bytes (flag, length).
        let max = limits.max_message_bytes.saturating_add(5);
        let read_until = tokio::time::Instant::from_std(start + limits.request_timeout);
        let body =
            match tokio::time::timeout_at(until.min(read_until), read_body(body, &mut held, max))
                .await
            {
                Err(_) if until <= read_until => {
                    return Err(Status::deadline_exceeded(
                        "the deadline passed before the request arrived",
                    ))
                }
                Err(_) => {
                    return Err(Status::deadline_exceeded(format!(
                        "the request did not arrive within {} ms of the stream opening",
                        limits.request_timeout.as_millis()
                    )))
                }
                Ok(Err(ReadError::TooLarge)) => {
                    return Err(Status::out_of_range(format!(
                        "the request is larger than {} bytes",
                        limits.max_message_bytes
                    )))
                }
                Ok(Err(ReadError::Budget)) => {
                    return Err(Status::resource_exhausted(
                        "the server holds as many request bytes as it may; retry later",
                    ))
                }
                Ok(Err(ReadError::Body(m))) => {
                    return Err(Status::cancelled(format!("reading the request: {m}")))
                }
                Ok(Ok(b)) => b,
            };
        let req = Request::from_parts(parts, tonic::body::boxed(http_body_util::Full::new(body)));
        match tokio::time::timeout_at(until, inner.call(req)).await {
            Err(_) => Err(Status::deadline_exceeded(
                "the request did not complete before its deadline",
            )),
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) => Err(Status::internal(format!("routing: {e}"))),
        }
    }
    .await;
    let resp = result.unwrap_or_else(|s| s.into_http());
    let code = resp
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map_or(Code::Ok, Code::from_i32);
    let us = |a: &AtomicU64| {
        let v = a.load(Ordering::Relaxed);
        (v != u64::MAX).then(|| v as f64 / 1000.0)
    };
    let batch = log.batch.load(Ordering::Relaxed);
    tracing::info!(
        target: "hlobridge_serve::request",
        method = %method,
        status = ?code,
        batch = (batch >= 0).then_some(batch),
        batched_with = log.batched_with.load(Ordering::Relaxed),
        queue_ms = us(&log.queue_us),
        run_ms = us(&log.run_us),
        total_ms = start.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::parse_grpc_timeout;
    use std::time::Duration;

    #[test]
    fn grpc_timeouts() {
        assert_eq!(parse_grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("x"), None);
        assert_eq!(parse_grpc_timeout("10x"), None);
        assert_eq!(parse_grpc_timeout("+5S"), None);
        assert_eq!(parse_grpc_timeout("1234567890S"), None);
    }
}
