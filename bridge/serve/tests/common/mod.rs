//! What the serve test files share: a scratch directory per test, a server
//! on a loopback port of its own, a client that waits for it, and the demo
//! artifact's requests and host-arithmetic check.

#![allow(dead_code)] // each test file uses its own subset

use hlobridge_deploy::writer::demo_artifact;
use hlobridge_deploy::Model;
use hlobridge_serve::pb::predictor_client::PredictorClient;
use hlobridge_serve::pb::{NamedTensor, PredictRequest, PredictResponse, Tensor};
use hlobridge_serve::{serve, ServeConfig, ServeError};
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::Channel;

#[path = "../../../deploy/tests/common/shared.rs"]
mod shared;
pub use shared::{bytes, floats, tmp};

/// A server running on a task of its own.
pub struct Running {
    pub addr: std::net::SocketAddr,
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub done: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl Running {
    /// `http://ADDR`, for clients.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Asks the server to stop (as SIGTERM does) and waits up to 30 s for
    /// it to drain and return `Ok`.
    pub async fn stop(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(30), self.done)
            .await
            .expect("the server did not stop")
            .unwrap()
            .unwrap();
    }
}

/// Serves `model` with `cfg` on a free loopback port.
pub async fn start_model(model: Model, cfg: ServeConfig) -> Running {
    let model = Arc::new(model);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let done = tokio::spawn(async move {
        serve(model, &cfg, listener, async {
            let _ = rx.await;
        })
        .await
    });
    Running {
        addr,
        stop: Some(tx),
        done,
    }
}

/// Serves the demo artifact (`y = x * [1, 2, 3]`, `s = y.sum(1)`) exported
/// at `buckets` into `dir`.
pub async fn start_demo(dir: &std::path::Path, buckets: &[i64], cfg: ServeConfig) -> Running {
    demo_artifact(dir, buckets).unwrap();
    start_model(Model::load(dir).unwrap(), cfg).await
}

/// A client of `url`, retrying the connection for up to 2 s.
pub async fn client(url: &str) -> PredictorClient<Channel> {
    for _ in 0..100 {
        if let Ok(ch) = Channel::from_shared(url.to_string())
            .unwrap()
            .connect()
            .await
        {
            return PredictorClient::new(ch);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("server did not come up");
}

/// The health status of the Predictor service at `url`, on a new connection.
pub async fn health(url: &str) -> i32 {
    let ch = Channel::from_shared(url.to_string())
        .unwrap()
        .connect()
        .await
        .unwrap();
    health_on(ch).await
}

/// The health status of the Predictor service, asked on `ch`.
pub async fn health_on(ch: Channel) -> i32 {
    let mut h = tonic_health::pb::health_client::HealthClient::new(ch);
    h.check(tonic_health::pb::HealthCheckRequest {
        service: "hlobridge.serve.v1.Predictor".into(),
    })
    .await
    .unwrap()
    .into_inner()
    .status
}

/// A `[rows, 3]` f32 input (`sin(0.37 i + seed)`): its values and its tensor.
pub fn x(rows: i64, seed: f32) -> (Vec<f32>, Tensor) {
    let v: Vec<f32> = (0..rows * 3)
        .map(|i| (i as f32 * 0.37 + seed).sin())
        .collect();
    let t = Tensor {
        dtype: "f32".into(),
        shape: vec![rows, 3],
        data: bytes(&v),
    };
    (v, t)
}

/// A request of named tensors (names may repeat).
pub fn req(inputs: Vec<(&str, Tensor)>) -> PredictRequest {
    PredictRequest {
        inputs: inputs
            .into_iter()
            .map(|(k, v)| NamedTensor {
                name: k.to_string(),
                tensor: Some(v),
            })
            .collect(),
    }
}

/// A request of one tensor named `x` (the demo's input).
pub fn req_x(t: Tensor) -> PredictRequest {
    req(vec![("x", t)])
}

/// The output `name` of a response.
pub fn output<'a>(out: &'a PredictResponse, name: &str) -> &'a Tensor {
    out.outputs
        .iter()
        .find(|o| o.name == name)
        .and_then(|o| o.tensor.as_ref())
        .unwrap_or_else(|| panic!("no output {name}"))
}

/// The demo's response (`y = x * [1, 2, 3]`, `s = y.sum(1)`) to input `xv`
/// of `rows` rows, checked elementwise (tolerance 1e-6 on `y`, 1e-5 on `s`).
pub fn check(xv: &[f32], out: &PredictResponse, rows: i64) {
    let (y, s) = (output(out, "y"), output(out, "s"));
    assert_eq!(y.shape, vec![rows, 3]);
    assert_eq!(s.shape, vec![rows]);
    let (yv, sv) = (floats(&y.data), floats(&s.data));
    for r in 0..rows as usize {
        let mut sum = 0.0;
        for c in 0..3 {
            let want = xv[r * 3 + c] * (c as f32 + 1.0);
            assert!((yv[r * 3 + c] - want).abs() <= 1e-6, "y[{r},{c}]");
            sum += want;
        }
        assert!((sv[r] - sum).abs() <= 1e-5, "s[{r}]");
    }
}
