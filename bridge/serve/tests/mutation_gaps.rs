//! Tests that a mutation run (docs/deploy.md, "Each hardening test fails
//! without its fix") found missing: each fails when its guard is removed.
//!
//! - item 1: a panic inside an execution fails that batch's requests with
//!   an execution error (`INTERNAL` on the wire) and the worker thread lives
//!   on (the row check in `Model::run_batch` keeps requests from reaching a
//!   panic, so the worker's own guard is tested through its queue, with a
//!   job whose inputs do not fit the model: the service never queues one);
//! - item 7: requests of an artifact with dependent rows are never run as
//!   one execution, even when together they make an exported batch size.

use hlobridge_deploy::writer::demo_artifact;
use hlobridge_deploy::{DeployError, Model, Tensor};
use hlobridge_serve::worker::{self, Job};
use pjrt_client::ElementType;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

mod common;

fn job(inputs: Vec<Tensor>, batch: i64) -> (Job, oneshot::Receiver<worker::Reply>) {
    let (reply, rx) = oneshot::channel();
    let j = Job {
        inputs,
        batch: Some(batch),
        submitted: Instant::now(),
        reply,
    };
    (j, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_execution_fails_its_requests_and_the_worker_lives() {
    let dir = common::tmp("gaps", "panic");
    demo_artifact(dir.path(), &[2]).unwrap();
    let model = Arc::new(Model::load(dir.path()).unwrap());
    let (queue, _thread, alive) = worker::start(model, 4, false, Duration::ZERO).unwrap();
    for _ in 0..3 {
        // No inputs for a model that takes one: run_batch indexes past them.
        let (j, rx) = job(Vec::new(), 2);
        queue.submit(j).unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .expect("no reply")
            .expect("the worker thread died with the job (no reply sent)");
        match reply.outputs {
            Err(DeployError::Execution(m)) => assert!(m.contains("panicked"), "{m}"),
            other => panic!("expected an execution error, got {other:?}"),
        }
        // The worker lives: a good job runs.
        let data: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let x = Tensor {
            dtype: ElementType::F32,
            shape: vec![2, 3],
            data,
        };
        let (j, rx) = job(vec![x], 2);
        queue
            .submit(j)
            .expect("the worker is gone: submissions are refused");
        let out = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .expect("no reply")
            .expect("the worker thread died")
            .outputs
            .unwrap();
        assert_eq!(out[0].shape, vec![2, 3]);
        assert!(*alive.borrow(), "liveness says the worker stopped");
    }
}

/// Item 7: requests of an artifact whose rows the exporter found dependent
/// are never run as one execution, even when together they make an
/// exported batch size (no padding is needed, so only this check stops it).
#[test]
fn dependent_rows_are_never_run_together_even_at_an_exported_size() {
    use hlobridge_deploy::writer::demo_row_sum_artifact;
    use hlobridge_deploy::{Prepared, TensorRef};
    let dir = common::tmp("gaps", "dependent");
    demo_row_sum_artifact(dir.path(), &[1, 4], Some(false)).unwrap();
    let model = Model::load(dir.path()).unwrap();
    let x = vec![0u8; 2 * 12];
    let two = || Prepared {
        inputs: vec![TensorRef {
            dtype: ElementType::F32,
            shape: &[2, 3],
            data: &x,
        }],
        batch: Some(2),
    };
    match model.run_batch(&[two(), two()]) {
        Err(DeployError::BadInput(m)) => assert!(m.contains("not independent"), "{m}"),
        other => panic!("two requests of dependent rows ran together: {other:?}"),
    }
}
