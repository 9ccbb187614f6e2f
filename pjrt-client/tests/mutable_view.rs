//! `Client::create_mutable_view`: host memory an execution updates in place
//! when the buffer is donated to an aliased output.

mod common;
use common::*;
use pjrt_client::{CompileOptions, Donation, ElementType, ExecuteOptions, Program};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const DONATING: &str = r#"module @donate {
  func.func public @main(%arg0: tensor<64xf32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
    %0 = stablehlo.add %arg0, %arg1 : tensor<64xf32>
    %1 = stablehlo.multiply %arg0, %arg1 : tensor<64xf32>
    return %0, %1 : tensor<64xf32>, tensor<64xf32>
  }
}"#;

#[repr(C, align(64))]
struct Aligned([f32; 64]);

#[test]
fn donated_mutable_view_is_written_in_place() {
    let c = client(1);
    let exe = c
        .compile(&Program::mlir_text(DONATING), &CompileOptions::default())
        .unwrap();
    let mut host = Box::new(Aligned([0f32; 64]));
    for (i, v) in host.0.iter_mut().enumerate() {
        *v = i as f32;
    }
    let ptr = host.0.as_mut_ptr();
    let released = Arc::new(AtomicBool::new(false));
    let r = released.clone();
    // SAFETY: `host` is aligned, outlives the buffer (checked through
    // `released`) and is not touched while the buffer lives.
    let a = unsafe {
        c.create_mutable_view(
            ptr.cast(),
            ElementType::F32,
            &[64],
            None,
            Box::new(move || r.store(true, Ordering::SeqCst)),
        )
        .unwrap()
    };
    assert_eq!(a.unsafe_pointer().unwrap(), ptr as usize, "not zero-copy");
    let b = c.buffer_from_host(&[2f32; 64], &[64], None).unwrap();
    let out = exe
        .execute_with(
            &[&a, &b],
            &ExecuteOptions {
                donation: Donation::Only(&[0]),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(a.is_deleted());
    let prod = out[1].to_host::<f32>().unwrap();
    assert_eq!(prod, (0..64).map(|i| 2.0 * i as f32).collect::<Vec<_>>());
    assert_eq!(
        out[0].unsafe_pointer().unwrap(),
        ptr as usize,
        "not in place"
    );
    drop(a);
    drop(out);
    assert!(released.load(Ordering::SeqCst), "owner not released");
    let want: Vec<f32> = (0..64).map(|i| i as f32 + 2.0).collect();
    assert_eq!(host.0.to_vec(), want);
}
