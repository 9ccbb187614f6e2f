//! The `Predictor` service: converts a `PredictRequest` into checked host
//! tensors, queues it, waits (bounded by the deadline) and converts the
//! outputs back. Status codes: `INVALID_ARGUMENT` for inputs that do not fit
//! the manifest, `RESOURCE_EXHAUSTED` when the queue is full,
//! `DEADLINE_EXCEEDED`, `UNAVAILABLE` while shutting down, `INTERNAL` when
//! execution fails (details only in the server log).

use crate::pb::predictor_server::Predictor;
use crate::pb::{
    MetadataRequest, MetadataResponse, PredictRequest, PredictResponse, Tensor as PbTensor,
};
use crate::worker::{Job, Queue, SubmitError};
use hlobridge_deploy::{DeployError, Model, Tensor};
use pjrt_client::ElementType;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tonic::{Request, Response, Status};

/// The service state.
pub struct PredictorService {
    model: Arc<Model>,
    queue: Queue,
    deadline: Duration,
}

impl PredictorService {
    /// A service over `model` feeding `queue`.
    pub fn new(model: Arc<Model>, queue: Queue, deadline: Duration) -> Self {
        PredictorService {
            model,
            queue,
            deadline,
        }
    }
}

/// Parses a `grpc-timeout` header (`<digits><H|M|S|m|u|n>`).
pub fn parse_grpc_timeout(v: &str) -> Option<Duration> {
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (n, unit) = v.split_at(v.len() - 1);
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

#[tonic::async_trait]
impl Predictor for PredictorService {
    async fn predict(
        &self,
        req: Request<PredictRequest>,
    ) -> Result<Response<PredictResponse>, Status> {
        let deadline = req
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout)
            .map_or(self.deadline, |t| t.min(self.deadline));
        let names: Vec<String> = self.model.input_names().map(str::to_string).collect();
        let mut inputs: Vec<Option<Tensor>> = vec![None; names.len()];
        for (name, t) in req.into_inner().inputs {
            let Some(i) = names.iter().position(|n| *n == name) else {
                return Err(Status::invalid_argument(format!(
                    "the request has an input the model does not take; it takes {}",
                    names.join(", ")
                )));
            };
            let expected = &self
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
            self.model.prepare(&named).map_err(bad_input)?.batch
        };
        let inputs: Vec<Tensor> = inputs.into_iter().flatten().collect();
        let (tx, rx) = oneshot::channel();
        self.queue
            .submit(Job {
                inputs,
                batch,
                reply: tx,
            })
            .map_err(|e| match e {
                SubmitError::Full => {
                    Status::resource_exhausted("the request queue is full; retry later")
                }
                SubmitError::Closed => Status::unavailable("the server is shutting down"),
            })?;
        let outs = match tokio::time::timeout(deadline, rx).await {
            Err(_) => {
                return Err(Status::deadline_exceeded(
                    "the request did not run before its deadline",
                ))
            }
            Ok(Err(_)) => return Err(Status::unavailable("the server is shutting down")),
            Ok(Ok(Err(e))) => return Err(bad_input(e)),
            Ok(Ok(Ok(outs))) => outs,
        };
        let outputs = self
            .model
            .manifest()
            .outputs
            .iter()
            .zip(outs)
            .map(|(o, t)| {
                (
                    o.name.clone(),
                    PbTensor {
                        dtype: t.dtype.mlir_name().to_string(),
                        shape: t.shape,
                        data: t.data,
                    },
                )
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

fn bad_input(e: DeployError) -> Status {
    match e {
        DeployError::BadInput(m) => Status::invalid_argument(m),
        other => {
            tracing::error!(error = %other, "request failed");
            Status::internal("execution failed (see the server log)")
        }
    }
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
        assert_eq!(parse_grpc_timeout("1234567890S"), None);
    }
}
