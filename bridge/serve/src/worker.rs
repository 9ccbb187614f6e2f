//! The execution thread and its bounded queue. Handlers validate a request,
//! then [`Queue::submit`] it (a full queue is refused at once); the one
//! worker thread takes requests in order and, with batching on, waits up to
//! `max_delay` after the first for more requests that fit the largest
//! compiled batch, runs them as ONE execution (padded to a bucket) and
//! splits the results back. Requests whose caller has gone (disconnected,
//! deadline passed) are dropped before they run.

use hlobridge_deploy::{DeployError, Model, Prepared, Tensor};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The reply to one request: its outputs, in manifest order.
pub type Reply = Result<Vec<Tensor>, DeployError>;

/// One validated request: owned inputs in program order.
pub struct Job {
    /// Inputs in the order of [`Model::input_names`].
    pub inputs: Vec<Tensor>,
    /// Batch size along the manifest's batch dim.
    pub batch: Option<i64>,
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

/// Starts the worker thread; it ends when every [`Queue`] is dropped and
/// the queue is drained.
pub fn start(
    model: Arc<Model>,
    capacity: usize,
    batching: bool,
    max_delay: Duration,
) -> (Queue, std::thread::JoinHandle<()>) {
    let (tx, rx) = sync_channel::<Job>(capacity);
    let h = std::thread::Builder::new()
        .name("hlobridge-serve-worker".into())
        .spawn(move || work(&model, &rx, batching, max_delay))
        .expect("spawning the worker thread");
    (Queue { tx }, h)
}

fn work(model: &Model, rx: &Receiver<Job>, batching: bool, max_delay: Duration) {
    let max = if batching { model.max_batch() } else { None };
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
        if jobs.is_empty() {
            continue;
        }
        let prepared: Vec<Prepared<'_>> = jobs
            .iter()
            .map(|j| Prepared {
                inputs: j.inputs.iter().map(|t| t.as_ref()).collect(),
                batch: j.batch,
            })
            .collect();
        let result = model.run_batch(&prepared);
        drop(prepared);
        match result {
            Ok(outs) => {
                for (j, o) in jobs.into_iter().zip(outs) {
                    let _ = j.reply.send(Ok(o));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, requests = jobs.len(), "execution failed");
                let msg = e.to_string();
                for j in jobs {
                    let _ = j.reply.send(Err(DeployError::Manifest(msg.clone())));
                }
            }
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
}
