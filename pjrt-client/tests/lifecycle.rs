//! Donation, serialize/deserialize, zero-copy views and DLPack export.

mod common;
use common::*;
use pjrt_client::{CompileOptions, Donation, Error, ExecuteOptions, Program};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const DONATING: &str = r#"module @donate {
  func.func public @main(%arg0: tensor<8xf32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<8xf32>) -> tensor<8xf32> {
    %0 = stablehlo.add %arg0, %arg1 : tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}"#;

#[test]
fn donation_invalidates_input_with_clear_error() {
    let c = client(1);
    let exe = c
        .compile(&Program::mlir_text(DONATING), &CompileOptions::default())
        .unwrap();
    let a = c.buffer_from_host(&[1f32; 8], &[8], None).unwrap();
    let b = c.buffer_from_host(&[2f32; 8], &[8], None).unwrap();

    // Default: nothing donated, inputs reusable.
    let out = exe.execute(&[&a, &b]).unwrap();
    assert_eq!(out[0].to_host::<f32>().unwrap(), vec![3f32; 8]);
    assert!(!a.is_deleted());

    // Donate all: arg0 is aliased to the output and becomes invalid.
    let out = exe
        .execute_with(
            &[&a, &b],
            &ExecuteOptions {
                donation: Donation::All,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(out[0].to_host::<f32>().unwrap(), vec![3f32; 8]);
    assert!(a.is_deleted(), "donated buffer must be deleted");
    assert!(!b.is_deleted());
    let err = exe.execute(&[&a, &b]).unwrap_err();
    assert!(matches!(err, Error::BufferDeleted { .. }), "{err}");
    assert!(err.to_string().contains("argument 0"), "{err}");
    assert!(matches!(
        a.to_host::<f32>().unwrap_err(),
        Error::BufferDeleted { .. }
    ));

    // Donate only arg1 (not aliased): arg1 stays valid.
    let c2 = c.buffer_from_host(&[1f32; 8], &[8], None).unwrap();
    let out = exe
        .execute_with(
            &[&c2, &b],
            &ExecuteOptions {
                donation: Donation::Only(&[1]),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(out[0].to_host::<f32>().unwrap(), vec![3f32; 8]);
    assert!(!c2.is_deleted());
}

#[test]
fn explicit_delete_then_use_is_an_error() {
    let c = client(1);
    let a = c.buffer_from_host(&[1f32; 4], &[4], None).unwrap();
    a.delete().unwrap();
    assert!(a.is_deleted());
    assert!(matches!(
        a.to_host_bytes().unwrap_err(),
        Error::BufferDeleted { .. }
    ));
    let exe = c
        .compile(
            &Program::mlir_text(&sine_module(4)),
            &CompileOptions::default(),
        )
        .unwrap();
    assert!(matches!(
        exe.execute(&[&a]).unwrap_err(),
        Error::BufferDeleted { .. }
    ));
}

#[test]
fn serialize_deserialize_run() {
    let c = client(1);
    let exe = c
        .compile(
            &Program::mlir_text(&sine_exp_module(32)),
            &CompileOptions::default(),
        )
        .unwrap();
    let bytes = exe.serialize().unwrap();
    assert!(!bytes.is_empty());
    drop(exe);
    let exe2 = c.deserialize_executable(&bytes, None).unwrap();
    let x = random_f32(32, 5);
    let y = random_f32(32, 6);
    let bx = c.buffer_from_host(&x, &[32], None).unwrap();
    let by = c.buffer_from_host(&y, &[32], None).unwrap();
    let got = exe2.execute(&[&bx, &by]).unwrap()[0]
        .to_host::<f32>()
        .unwrap();
    let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a.sin() * b.exp()).collect();
    assert_close(&got, &want, 1e-5);
    assert!(matches!(
        c.deserialize_executable(b"garbage", None).unwrap_err(),
        Error::Pjrt { .. }
    ));
}

#[test]
fn zero_copy_view_aliases_host_memory() {
    let c = client(1);
    let n = 64usize;
    let layout = std::alloc::Layout::from_size_align(n * 4, 64).unwrap();
    // SAFETY: non-zero size layout.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut f32;
    assert!(!ptr.is_null());
    let freed = Arc::new(AtomicBool::new(false));
    let freed2 = freed.clone();
    let addr = ptr as usize;
    let on_delete: pjrt_client::OnDelete = Box::new(move || {
        // SAFETY: allocated above with `layout`; freed exactly once here.
        unsafe { std::alloc::dealloc(addr as *mut u8, layout) };
        freed2.store(true, Ordering::SeqCst);
    });
    // SAFETY: `ptr` is valid for n f32s until on_delete runs.
    let view = unsafe {
        c.create_view(
            ptr as *mut _,
            pjrt_client::ElementType::F32,
            &[n as i64],
            None,
            Some(on_delete),
        )
    }
    .unwrap();
    assert_eq!(
        view.unsafe_pointer().unwrap(),
        addr,
        "view must alias the host memory"
    );
    let exe = c
        .compile(
            &Program::mlir_text(&sine_module(n)),
            &CompileOptions::default(),
        )
        .unwrap();
    let x = random_f32(n, 9);
    // SAFETY: we own the memory; no execution is in flight.
    unsafe { std::ptr::copy_nonoverlapping(x.as_ptr(), ptr, n) };
    let got = exe.execute(&[&view]).unwrap()[0].to_host::<f32>().unwrap();
    assert_close(&got, &x.iter().map(|v| v.sin()).collect::<Vec<_>>(), 1e-5);
    // Host writes become visible through the view.
    // SAFETY: as above.
    unsafe { *ptr = 1.5 };
    assert_eq!(view.to_host::<f32>().unwrap()[0], 1.5);
    assert!(!freed.load(Ordering::SeqCst));
    drop(view);
    // The execution's hold on its input is released by the plugin's worker
    // right after it marks the output ready; a caller that saw the output
    // ready by polling can get here first, and the plugin then runs
    // on_delete when it lets go. It must run, promptly.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !freed.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(
        freed.load(Ordering::SeqCst),
        "on_delete must run once the view is destroyed and the plugin lets go of it"
    );
}

#[test]
fn dlpack_export_keeps_buffer_alive() {
    let c = client(1);
    let data: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let b = c.buffer_from_host(&data, &[3, 4], None).unwrap();
    let ptr = b.unsafe_pointer().unwrap();
    let t = b.to_dlpack().unwrap();
    drop(b);
    drop(c);
    // SAFETY: `t` is a valid DLManagedTensor until we call its deleter.
    unsafe {
        let dl = &(*t).dl_tensor;
        assert_eq!(dl.data as usize, ptr);
        assert_eq!(dl.ndim, 2);
        assert_eq!(std::slice::from_raw_parts(dl.shape, 2), &[3, 4]);
        assert_eq!(std::slice::from_raw_parts(dl.strides, 2), &[4, 1]);
        assert_eq!((dl.dtype.code, dl.dtype.bits, dl.dtype.lanes), (2, 32, 1));
        assert_eq!(dl.device.device_type, 1);
        let vals = std::slice::from_raw_parts(dl.data as *const f32, 12);
        assert_eq!(vals, &data[..]);
        ((*t).deleter.unwrap())(t);
    }
}

#[test]
fn deleted_behind_our_back_is_reported_via_plugin() {
    use pjrt_client::ffi::{self, PjrtStruct};
    let c = client(1);
    let exe = c
        .compile(
            &Program::mlir_text(&sine_module(4)),
            &CompileOptions::default(),
        )
        .unwrap();
    let a = c.buffer_from_host(&[1f32; 4], &[4], None).unwrap();
    // Delete through the raw C API so our own flag is not set.
    let mut d = ffi::PJRT_Buffer_Delete_Args::new();
    d.buffer = a.raw();
    // SAFETY: valid live buffer handle; Delete keeps the handle destroyable.
    let err = unsafe { (c.api().table().PJRT_Buffer_Delete.unwrap())(&mut d) };
    assert!(err.is_null());
    let err = exe.execute(&[&a]).unwrap_err();
    assert!(matches!(err, Error::BufferDeleted { .. }), "{err}");
    assert!(a.is_deleted());
}
