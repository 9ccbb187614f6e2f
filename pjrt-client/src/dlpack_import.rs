//! DLPack import: a PJRT buffer that aliases a producer's `DLTensor`
//! (a torch CUDA tensor on the CUDA plugin, a CPU tensor on the CPU plugin),
//! with every check done before the plugin sees the pointer.
//!
//! [`Client::check_dlpack`] validates a `DLTensor` against the client: the
//! device type must be the client's (`kDLCPU` for `cpu`, `kDLCUDA` for
//! `cuda`/`gpu`, `kDLROCM` for `rocm`), the device id must be one of the
//! client's addressable devices (matched by local hardware id, i.e. the
//! CUDA ordinal), the dtype must have a PJRT element type with one lane,
//! and the strides must be dense row-major (null, or equal to the compact
//! strides; dimensions of size 1 may carry any stride). Each failure is an
//! [`Error::InvalidArgument`] or [`Error::UnsupportedType`] that says what
//! was given and what to do, so a CUDA tensor handed to the CPU runtime is
//! an error, never a host read of a device pointer.
//!
//! [`Client::buffer_from_dlpack`] then creates a zero-copy view
//! (`PJRT_Client_CreateViewOfDeviceBuffer`) when the data is aligned to
//! [`view_alignment`] for the platform, and otherwise copies it: on CPU
//! through a host transfer (what JAX does), on a GPU never (the data is not
//! host memory; the caller clones the tensor on its device instead).
//!
//! Stream ordering is the caller's: the view is created without a stream
//! (some GPU clients reject or ignore one), so the producer's pending work
//! on the memory must be complete before the program runs (for torch:
//! `torch.cuda.current_stream().synchronize()`; see docs/accelerators.md).

// The DLPack constants keep their C names (`kDLCPU`) in match patterns.
#![allow(non_upper_case_globals)]

use crate::buffer::{Buffer, OnDelete};
use crate::client::Client;
use crate::device::Device;
use crate::dtype::ElementType;
use crate::error::{Error, Result};
use crate::ffi::dlpack::*;
use std::os::raw::c_void;

/// What a checked `DLTensor` describes.
#[derive(Debug)]
pub struct DlpackArray {
    /// First byte of the data (`data + byte_offset`).
    pub ptr: *mut c_void,
    /// Element type.
    pub dtype: ElementType,
    /// Dimensions (major to minor).
    pub dims: Vec<i64>,
    /// Dense size in bytes.
    pub nbytes: usize,
    /// The client's device that holds the data.
    pub device: Device,
}

/// Zero-copy view alignment the plugin needs: 64 bytes on CPU (the CPU
/// plugin refuses less), 16 on a GPU (XLA's GPU kernels assume entry
/// parameters aligned to 16 bytes).
pub fn view_alignment(platform: &str) -> usize {
    if platform.eq_ignore_ascii_case("cpu") {
        64
    } else {
        16
    }
}

/// The PJRT element type of a DLPack dtype.
pub fn element_type_of(dt: DLDataType) -> Result<ElementType> {
    use ElementType::*;
    if dt.lanes != 1 {
        return Err(Error::InvalidArgument(format!(
            "DLPack dtype with {} lanes: only scalar (1-lane) element types are supported",
            dt.lanes
        )));
    }
    let t = match (dt.code, dt.bits) {
        (kDLBool, 8) => Pred,
        (kDLInt, 8) => S8,
        (kDLInt, 16) => S16,
        (kDLInt, 32) => S32,
        (kDLInt, 64) => S64,
        (kDLUInt, 8) => U8,
        (kDLUInt, 16) => U16,
        (kDLUInt, 32) => U32,
        (kDLUInt, 64) => U64,
        (kDLFloat, 16) => F16,
        (kDLFloat, 32) => F32,
        (kDLFloat, 64) => F64,
        (kDLBfloat, 16) => Bf16,
        (kDLComplex, 64) => C64,
        (kDLComplex, 128) => C128,
        (code, bits) => {
            return Err(Error::InvalidArgument(format!(
                "DLPack dtype (code {code}, {bits} bits) has no PJRT element type"
            )))
        }
    };
    Ok(t)
}

fn device_type_name(t: DLDeviceType) -> String {
    match t {
        kDLCPU => "cpu".into(),
        kDLCUDA => "cuda".into(),
        3 => "cuda_host (pinned)".into(),
        kDLROCM => "rocm".into(),
        13 => "cuda_managed".into(),
        other => format!("device type {other}"),
    }
}

/// The DLPack device type a platform's buffers live on.
pub fn device_type_for(platform: &str) -> Option<DLDeviceType> {
    match platform.to_ascii_lowercase().as_str() {
        "cpu" => Some(kDLCPU),
        "cuda" | "gpu" => Some(kDLCUDA),
        "rocm" => Some(kDLROCM),
        _ => None,
    }
}

