//! The CUDA run path's pieces that run without a GPU: DLPack import checks
//! and zero-copy views on the CPU plugin (the same code a CUDA tensor goes
//! through on the CUDA plugin), a CUDA tensor refused by the CPU runtime,
//! and the CUDA client's creation failing with a named error when the
//! plugin or the GPU is missing. The GPU itself is exercised by
//! `tests/gpu/run.sh` on a GPU machine.

mod common;

use pjrt_client::cuda::{cuda_client, CudaOptions};
use pjrt_client::ffi::dlpack::*;
use pjrt_client::{CompileOptions, Error, Program};
use std::os::raw::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const SIN_ADD: &str = r#"module @m {
  func.func public @main(%a: tensor<2x3xf32>, %b: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = stablehlo.sine %a : tensor<2x3xf32>
    %1 = stablehlo.add %0, %b : tensor<2x3xf32>
    return %1 : tensor<2x3xf32>
  }
}"#;

/// 64-byte aligned host storage for `n` f32s.
#[repr(C, align(64))]
struct Aligned([f32; 16]);

fn tensor(data: *mut f32, shape: &mut [i64], strides: *mut i64, dev: DLDevice) -> DLTensor {
    DLTensor {
        data: data as *mut c_void,
        device: dev,
        ndim: shape.len() as i32,
        dtype: DLDataType {
            code: kDLFloat,
            bits: 32,
            lanes: 1,
        },
        shape: shape.as_mut_ptr(),
        strides,
        byte_offset: 0,
    }
}

const CPU0: DLDevice = DLDevice {
    device_type: kDLCPU,
    device_id: 0,
};

#[test]
fn cpu_tensors_are_viewed_zero_copy_and_run() {
    let client = common::client(1);
    let a = common::random_f32(6, 1);
    let b = common::random_f32(6, 2);
    let mut sa = Aligned([0.0; 16]);
    let mut sb = Aligned([0.0; 16]);
    sa.0[..6].copy_from_slice(&a);
    sb.0[..6].copy_from_slice(&b);
    let mut shape = [2i64, 3];
    let mut strides = [3i64, 1];
    let ta = tensor(sa.0.as_mut_ptr(), &mut shape, strides.as_mut_ptr(), CPU0);
    let tb = tensor(sb.0.as_mut_ptr(), &mut shape, std::ptr::null_mut(), CPU0);
    let deleted = Arc::new(AtomicUsize::new(0));
    let d1 = deleted.clone();
    let d2 = deleted.clone();
    // SAFETY: the storage outlives the buffers (dropped below, before it).
    let (va, ca) = unsafe {
        client.buffer_from_dlpack(
            &ta,
            Some(Box::new(move || {
                d1.fetch_add(1, Ordering::SeqCst);
            })),
        )
    }
    .unwrap();
    // SAFETY: as above.
    let (vb, cb) = unsafe {
        client.buffer_from_dlpack(
            &tb,
            Some(Box::new(move || {
                d2.fetch_add(1, Ordering::SeqCst);
            })),
        )
    }
    .unwrap();
    assert!(!ca && !cb, "aligned CPU tensors must be views");
    assert_eq!(va.unsafe_pointer().unwrap(), sa.0.as_ptr() as usize);
    let exe = client
        .compile(&Program::mlir_text(SIN_ADD), &CompileOptions::default())
        .unwrap();
    let out = exe.execute(&[&va, &vb]).unwrap();
    let got = out[0].to_host::<f32>().unwrap();
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x.sin() + y).collect();
    common::assert_close(&got, &want, 1e-5);
    drop((va, vb, out));
    assert_eq!(
        deleted.load(Ordering::SeqCst),
        2,
        "on_delete ran once per view"
    );
}

