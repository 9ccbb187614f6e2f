//! PJRT execute overhead and compile time on the CPU plugin.
//!
//! - `execute/pjrt_client`: `LoadedExecutable::execute` of a tiny program
//!   with reused inputs, including creating and dropping the output buffer.
//! - `execute/raw_c_api`: the same call made directly through the plugin's
//!   function table with prebuilt argument structs (no checks), plus
//!   `PJRT_Buffer_Destroy` of the output: the anchor for the overhead ratio.
//! - `compile/small_module`: compile time of a small StableHLO module.

use criterion::{criterion_group, criterion_main, Criterion};
use pjrt_client::ffi::{self, PjrtStruct};
use pjrt_client::{Client, ClientOptions, CompileOptions, Plugin, Program};
use std::time::Duration;

const TINY: &str = r#"module @tiny {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}"#;

const SMALL: &str = r#"module @small {
  func.func public @main(%arg0: tensor<64x64xf32>, %arg1: tensor<64x64xf32>) -> tensor<64xf32> {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %1 = stablehlo.sine %0 : tensor<64x64xf32>
    %2 = stablehlo.exponential %1 : tensor<64x64xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %3 = stablehlo.reduce(%2 init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<64x64xf32>, tensor<f32>) -> tensor<64xf32>
    return %3 : tensor<64xf32>
  }
}"#;

fn client() -> Client {
    let plugin = Plugin::discover().expect("no PJRT plugin found (run `make` to set up .venv)");
    Client::new(&plugin, &ClientOptions::new().cpu_device_count(1)).expect("client")
}

fn bench_execute(c: &mut Criterion) {
    let client = client();
    let exe = client
        .compile(&Program::mlir_text(TINY), &CompileOptions::default())
        .unwrap();
    let x = client
        .buffer_from_host(&[1f32, 2., 3., 4.], &[4], None)
        .unwrap();
    let y = client
        .buffer_from_host(&[5f32, 6., 7., 8.], &[4], None)
        .unwrap();
    assert_eq!(
        exe.execute(&[&x, &y]).unwrap()[0].to_host::<f32>().unwrap(),
        vec![6., 8., 10., 12.]
    );

    let mut g = c.benchmark_group("execute");
    g.measurement_time(Duration::from_secs(4));
    g.bench_function("pjrt_client", |b| {
        b.iter(|| {
            let out = exe.execute(&[&x, &y]).unwrap();
            std::hint::black_box(&out);
        })
    });

    // Raw C API anchor: same table, prebuilt structs, no checks.
    let table = client.api().table();
    let execute = table.PJRT_LoadedExecutable_Execute.unwrap();
    let destroy = table.PJRT_Buffer_Destroy.unwrap();
    let args = [x.raw(), y.raw()];
    let arg_lists = [args.as_ptr()];
    let non_donatable = [0i64, 1];
    g.bench_function("raw_c_api", |b| {
        b.iter(|| {
            let mut out: [*mut ffi::PJRT_Buffer; 1] = [std::ptr::null_mut()];
            let out_lists = [out.as_mut_ptr()];
            let mut opts = ffi::PJRT_ExecuteOptions::new();
            opts.non_donatable_input_indices = non_donatable.as_ptr();
            opts.num_non_donatable_input_indices = 2;
            let mut a = ffi::PJRT_LoadedExecutable_Execute_Args::new();
            a.executable = exe.raw();
            a.options = &mut opts;
            a.argument_lists = arg_lists.as_ptr();
            a.num_devices = 1;
            a.num_args = 2;
            a.output_lists = out_lists.as_ptr();
            // SAFETY: all pointers are valid for the duration of the call.
            let err = unsafe { execute(&mut a) };
            assert!(err.is_null());
            let mut d = ffi::PJRT_Buffer_Destroy_Args::new();
            d.buffer = out[0];
            // SAFETY: we own the output buffer.
            let err = unsafe { destroy(&mut d) };
            assert!(err.is_null());
        })
    });
    g.finish();
}

fn bench_compile(c: &mut Criterion) {
    let client = client();
    let mut g = c.benchmark_group("compile");
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("small_module", |b| {
        b.iter(|| {
            client
                .compile(&Program::mlir_text(SMALL), &CompileOptions::default())
                .unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench_execute, bench_compile);
criterion_main!(benches);
