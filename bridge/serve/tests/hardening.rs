//! The server against hostile, broken and slow clients (issue 24's serve
//! items), each on loopback in-process:
//!
//! 1. a request whose results cannot be split (an artifact whose output
//!    has no batch rows) gets INTERNAL and the server keeps serving;
//!    `--batching` is refused for an artifact whose rows are dependent;
//! 2. resource bounds: a request that never finishes arriving is cut at
//!    `request_timeout`; the in-flight bytes budget refuses a request that
//!    would exceed it; an unanswered keepalive PING closes the connection;
//!    the stream limit is advertised; one connection over the limit is
//!    closed; an idle connection gets a GOAWAY and is closed;
//! 3. drain: the listener is closed at once, health says NOT_SERVING on an
//!    open connection, requests in flight finish; a hard drain deadline;
//! 4. a deadline that expires while the request arrives is
//!    DEADLINE_EXCEEDED (not CANCELLED), and ends the stream then, not at
//!    the request timeout;
//! 6. (duplicate inputs: `serve.rs`) and the wire encoding of
//!    `hlobridge-artifact` equals prost's;
//! 8. one log line per request, without request data.
//!
//! (The worker's own panic guard and the dependent-rows check of
//! `run_batch`: `mutation_gaps.rs`; health after the worker thread is gone:
//! `worker_death.rs`.)

use bytes::Bytes;
use hlobridge_deploy::writer::demo_row_sum_artifact;
use hlobridge_deploy::Model;
use hlobridge_serve::pb::predictor_client::PredictorClient;
use hlobridge_serve::pb::{NamedTensor, PredictRequest, PredictResponse, Tensor};
use hlobridge_serve::{serve, ServeConfig, ServeError};
use prost::Message;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;
use tonic::Code;

mod common;
use common::{client, health, health_on, req_x as req, start_demo, start_model, Running};

fn tmp(name: &str) -> tempfile::TempDir {
    common::tmp("hard", name)
}

async fn start(buckets: &[i64], cfg: ServeConfig, name: &str) -> Running {
    start_demo(tmp(name).path(), buckets, cfg).await
}

fn x(rows: i64) -> Tensor {
    Tensor {
        dtype: "f32".into(),
        shape: vec![rows, 3],
        data: (0..rows * 3)
            .flat_map(|i| (i as f32).to_le_bytes())
            .collect(),
    }
}

const SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
const NOT_SERVING: i32 = tonic_health::pb::health_check_response::ServingStatus::NotServing as i32;

// -- a raw HTTP/2 client: bodies that stall, headers we choose --------------

/// A request body fed from a channel (never ends while the sender lives).
struct ChanBody(tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for ChanBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|o| o.map(|b| Ok(http_body::Frame::data(b))))
    }
}

type Sender = hyper::client::conn::http2::SendRequest<ChanBody>;

async fn raw(addr: std::net::SocketAddr) -> Sender {
    let s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(s),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    send
}

/// Opens a Predict stream; returns the body's sender and the response.
fn open(
    send: &mut Sender,
    timeout: Option<&str>,
) -> (
    tokio::sync::mpsc::Sender<Bytes>,
    impl std::future::Future<Output = i32>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let mut b = http::Request::builder()
        .method("POST")
        .uri("http://localhost/hlobridge.serve.v1.Predictor/Predict")
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(t) = timeout {
        b = b.header("grpc-timeout", t);
    }
    let fut = send.send_request(b.body(ChanBody(rx)).unwrap());
    (tx, async move { grpc_status(fut.await.unwrap()).await })
}

async fn grpc_status(resp: http::Response<hyper::body::Incoming>) -> i32 {
    use http_body_util::BodyExt;
    if let Some(v) = resp.headers().get("grpc-status") {
        return v.to_str().unwrap().parse().unwrap();
    }
    let body = resp.into_body().collect().await.unwrap();
    body.trailers()
        .and_then(|t| t.get("grpc-status"))
        .map_or(-1, |v| v.to_str().unwrap().parse().unwrap())
}

fn framed(msg: &[u8]) -> Bytes {
    let mut v = vec![0u8];
    v.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    v.extend_from_slice(msg);
    Bytes::from(v)
}