#[test]
fn unaligned_cpu_tensors_are_copied_and_released_at_once() {
    let client = common::client(1);
    let mut s = Aligned([0.0; 16]);
    for (i, v) in s.0.iter_mut().enumerate() {
        *v = i as f32;
    }
    let mut shape = [2i64, 3];
    let t = tensor(
        s.0[1..].as_mut_ptr(),
        &mut shape,
        std::ptr::null_mut(),
        CPU0,
    );
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    // SAFETY: `s` outlives the call; a copy does not keep the pointer.
    let (buf, copied) = unsafe {
        client.buffer_from_dlpack(
            &t,
            Some(Box::new(move || {
                r.fetch_add(1, Ordering::SeqCst);
            })),
        )
    }
    .unwrap();
    assert!(copied);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert_eq!(
        buf.to_host::<f32>().unwrap(),
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
}

#[test]
fn a_cuda_tensor_given_to_the_cpu_runtime_is_a_named_error() {
    let client = common::client(1);
    let mut shape = [2i64, 3];
    // A device pointer the CPU plugin must never read: the check refuses
    // it before any access (the address is not mapped here).
    let t = tensor(
        0x7f00_dead_0000usize as *mut f32,
        &mut shape,
        std::ptr::null_mut(),
        DLDevice {
            device_type: kDLCUDA,
            device_id: 0,
        },
    );
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    // SAFETY: the check fails before the pointer is used.
    let e = unsafe {
        client.buffer_from_dlpack(
            &t,
            Some(Box::new(move || {
                r.fetch_add(1, Ordering::SeqCst);
            })),
        )
    }
    .unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(
        msg.contains("cuda device 0") && msg.contains("cpu plugin"),
        "{msg}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1, "on_delete runs on refusal");
}

#[test]
fn bad_layouts_and_dtypes_are_refused() {
    let client = common::client(1);
    let mut s = Aligned([0.0; 16]);
    let mut shape = [2i64, 3];
    let mut transposed = [1i64, 2];
    let t = tensor(s.0.as_mut_ptr(), &mut shape, transposed.as_mut_ptr(), CPU0);
    // SAFETY: valid shape/strides arrays.
    let e = unsafe { client.check_dlpack(&t) }.unwrap_err();
    assert!(e.to_string().contains("contiguous"), "{e}");
    // Size-1 dimensions may carry any stride (torch gives them arbitrary ones).
    let mut shape1 = [1i64, 6];
    let mut odd = [99i64, 1];
    let t1 = tensor(s.0.as_mut_ptr(), &mut shape1, odd.as_mut_ptr(), CPU0);
    // SAFETY: as above.
    unsafe { client.check_dlpack(&t1) }.unwrap();
    let mut t2 = tensor(s.0.as_mut_ptr(), &mut shape, std::ptr::null_mut(), CPU0);
    t2.dtype.lanes = 4;
    // SAFETY: as above.
    let e = unsafe { client.check_dlpack(&t2) }.unwrap_err();
    assert!(e.to_string().contains("lanes"), "{e}");
    t2.dtype = DLDataType {
        code: kDLFloat,
        bits: 8,
        lanes: 1,
    };
    // SAFETY: as above.
    let e = unsafe { client.check_dlpack(&t2) }.unwrap_err();
    assert!(e.to_string().contains("no PJRT element type"), "{e}");
    let mut t3 = tensor(s.0.as_mut_ptr(), &mut shape, std::ptr::null_mut(), CPU0);
    t3.data = std::ptr::null_mut();
    // SAFETY: as above.
    let e = unsafe { client.check_dlpack(&t3) }.unwrap_err();
    assert!(e.to_string().contains("null data"), "{e}");
}

#[test]
fn the_cuda_client_fails_with_a_named_error_without_plugin_or_gpu() {
    // Without the plugin: NoPluginFound listing the search; with it but no
    // GPU (this machine): the plugin's own error from PJRT_Client_Create.
    match cuda_client(&CudaOptions::shared_with_torch()) {
        Err(Error::NoPluginFound { searched }) => assert!(searched.contains("CUDA"), "{searched}"),
        Err(Error::Pjrt { function, .. }) => assert_eq!(function, "PJRT_Client_Create"),
        Err(other) => panic!("unexpected error kind: {other:?}"),
        Ok(c) => {
            // A GPU machine: the client must have a CUDA device.
            assert!(c.device_count() > 0);
            assert_ne!(c.platform_name(), "cpu");
        }
    }
}
