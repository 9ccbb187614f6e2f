//! The `Predictor` service: converts a `PredictRequest` into checked host
//! tensors, queues it, waits and converts the outputs back. Status codes:
//! `INVALID_ARGUMENT` for inputs that do not fit the manifest (an input
//! named twice included), `RESOURCE_EXHAUSTED` when the queue is full,
//! `UNAVAILABLE` while shutting down or when the worker has stopped,
//! `INTERNAL` when execution fails (details only in the server log).
//! Deadlines, request sizes and draining are enforced around the service
//! ([`crate::gate`]).

use crate::gate::RequestLog;
use crate::pb::predictor_server::Predictor;
use crate::pb::{
    MetadataRequest, MetadataResponse, NamedTensor, PredictRequest, PredictResponse,
    Tensor as PbTensor,
};
use crate::worker::{Job, Queue, SubmitError};
use hlobridge_deploy::{DeployError, Model, Tensor};
use pjrt_client::ElementType;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

/// The service state.
pub struct PredictorService {
    model: Arc<Model>,
    queue: Queue,
}

impl PredictorService {
    /// A service over `model` feeding `queue`.
    pub fn new(model: Arc<Model>, queue: Queue) -> Self {
        PredictorService { model, queue }
    }

    /// The request's inputs in program order, each checked against the
    /// manifest; each name at most once.
    #[allow(clippy::result_large_err)]
    fn inputs(&self, req: PredictRequest) -> Result<(Vec<Tensor>, Option<i64>), Status> {
        let names: Vec<String> = self.model.input_names().map(str::to_string).collect();
        let mut inputs: Vec<Option<Tensor>> = vec![None; names.len()];
        for NamedTensor { name, tensor } in req.inputs {
            let Some(i) = names.iter().position(|n| *n == name) else {
                return Err(Status::invalid_argument(format!(
                    "the request has an input the model does not take; it takes {}",
                    names.join(", ")
                )));
            };
            if inputs[i].is_some() {
                return Err(Status::invalid_argument(format!(
                    "input {} given twice",
                    names[i]
                )));
            }
            let t = tensor.unwrap_or_default();
            let expected = self
                .model
                .manifest()
                .params
                .iter()
                .find(|p| p.name == names[i])
                .map_or("", |p| p.dtype.as_str());
            let dtype = ElementType::from_mlir_name(&t.dtype).ok_or_else(|| {
                Status::invalid_argument(format!("input {}: dtype must be {expected}", names[i]))
            })?;
            inputs[i] = Some(Tensor {
                dtype,
                shape: t.shape,
                data: t.data,
            });
        }
        let batch = {
            let named: Vec<(&str, hlobridge_deploy::TensorRef<'_>)> = names
                .iter()
                .zip(&inputs)
                .filter_map(|(n, t)| t.as_ref().map(|t| (n.as_str(), t.as_ref())))
                .collect();
            self.model.prepare(&named).map_err(status_of)?.batch
        };
        Ok((inputs.into_iter().flatten().collect(), batch))
    }
}

#[tonic::async_trait]
impl Predictor for PredictorService {
    async fn predict(
        &self,
        req: Request<PredictRequest>,
    ) -> Result<Response<PredictResponse>, Status> {
        let log = req.extensions().get::<Arc<RequestLog>>().cloned();
        let (inputs, batch) = self.inputs(req.into_inner())?;
        if let Some(l) = &log {
            l.set_batch(batch.unwrap_or(1));
        }
        let (tx, rx) = oneshot::channel();
        self.queue
            .submit(Job {
                inputs,
                batch,
                submitted: Instant::now(),
                reply: tx,
            })
            .map_err(|e| match e {
                SubmitError::Full => {
                    Status::resource_exhausted("the request queue is full; retry later")
                }
                SubmitError::Closed => Status::unavailable("the model is not serving"),
            })?;
        // The gate bounds this wait by the deadline (dropping this future
        // drops `rx`, and the worker skips the job).
        let reply = rx
            .await
            .map_err(|_| Status::unavailable("the model is not serving"))?;
        if let Some(l) = &log {
            l.set_times(reply.queue_time, reply.run_time, reply.batched_with);
        }
        let outs = reply.outputs.map_err(status_of)?;
        let outputs = self
            .model
            .manifest()
            .outputs
            .iter()
            .zip(outs)
            .map(|(o, t)| NamedTensor {
                name: o.name.clone(),
                tensor: Some(PbTensor {
                    dtype: t.dtype.mlir_name().to_string(),
                    shape: t.shape,
                    data: t.data,
                }),
            })
            .collect();
        Ok(Response::new(PredictResponse { outputs }))
    }

    async fn metadata(
        &self,
        _req: Request<MetadataRequest>,
    ) -> Result<Response<MetadataResponse>, Status> {
        Ok(Response::new(MetadataResponse {
            manifest_json: self.model.manifest_text().to_string(),
            content_hash: self.model.manifest().content_hash.clone(),
        }))
    }
}

/// The status of a failed request: the caller's fault (a bad input, or a
/// shape that breaks a dynamic artifact's constraints) is
/// `INVALID_ARGUMENT` (its message names only the model's own inputs);
/// anything else is `INTERNAL`, with the details only in the server log.
fn status_of(e: DeployError) -> Status {
    match e {
        DeployError::BadInput(m) => Status::invalid_argument(m),
        e @ DeployError::ShapeConstraint { .. } => Status::invalid_argument(e.to_string()),
        other => {
            tracing::debug!(error = %other, "request failed");
            Status::internal("execution failed (see the server log)")
        }
    }
}
