//! Issue 24, serve item 1: if the execution thread ever ends while the
//! server runs, health says NOT_SERVING and Predict gets UNAVAILABLE.
//!
//! No request can end the thread (a panicking execution is caught,
//! `mutation_gaps.rs`), so the death is injected: a tracing layer that
//! panics on the worker thread's "execution failed" error line, which is
//! logged outside the thread's panic guard. A test file of its own: the
//! layer is the process's global subscriber.

use hlobridge_deploy::writer::demo_row_sum_artifact;
use hlobridge_deploy::Model;
use hlobridge_serve::pb::{PredictRequest, Tensor};
use hlobridge_serve::ServeConfig;
use std::time::Duration;
use tonic::Code;
use tracing_subscriber::layer::SubscriberExt;

mod common;
use common::{health, req_x};

/// Panics on an ERROR event logged by the worker thread.
struct KillWorker;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for KillWorker {
    fn on_event(&self, ev: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *ev.metadata().level() == tracing::Level::ERROR
            && std::thread::current().name() == Some("hlobridge-serve-worker")
        {
            panic!("injected: the execution thread dies");
        }
    }
}

fn x(rows: i64) -> PredictRequest {
    req_x(Tensor {
        dtype: "f32".into(),
        shape: vec![rows, 3],
        data: vec![0; rows as usize * 12],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_not_serving_once_the_execution_thread_is_gone() {
    use tonic_health::pb::health_check_response::ServingStatus;
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(KillWorker))
        .unwrap();
    let dir = common::tmp("death", "rowsum");
    // A batch of 2 pads to 4 rows, and the row-sum output has 1 row: an
    // execution error, logged by the worker, which the layer turns fatal.
    demo_row_sum_artifact(dir.path(), &[1, 4], None).unwrap();
    let srv = common::start_model(Model::load(dir.path()).unwrap(), ServeConfig::default()).await;
    let mut c = common::client(&srv.url()).await;
    c.predict(x(1)).await.unwrap();
    assert_eq!(health(&srv.url()).await, ServingStatus::Serving as i32);
    let e = c.predict(x(2)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    let mut status = -1;
    for _ in 0..100 {
        status = health(&srv.url()).await;
        if status == ServingStatus::NotServing as i32 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        status,
        ServingStatus::NotServing as i32,
        "health still says SERVING with the execution thread gone"
    );
    let e = c.predict(x(1)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    srv.stop().await;
}
