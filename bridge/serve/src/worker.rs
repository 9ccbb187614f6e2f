//! The execution thread and its bounded queue. Handlers validate a request,
//! then [`Queue::submit`] it (a full queue is refused at once); the one
//! worker thread takes requests in order and, with batching on, waits up to
//! `max_delay` after the first for more requests that fit the largest
//! compiled batch, runs them as ONE execution (padded to a bucket) and
//! splits the results back. Requests whose caller has gone (disconnected,
//! deadline passed) are dropped before they run.
//!
//! A failed or panicking execution fails only that batch's requests (an
//! execution error: `INTERNAL`); the thread lives on. If the thread ever
//! ends while the server runs, [`Liveness`] says so (health answers
//! NOT_SERVING) and submissions are refused as closed.

use hlobridge_deploy::{DeployError, Model, Prepared, Tensor};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// The reply to one request.
#[derive(Debug)]
pub struct Reply {
    /// Its outputs, in manifest order, or why it failed.
    pub outputs: Result<Vec<Tensor>, DeployError>,
    /// From submission to the start of its execution.
    pub queue_time: Duration,
    /// Its execution (shared with the requests batched with it).
    pub run_time: Duration,
    /// Requests in the execution (1 without batching).
    pub batched_with: usize,
}

/// One validated request: owned inputs in program order.
pub struct Job {
    /// Inputs in the order of [`Model::input_names`].
    pub inputs: Vec<Tensor>,
    /// Batch size along the manifest's batch dim.
    pub batch: Option<i64>,
    /// When it was submitted.
    pub submitted: Instant,
    /// Where the result goes.
    pub reply: oneshot::Sender<Reply>,
}

/// Why a job was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// The queue is full.
    Full,
    /// The worker has stopped.
    Closed,
}

/// The handlers' end of the queue.
#[derive(Clone)]
pub struct Queue {
    tx: SyncSender<Job>,
}

impl Queue {
    /// Queues a job without waiting.
    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        self.tx.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => SubmitError::Full,
            TrySendError::Disconnected(_) => SubmitError::Closed,
        })
    }
}

/// `true` while the worker thread runs; becomes `false` when it ends.
pub type Liveness = watch::Receiver<bool>;

/// Marks the worker gone when dropped (normal exit or unwinding).
struct Alive(watch::Sender<bool>);

impl Drop for Alive {
    fn drop(&mut self) {
        let _ = self.0.send(false);
    }
}

/// Starts the worker thread; it ends when every [`Queue`] is dropped and
/// the queue is drained.
pub fn start(
    model: Arc<Model>,
    capacity: usize,
    batching: bool,
    max_delay: Duration,
) -> std::io::Result<(Queue, std::thread::JoinHandle<()>, Liveness)> {
    let (tx, rx) = sync_channel::<Job>(capacity);
    let (alive_tx, alive_rx) = watch::channel(true);
    let h = std::thread::Builder::new()
        .name("hlobridge-serve-worker".into())
        .spawn(move || {
            let _alive = Alive(alive_tx);
            work(&model, &rx, batching, max_delay)
        })?;
    Ok((Queue { tx }, h, alive_rx))
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Runs `jobs` as one execution; a panic inside becomes an execution error
/// for each of them.
fn run_jobs(model: &Model, jobs: Vec<Job>) {
    let started = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let prepared: Vec<Prepared<'_>> = jobs
            .iter()
            .map(|j| Prepared {
                inputs: j.inputs.iter().map(|t| t.as_ref()).collect(),
                batch: j.batch,
            })
            .collect();
        let outs = model.run_batch(&prepared)?;
        if outs.len() != jobs.len() {
            return Err(DeployError::Execution(format!(
                "{} results for {} requests",
                outs.len(),
                jobs.len()
            )));
        }
        Ok(outs)
    }))
    .unwrap_or_else(|p| {
        Err(DeployError::Execution(format!(
            "the execution panicked: {}",
            panic_message(&*p)
        )))
    });
    let run_time = started.elapsed();
    let n = jobs.len();
    match result {
        Ok(outs) => {
            for (j, o) in jobs.into_iter().zip(outs) {
                let queue_time = started.saturating_duration_since(j.submitted);
                let _ = j.reply.send(Reply {
                    outputs: Ok(o),
                    queue_time,
                    run_time,
                    batched_with: n,
                });
            }
        }
        Err(e) => {
            // Bad inputs were refused before queueing; whatever fails here
            // is the model's or the runtime's fault.
            tracing::error!(error = %e, requests = n, "execution failed");
            let msg = e.to_string();
            for j in jobs {
                let queue_time = started.saturating_duration_since(j.submitted);
                let outputs = Err(match &e {
                    DeployError::BadInput(m) => DeployError::BadInput(m.clone()),
                    DeployError::ShapeConstraint {
                        dim,
                        constraint,
                        message,
                    } => DeployError::ShapeConstraint {
                        dim: dim.clone(),
                        constraint: constraint.clone(),
                        message: message.clone(),
                    },
                    _ => DeployError::Execution(msg.clone()),
                });
                let _ = j.reply.send(Reply {
                    outputs,
                    queue_time,
                    run_time,
                    batched_with: n,
                });
            }
        }
    }
}

fn work(model: &Model, rx: &Receiver<Job>, batching: bool, max_delay: Duration) {
    let max = if batching && model.manifest().batchable() {
        model.max_batch()
    } else {
        None
    };
    let mut carry: Option<Job> = None;
    loop {
        let first = match carry.take() {
            Some(j) => j,
            None => match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            },
        };
        let mut jobs = vec![first];
        if let Some(max) = max {
            let mut total = jobs[0].batch.unwrap_or(0);
            let until = Instant::now() + max_delay;
            while total < max {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match rx.recv_timeout(left) {
                    Ok(j) => {
                        let b = j.batch.unwrap_or(0);
                        if total + b > max {
                            carry = Some(j);
                            break;
                        }
                        total += b;
                        jobs.push(j);
                    }
                    Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => break,
                }
            }
        }
        jobs.retain(|j| !j.reply.is_closed());
        if !jobs.is_empty() {
            run_jobs(model, jobs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Job {
        let (reply, _rx) = oneshot::channel();
        Job {
            inputs: Vec::new(),
            batch: None,
            submitted: Instant::now(),
            reply,
        }
    }

    #[test]
    fn a_full_queue_refuses_at_once_and_a_stopped_worker_is_closed() {
        let (tx, rx) = sync_channel::<Job>(1);
        let q = Queue { tx };
        assert!(q.submit(job()).is_ok());
        assert_eq!(q.submit(job()).err(), Some(SubmitError::Full));
        drop(rx);
        assert_eq!(q.submit(job()).err(), Some(SubmitError::Closed));
    }

    #[test]
    fn liveness_turns_false_when_the_thread_unwinds() {
        let (tx, mut rx) = watch::channel(true);
        let h = std::thread::spawn(move || {
            let _alive = Alive(tx);
            panic!("boom");
        });
        assert!(h.join().is_err());
        assert!(!*rx.borrow_and_update());
    }
}