// -- 1. a request cannot kill the server -----------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_that_cannot_be_split_is_internal_and_the_server_lives() {
    let dir = tmp("rowsum");
    demo_row_sum_artifact(dir.path(), &[1, 4], None).unwrap();
    let srv = start_model(Model::load(dir.path()).unwrap(), ServeConfig::default()).await;
    let mut c = client(&srv.url()).await;
    for _ in 0..3 {
        let e = c.predict(req(x(2))).await.unwrap_err();
        assert_eq!(e.code(), Code::Internal, "{e:?}");
        // Still serving: the one-row bucket computes, health says so.
        let out = c.predict(req(x(1))).await.unwrap().into_inner();
        assert_eq!(out.outputs[0].tensor.as_ref().unwrap().shape, vec![1, 3]);
        assert_eq!(health(&srv.url()).await, SERVING);
    }
    srv.stop().await;

    // An artifact whose rows the exporter found dependent: no --batching.
    let dep = tmp("dependent");
    demo_row_sum_artifact(dep.path(), &[1, 4], Some(false)).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cfg = ServeConfig {
        batching: true,
        ..ServeConfig::default()
    };
    let r = serve(
        Arc::new(Model::load(dep.path()).unwrap()),
        &cfg,
        listener,
        async {},
    )
    .await;
    match r {
        Err(ServeError::Config(m)) => assert!(m.contains("--batching refused"), "{m}"),
        other => panic!("{other:?}"),
    }
}

// -- 2. resource bounds ------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_never_finishes_arriving_is_cut() {
    let cfg = ServeConfig {
        request_timeout: Duration::from_millis(300),
        ..ServeConfig::default()
    };
    let srv = start(&[2], cfg, "stall").await;
    let mut s = raw(srv.addr).await;
    let (tx, resp) = open(&mut s, None);
    tx.send(Bytes::from_static(&[0, 0, 0, 1, 0])).await.unwrap(); // half a frame
    let t = Instant::now();
    let code = tokio::time::timeout(Duration::from_secs(10), resp)
        .await
        .expect("a stalled request was never answered");
    assert_eq!(code, Code::DeadlineExceeded as i32);
    assert!(t.elapsed() < Duration::from_secs(5));
    drop(tx);
    // A stalled client does not hold up the shutdown either.
    let (_tx2, _resp2) = open(&mut s, None);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_flight_bytes_budget_refuses_what_would_exceed_it() {
    let cfg = ServeConfig {
        max_message_bytes: 1 << 20,
        max_inflight_bytes: 1 << 20,
        request_timeout: Duration::from_secs(2),
        ..ServeConfig::default()
    };
    let srv = start(&[2], cfg, "budget").await;
    let chunk = Bytes::from(vec![7u8; 700 << 10]);
    // Two streams of 700 KiB that never finish: together they would hold
    // more than the 1 MiB budget. Whichever arrives second is refused at
    // once; the first is cut later by the request timeout.
    let mut s1 = raw(srv.addr).await;
    let (a_tx, a_resp) = open(&mut s1, None);
    a_tx.send(chunk.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut s2 = raw(srv.addr).await;
    let (b_tx, b_resp) = open(&mut s2, None);
    b_tx.send(chunk.clone()).await.unwrap();
    let t = Instant::now();
    let timed = |f| async move {
        let code = tokio::time::timeout(Duration::from_secs(10), f)
            .await
            .unwrap();
        (code, t.elapsed())
    };
    let (a, b) = tokio::join!(timed(a_resp), timed(b_resp));
    let (refused, cut) = if a.0 == Code::ResourceExhausted as i32 {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(refused.0, Code::ResourceExhausted as i32, "{a:?} {b:?}");
    assert!(refused.1 < Duration::from_millis(1500), "{refused:?}");
    assert_eq!(cut.0, Code::DeadlineExceeded as i32, "{a:?} {b:?}");
    drop((a_tx, b_tx));
    // The bytes are released: a good request runs.
    let mut c = client(&srv.url()).await;
    c.predict(req(x(2))).await.unwrap();
    srv.stop().await;
}

/// Reads HTTP/2 frames from a raw connection: `(type, flags, payload)`.
async fn frame(s: &mut tokio::net::TcpStream) -> Option<(u8, u8, Vec<u8>)> {
    let mut h = [0u8; 9];
    s.read_exact(&mut h).await.ok()?;
    let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
    let mut p = vec![0u8; len];
    s.read_exact(&mut p).await.ok()?;
    Some((h[3], h[4], p))
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_closes_a_connection_that_stops_answering_and_streams_are_capped() {
    let cfg = ServeConfig {
        keepalive_interval: Duration::from_millis(200),
        keepalive_timeout: Duration::from_millis(200),
        max_concurrent_streams: 3,
        ..ServeConfig::default()
    };
    let srv = start(&[2], cfg, "keepalive").await;
    let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(PREFACE).await.unwrap();
    // The server's SETTINGS advertise the stream limit (id 3).
    let (ty, _, p) = frame(&mut s).await.unwrap();
    assert_eq!(ty, 4);
    let max_streams = p
        .chunks_exact(6)
        .find(|c| u16::from_be_bytes([c[0], c[1]]) == 3)
        .map(|c| u32::from_be_bytes([c[2], c[3], c[4], c[5]]));
    assert_eq!(max_streams, Some(3));
    // Read everything, answer nothing (no SETTINGS ack, no PING ack): the
    // keepalive PING goes unanswered and the server closes the connection.
    let t = Instant::now();
    let mut pings = 0;
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some((ty, _, _)) = frame(&mut s).await {
            pings += usize::from(ty == 6);
        }
    })
    .await;
    assert!(closed.is_ok(), "the connection stayed open");
    assert!(pings >= 1);
    assert!(t.elapsed() < Duration::from_secs(5));
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_over_the_limit_is_closed() {
    let cfg = ServeConfig {
        max_connections: 1,
        ..ServeConfig::default()
    };
    let srv = start(&[2], cfg, "conns").await;
    let mut first = client(&srv.url()).await;
    first.predict(req(x(2))).await.unwrap();
    // A second connection is accepted and closed at once.
    let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let _ = s.write_all(PREFACE).await;
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("the connection over the limit was left open");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    // The first still works; once it is gone, a new one does.
    first.predict(req(x(2))).await.unwrap();
    drop(first);
    let mut ok = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if let Ok(ch) = Channel::from_shared(srv.url()).unwrap().connect().await {
            if PredictorClient::new(ch).predict(req(x(2))).await.is_ok() {
                ok = true;
                break;
            }
        }
    }
    assert!(ok, "no new connection after the first closed");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_gets_a_goaway_and_is_closed() {
    let cfg = ServeConfig {
        idle_timeout: Duration::from_millis(300),
        ..ServeConfig::default()
    };
    let srv = start(&[2], cfg, "idle").await;
    let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    s.write_all(PREFACE).await.unwrap();
    let mut goaway = false;
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some((ty, _, _)) = frame(&mut s).await {
            goaway |= ty == 7;
        }
    })
    .await;
    assert!(closed.is_ok(), "an idle connection stayed open");
    assert!(goaway, "closed without a GOAWAY");
    srv.stop().await;
}

