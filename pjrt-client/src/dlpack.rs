//! DLPack export of device buffers.
//!
//! [`Buffer::to_dlpack`] returns a `DLManagedTensor*` whose deleter owns a
//! clone of the [`Buffer`] (and therefore keeps the client alive) and an
//! external reference on the PJRT buffer until the consumer calls it.

use crate::buffer::{Buffer, Dims};
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::ffi::dlpack::*;
use std::os::raw::c_void;

#[repr(C)]
struct Holder {
    tensor: DLManagedTensor,
    buffer: Buffer,
    shape: Dims,
    strides: Dims,
}

unsafe extern "C" fn deleter(t: *mut DLManagedTensor) {
    if t.is_null() {
        return;
    }
    // SAFETY: `t` is the first field of a leaked `Box<Holder>` created in
    // `to_dlpack`; the consumer calls the deleter exactly once.
    let h = unsafe { Box::from_raw(t as *mut Holder) };
    if let Err(e) = h.buffer.external_ref(false) {
        tracing::warn!(error = %e, "DecreaseExternalReferenceCount failed in DLPack deleter");
    }
    drop(h);
}

/// DLPack dtype of an element type.
pub fn dl_dtype(t: ElementType) -> Result<DLDataType> {
    use ElementType::*;
    let (code, bits) = match t {
        Pred => (kDLBool, 8),
        S8 | S16 | S32 | S64 => (kDLInt, t.bit_width()),
        U8 | U16 | U32 | U64 => (kDLUInt, t.bit_width()),
        F16 | F32 | F64 => (kDLFloat, t.bit_width()),
        Bf16 => (kDLBfloat, 16),
        C64 | C128 => (kDLComplex, t.bit_width()),
        other => return Err(Error::UnsupportedType(other)),
    };
    Ok(DLDataType {
        code,
        bits: bits as u8,
        lanes: 1,
    })
}

impl Buffer {
    /// Exports the buffer as a DLPack `DLManagedTensor`. Waits until the data
    /// is ready. The caller (consumer) must call `deleter` exactly once.
    pub fn to_dlpack(&self) -> Result<*mut DLManagedTensor> {
        self.ready()?;
        let dtype = dl_dtype(self.element_type()?)?;
        let shape: Dims = Dims::from_slice(self.dims()?);
        let mut strides = Dims::from_elem(1, shape.len());
        for i in (0..shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * shape[i + 1].max(1);
        }
        let device = self.device()?;
        let platform = self.client().platform_name().to_ascii_lowercase();
        let dev = match platform.as_str() {
            "cpu" => DLDevice {
                device_type: kDLCPU,
                device_id: 0,
            },
            "cuda" | "gpu" => DLDevice {
                device_type: kDLCUDA,
                device_id: device.local_hardware_id()?,
            },
            "rocm" => DLDevice {
                device_type: kDLROCM,
                device_id: device.local_hardware_id()?,
            },
            other => {
                return Err(Error::InvalidArgument(format!(
                    "DLPack export unsupported on platform {other}"
                )))
            }
        };
        let data = self
            .opaque_device_pointer()
            .or_else(|_| self.unsafe_pointer().map(|p| p as *mut c_void))?;
        self.external_ref(true)?;
        let mut h = Box::new(Holder {
            tensor: DLManagedTensor {
                dl_tensor: DLTensor {
                    data,
                    device: dev,
                    ndim: shape.len() as i32,
                    dtype,
                    shape: std::ptr::null_mut(),
                    strides: std::ptr::null_mut(),
                    byte_offset: 0,
                },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(deleter),
            },
            buffer: self.clone(),
            shape,
            strides,
        });
        h.tensor.dl_tensor.shape = h.shape.as_mut_ptr();
        h.tensor.dl_tensor.strides = h.strides.as_mut_ptr();
        let raw = Box::into_raw(h);
        // SAFETY: `raw` is a valid, uniquely owned Holder.
        unsafe { (*raw).tensor.manager_ctx = raw as *mut c_void };
        Ok(raw as *mut DLManagedTensor)
    }
}
