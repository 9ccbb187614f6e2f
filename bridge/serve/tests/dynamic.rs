//! `hlobridge serve` on a dynamic artifact (ONE module with a `?` batch):
//! requests of several batch sizes, with and without batching across
//! requests, each checked against host arithmetic; a batch outside the
//! batch symbol's range and a wrong fixed dim are `INVALID_ARGUMENT` naming
//! the dimension and the constraint, and the server keeps serving.

use hlobridge_deploy::writer::demo_dynamic_artifact;
use hlobridge_deploy::Model;
use hlobridge_serve::pb::Tensor;
use hlobridge_serve::ServeConfig;
use tonic::Code;

mod common;
use common::{check, client, req_x as req, start_model, x};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_a_dynamic_artifact_at_several_batch_sizes() {
    let dir = common::tmp("serve-dyn", "sizes");
    demo_dynamic_artifact(dir.path(), Some(16)).unwrap();
    let model = Model::load(dir.path()).unwrap();
    let mut srv = start_model(model, ServeConfig::default()).await;
    let mut c = client(&srv.url()).await;
    for rows in [1, 2, 5, 11, 16, 5] {
        let (xv, t) = x(rows, rows as f32);
        let out = c.predict(req(t)).await.unwrap().into_inner();
        check(&xv, &out, rows);
    }
    let (_, t) = x(17, 0.0);
    let e = c.predict(req(t)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("input x dim 0") && e.message().contains("2 <= batch <= 16"),
        "{}",
        e.message()
    );
    let (_, t) = x(2, 0.0);
    let e = c
        .predict(req(Tensor {
            shape: vec![3, 2],
            ..t
        }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("input x dim 1"), "{}", e.message());
    // Still serving.
    let (xv, t) = x(3, 9.0);
    check(&xv, &c.predict(req(t)).await.unwrap().into_inner(), 3);
    srv.stop.take().unwrap().send(()).unwrap();
    srv.done.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batching_merges_requests_into_exact_batches() {
    let dir = common::tmp("serve-dyn", "batch");
    demo_dynamic_artifact(dir.path(), None).unwrap();
    let cfg = ServeConfig {
        batching: true,
        max_delay: std::time::Duration::from_millis(20),
        ..ServeConfig::default()
    };
    let mut srv = start_model(Model::load(dir.path()).unwrap(), cfg).await;
    let c = client(&srv.url()).await;
    let mut tasks = Vec::new();
    for k in 0..24 {
        let mut c = c.clone();
        tasks.push(tokio::spawn(async move {
            let rows = 1 + k % 4;
            let (xv, t) = x(rows, k as f32 * 0.1);
            let out = c.predict(req(t)).await.unwrap().into_inner();
            check(&xv, &out, rows);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    srv.stop.take().unwrap().send(()).unwrap();
    srv.done.await.unwrap().unwrap();
}