// -- 3. drain ---------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_closes_the_listener_says_not_serving_and_finishes_requests() {
    // A long batching delay holds the requests in the worker.
    let cfg = ServeConfig {
        batching: true,
        max_delay: Duration::from_millis(3000),
        ..ServeConfig::default()
    };
    let mut srv = start(&[8], cfg, "drain").await;
    let url = srv.url();
    let c = client(&url).await;
    let probe = Channel::from_shared(url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    assert_eq!(health_on(probe.clone()).await, SERVING);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let mut c = c.clone();
        tasks.push(tokio::spawn(async move { c.predict(req(x(2))).await }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    srv.stop.take().unwrap().send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // New connections are refused by the OS at once.
    let t = Instant::now();
    let e = tokio::net::TcpStream::connect(srv.addr).await;
    assert!(e.is_err(), "the listener is still open");
    assert!(t.elapsed() < Duration::from_secs(1));
    // An open connection hears NOT_SERVING, and new calls get UNAVAILABLE.
    assert_eq!(health_on(probe.clone()).await, NOT_SERVING);
    let e = PredictorClient::new(probe)
        .predict(req(x(1)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    // The requests in flight finish.
    for t in tasks {
        let out: PredictResponse = t.await.unwrap().unwrap().into_inner();
        assert_eq!(out.outputs.len(), 2);
    }
    tokio::time::timeout(Duration::from_secs(30), srv.done)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_deadline_ends_the_server_anyway() {
    let cfg = ServeConfig {
        batching: true,
        max_delay: Duration::from_secs(20),
        drain_timeout: Duration::from_millis(300),
        ..ServeConfig::default()
    };
    let mut srv = start(&[8], cfg, "harddrain").await;
    let mut c = client(&srv.url()).await;
    let pending = tokio::spawn(async move { c.predict(req(x(2))).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = Instant::now();
    srv.stop.take().unwrap().send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), srv.done)
        .await
        .expect("the server outlived its drain deadline")
        .unwrap()
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(8));
    assert!(pending.await.unwrap().is_err());
}

// -- 4. deadlines -------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_expiring_while_the_request_arrives_is_deadline_exceeded() {
    let srv = start(&[2], ServeConfig::default(), "deadline").await;
    let mut s = raw(srv.addr).await;
    for _ in 0..3 {
        let (tx, resp) = open(&mut s, Some("200m"));
        let body = framed(&req(x(2)).encode_to_vec());
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            let _ = tx.send(body).await;
        });
        let code = tokio::time::timeout(Duration::from_secs(10), resp)
            .await
            .unwrap();
        assert_eq!(code, Code::DeadlineExceeded as i32);
        late.await.unwrap();
    }
    // In time: OK.
    let (tx, resp) = open(&mut s, Some("5S"));
    tx.send(framed(&req(x(2)).encode_to_vec())).await.unwrap();
    drop(tx);
    assert_eq!(resp.await, 0);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_deadline_cuts_a_request_that_never_finishes_arriving() {
    // The request timeout (10 s by default) is far off: only the client's
    // 200 ms deadline can end this stream early.
    let srv = start(&[2], ServeConfig::default(), "deadline-stall").await;
    let mut s = raw(srv.addr).await;
    let (tx, resp) = open(&mut s, Some("200m"));
    tx.send(Bytes::from_static(&[0, 0, 0, 1, 0])).await.unwrap(); // half a frame
    let t = Instant::now();
    let code = tokio::time::timeout(Duration::from_secs(20), resp)
        .await
        .expect("a stalled request was never answered");
    assert_eq!(code, Code::DeadlineExceeded as i32);
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "answered after {:?}: the client's deadline did not bound the request's arrival",
        t.elapsed()
    );
    drop(tx);
    srv.stop().await;
}

// -- 6. the wire encoding, defined once -----------------------------------------

#[test]
fn the_artifact_crates_wire_encoding_equals_prosts() {
    use hlobridge_artifact::wire;
    let data: Vec<u8> = (0..24).collect();
    let ours = wire::encode_named(&[("x", "f32", &[2, 3], &data), ("b", "i1", &[-1], &[1])]);
    let r = PredictRequest::decode(&ours[..]).unwrap();
    assert_eq!(r.inputs.len(), 2);
    assert_eq!(r.encode_to_vec(), ours);
    let resp = PredictResponse {
        outputs: r.inputs.clone(),
    };
    let back = wire::decode_named(&resp.encode_to_vec()).unwrap();
    assert_eq!(back[0].0, "x");
    assert_eq!(back[0].1.shape, vec![2, 3]);
    assert_eq!(back[0].1.data, data);
    assert_eq!(back[1].1.shape, vec![-1]);
}

// -- 8. logging ---------------------------------------------------------------

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn captured() -> &'static Captured {
    static C: OnceLock<Captured> = OnceLock::new();
    C.get_or_init(|| {
        let c = Captured::default();
        let w = c.clone();
        let sub = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "hlobridge_serve::request=info",
            ))
            .with_writer(move || w.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(sub).unwrap();
        c
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_log_line_per_request_without_request_data() {
    let cap = captured();
    let srv = start(&[1, 4], ServeConfig::default(), "log").await;
    let mut c = client(&srv.url()).await;
    c.predict(req(x(3))).await.unwrap();
    let bad = PredictRequest {
        inputs: vec![NamedTensor {
            name: "secret-name-1234".into(),
            tensor: Some(x(1)),
        }],
    };
    assert_eq!(
        c.predict(bad).await.unwrap_err().code(),
        Code::InvalidArgument
    );
    srv.stop().await;
    let text = String::from_utf8(cap.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("/hlobridge.serve.v1.Predictor/Predict"))
        .collect();
    assert!(lines.len() >= 2, "{text}");
    let ok = lines.iter().find(|l| l.contains("status=Ok")).expect(&text);
    for field in ["batch=3", "queue_ms=", "run_ms=", "total_ms="] {
        assert!(ok.contains(field), "{ok}");
    }
    assert!(
        lines.iter().any(|l| l.contains("status=InvalidArgument")),
        "{text}"
    );
    assert!(!text.contains("secret-name-1234"), "{text}");
}
