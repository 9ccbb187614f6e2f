//! The `tch` feature: [`Model::run_tch`] takes and returns `tch::Tensor`s.
//! Contiguous CPU inputs are read in place (their storage is borrowed as the
//! bytes handed to PJRT, no host copy); other inputs are made contiguous
//! first. Outputs are new tensors built from the result bytes. Built against
//! the libtorch inside the pinned torch wheel (`LIBTORCH_USE_PYTORCH=1`);
//! tch 0.22 matches torch 2.9.0.

use crate::error::{DeployError, Result};
use crate::model::{Model, TensorRef};
use pjrt_client::ElementType;
use tch::{Device, Kind, Tensor as TchTensor};

fn element_type(k: Kind) -> Option<ElementType> {
    Some(match k {
        Kind::Float => ElementType::F32,
        Kind::Double => ElementType::F64,
        Kind::Half => ElementType::F16,
        Kind::BFloat16 => ElementType::Bf16,
        Kind::Int8 => ElementType::S8,
        Kind::Int16 => ElementType::S16,
        Kind::Int => ElementType::S32,
        Kind::Int64 => ElementType::S64,
        Kind::Uint8 => ElementType::U8,
        Kind::Bool => ElementType::Pred,
        _ => return None,
    })
}

fn kind(t: ElementType) -> Option<Kind> {
    Some(match t {
        ElementType::F32 => Kind::Float,
        ElementType::F64 => Kind::Double,
        ElementType::F16 => Kind::Half,
        ElementType::Bf16 => Kind::BFloat16,
        ElementType::S8 => Kind::Int8,
        ElementType::S16 => Kind::Int16,
        ElementType::S32 => Kind::Int,
        ElementType::S64 => Kind::Int64,
        ElementType::U8 => Kind::Uint8,
        ElementType::Pred => Kind::Bool,
        _ => return None,
    })
}

impl Model {
    /// Runs named `tch` tensors (CPU); returns the named outputs as `tch`
    /// tensors in manifest order.
    pub fn run_tch(&self, inputs: &[(&str, &TchTensor)]) -> Result<Vec<(String, TchTensor)>> {
        // Keep contiguous copies of non-contiguous inputs alive for the call.
        let dense: Vec<TchTensor> = inputs
            .iter()
            .map(|(_, t)| {
                if t.is_contiguous() {
                    t.shallow_clone()
                } else {
                    t.contiguous()
                }
            })
            .collect();
        let mut shapes = Vec::with_capacity(inputs.len());
        for ((name, _), t) in inputs.iter().zip(&dense) {
            if t.device() != Device::Cpu {
                return Err(DeployError::BadInput(format!(
                    "input {name}: must be a CPU tensor"
                )));
            }
            shapes.push(t.size());
        }
        let mut refs = Vec::with_capacity(inputs.len());
        for (((name, _), t), shape) in inputs.iter().zip(&dense).zip(&shapes) {
            let dtype = element_type(t.kind()).ok_or_else(|| {
                DeployError::BadInput(format!("input {name}: unsupported tensor kind"))
            })?;
            let n = dtype
                .host_size_of(shape)
                .ok_or_else(|| DeployError::BadInput(format!("input {name}: shape overflows")))?;
            let data: &[u8] = if n == 0 {
                &[]
            } else {
                // SAFETY: `t` is a contiguous CPU tensor of `dtype` with
                // `shape`, so its storage holds `n` initialized bytes from
                // `data_ptr()`; `dense` keeps it alive (and unmodified by us)
                // until `run` below returns, after which the slice is dropped.
                unsafe { std::slice::from_raw_parts(t.data_ptr() as *const u8, n) }
            };
            refs.push((*name, TensorRef { dtype, shape, data }));
        }
        let outs = self.run(&refs)?;
        let mut res = Vec::with_capacity(outs.len());
        for (name, o) in outs {
            let k = kind(o.dtype).ok_or_else(|| {
                DeployError::Execution(format!("output {name}: no tch kind for {:?}", o.dtype))
            })?;
            let t = TchTensor::f_from_data_size(&o.data, &o.shape, k)
                .map_err(|e| DeployError::BadInput(format!("output {name}: {e}")))?;
            res.push((name, t));
        }
        Ok(res)
    }
}