impl Client {
    /// Checks `t` against this client (see the module docs).
    ///
    /// # Safety
    /// `t.shape` must point to `t.ndim` values and `t.strides` must be null
    /// or point to `t.ndim` values (the DLPack contract).
    pub unsafe fn check_dlpack(&self, t: &DLTensor) -> Result<DlpackArray> {
        let platform = self.platform_name();
        let want = device_type_for(platform).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "DLPack import is not supported on platform {platform:?}"
            ))
        })?;
        if t.device.device_type != want {
            return Err(Error::InvalidArgument(format!(
                "DLPack tensor on {} device {}, but this runtime is the {platform} plugin: it \
                 cannot read that memory. Move the tensor (e.g. .cpu() / .cuda()) or use the \
                 runtime of its device (hlobridge.devices.runtime(\"cuda\"))",
                device_type_name(t.device.device_type),
                t.device.device_id
            )));
        }
        let device = self.device_for_dlpack(t.device.device_id)?;
        let dtype = element_type_of(t.dtype)?;
        if t.ndim < 0 {
            return Err(Error::InvalidArgument(format!(
                "DLPack tensor with ndim {}",
                t.ndim
            )));
        }
        let nd = t.ndim as usize;
        let dims: Vec<i64> = if nd == 0 {
            Vec::new()
        } else if t.shape.is_null() {
            return Err(Error::InvalidArgument(
                "DLPack tensor with null shape".into(),
            ));
        } else {
            // SAFETY: the caller guarantees `shape` holds `ndim` values.
            unsafe { std::slice::from_raw_parts(t.shape, nd) }.to_vec()
        };
        if let Some(d) = dims.iter().find(|&&d| d < 0) {
            return Err(Error::InvalidArgument(format!(
                "DLPack tensor with negative dimension {d} in {dims:?}"
            )));
        }
        let nbytes = dtype.host_size_of(&dims).ok_or_else(|| {
            Error::InvalidArgument(format!("DLPack tensor shape {dims:?} is too large"))
        })?;
        if !t.strides.is_null() && nbytes > 0 {
            // SAFETY: the caller guarantees `strides` holds `ndim` values.
            let strides = unsafe { std::slice::from_raw_parts(t.strides, nd) };
            let mut expect = 1i64;
            for i in (0..nd).rev() {
                if dims[i] != 1 && strides[i] != expect {
                    return Err(Error::InvalidArgument(format!(
                        "DLPack tensor is not dense row-major (shape {dims:?}, strides \
                         {strides:?}); pass a contiguous tensor (.contiguous())"
                    )));
                }
                expect = expect.saturating_mul(dims[i]);
            }
        }
        if t.data.is_null() && nbytes > 0 {
            return Err(Error::InvalidArgument(format!(
                "DLPack tensor with null data for {nbytes} bytes"
            )));
        }
        let ptr = (t.data as *mut u8).wrapping_add(t.byte_offset as usize) as *mut c_void;
        Ok(DlpackArray {
            ptr,
            dtype,
            dims,
            nbytes,
            device,
        })
    }

    fn device_for_dlpack(&self, id: i32) -> Result<Device> {
        let devices = self.addressable_devices();
        if self.platform_name().eq_ignore_ascii_case("cpu") {
            // DLPack CPU tensors carry device_id 0; host memory is readable
            // by every CPU device, so the first one runs it.
            return devices
                .into_iter()
                .next()
                .ok_or_else(|| Error::InvalidArgument("client has no addressable devices".into()));
        }
        let mut have = Vec::new();
        for d in devices {
            let hw = d.local_hardware_id()?;
            if hw == id {
                return Ok(d);
            }
            have.push(hw);
        }
        Err(Error::InvalidArgument(format!(
            "DLPack tensor on {} device {id}, which this client does not use (its devices: \
             {have:?}; see visible_devices / HLOBRIDGE_CUDA_VISIBLE_DEVICES)",
            self.platform_name()
        )))
    }

    /// A buffer holding `t`'s data: a zero-copy view when the data is
    /// aligned (module docs), else on CPU a copy. Returns the buffer and
    /// whether it was copied. `on_delete` runs when the plugin no longer
    /// needs the memory: for a view when the buffer is destroyed, for a copy
    /// (and on any error) before this returns.
    ///
    /// # Safety
    /// `t` must describe live memory of its device, valid for its dense
    /// size, that stays alive and unmodified until `on_delete` runs, and
    /// satisfy [`Client::check_dlpack`]'s contract.
    pub unsafe fn buffer_from_dlpack(
        &self,
        t: &DLTensor,
        on_delete: Option<OnDelete>,
    ) -> Result<(Buffer, bool)> {
        let run = |f: Option<OnDelete>| {
            if let Some(f) = f {
                f()
            }
        };
        // SAFETY: forwarded from the caller.
        let a = match unsafe { self.check_dlpack(t) } {
            Ok(a) => a,
            Err(e) => {
                run(on_delete);
                return Err(e);
            }
        };
        let align = view_alignment(self.platform_name());
        if a.nbytes > 0 && (a.ptr as usize).is_multiple_of(align) {
            // SAFETY: the caller keeps the memory alive until `on_delete`,
            // which the view owns from here on.
            let b =
                unsafe { self.create_view(a.ptr, a.dtype, &a.dims, Some(&a.device), on_delete) }?;
            return Ok((b, false));
        }
        if !self.platform_name().eq_ignore_ascii_case("cpu") && a.nbytes > 0 {
            run(on_delete);
            return Err(Error::InvalidArgument(format!(
                "DLPack tensor data at {:p} is not aligned to {align} bytes, which a zero-copy \
                 view on {} needs; clone the tensor on its device first",
                a.ptr,
                self.platform_name()
            )));
        }
        let bytes: &[u8] = if a.nbytes == 0 {
            &[]
        } else {
            // SAFETY: host memory valid for `nbytes` (checked CPU tensor).
            unsafe { std::slice::from_raw_parts(a.ptr as *const u8, a.nbytes) }
        };
        let r = self.buffer_from_host_bytes(bytes, a.dtype, &a.dims, Some(&a.device));
        run(on_delete);
        r.map(|b| (b, true))
    }
}
