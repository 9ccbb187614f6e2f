//! SPMD on 4 CPU devices (GSPMD and Shardy) checked against the unsharded
//! result.

mod common;
use common::*;
use pjrt_client::{Buffer, CompileOptions, ExecuteOptions, Partitioner, Program};

const BODY: &str = r#"
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<16x8xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
    %1 = stablehlo.sine %0 : tensor<16x4xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = stablehlo.reduce(%1 init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<16x4xf32>, tensor<f32>) -> tensor<4xf32>
    return %1, %2 : tensor<16x4xf32>, tensor<4xf32>
  }
}"#;

fn unsharded() -> String {
    format!(
        "module @plain {{\n  func.func public @main(%arg0: tensor<16x8xf32>, %arg1: tensor<8x4xf32>) -> (tensor<16x4xf32>, tensor<4xf32>) {{{BODY}"
    )
}

fn gspmd() -> String {
    format!(
        r#"module @gspmd attributes {{mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32}} {{
  func.func public @main(%arg0: tensor<16x8xf32> {{mhlo.sharding = "{{devices=[4,1]<=[4]}}"}}, %arg1: tensor<8x4xf32> {{mhlo.sharding = "{{replicated}}"}}) -> (tensor<16x4xf32> {{mhlo.sharding = "{{devices=[4,1]<=[4]}}"}}, tensor<4xf32> {{mhlo.sharding = "{{replicated}}"}}) {{{BODY}"#
    )
}

fn shardy() -> String {
    format!(
        r#"module @shardy attributes {{mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <["x"=4]>
  func.func public @main(%arg0: tensor<16x8xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"x"}}, {{}}]>}}, %arg1: tensor<8x4xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{}}, {{}}]>}}) -> (tensor<16x4xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"x"}}, {{}}]>}}, tensor<4xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{}}]>}}) {{{BODY}"#
    )
}

fn check(module: &str, partitioner: Partitioner) {
    check_with(&client(4), module, partitioner, 11, 1);
}

/// Compiles `module` on `c`, runs it `runs` times on inputs drawn from
/// `seed` and checks every run against the unsharded program.
fn check_with(
    c: &pjrt_client::Client,
    module: &str,
    partitioner: Partitioner,
    seed: u64,
    runs: usize,
) {
    assert_eq!(c.device_count(), 4);
    let x = random_f32(16 * 8, seed);
    let w = random_f32(8 * 4, seed + 1);

    // Unsharded reference on one device.
    let plain = c
        .compile(
            &Program::mlir_text(&unsharded()),
            &CompileOptions::default(),
        )
        .unwrap();
    let bx = c.buffer_from_host(&x, &[16, 8], None).unwrap();
    let bw = c.buffer_from_host(&w, &[8, 4], None).unwrap();
    let want = plain.execute(&[&bx, &bw]).unwrap();
    let want_y = want[0].to_host::<f32>().unwrap();
    let want_s = want[1].to_host::<f32>().unwrap();

    let exe = c
        .compile(
            &Program::mlir_text(module),
            &CompileOptions::spmd(4, partitioner),
        )
        .unwrap();
    assert_eq!(exe.num_devices(), 4);
    assert_eq!(exe.num_partitions(), 4);
    let params = exe.parameter_info().expect("parameter info");
    assert_eq!(&params[0].dims[..], &[4, 8], "per-device shard shape");
    let devices = exe.devices();
    let mut args: Vec<Vec<Buffer>> = Vec::new();
    for (d, dev) in devices.iter().enumerate() {
        let shard = &x[d * 4 * 8..(d + 1) * 4 * 8];
        args.push(vec![
            c.buffer_from_host(shard, &[4, 8], Some(dev)).unwrap(),
            c.buffer_from_host(&w, &[8, 4], Some(dev)).unwrap(),
        ]);
    }
    let refs: Vec<Vec<&Buffer>> = args.iter().map(|v| v.iter().collect()).collect();
    for _ in 0..runs {
        let out = exe
            .execute_sharded(&refs, &ExecuteOptions::default())
            .unwrap();
        assert_eq!(out.len(), 4);
        let mut got_y = Vec::new();
        for (d, o) in out.iter().enumerate() {
            assert_eq!(o.len(), 2);
            assert_eq!(o[0].device().unwrap(), devices[d]);
            got_y.extend(o[0].to_host::<f32>().unwrap());
            assert_close(&o[1].to_host::<f32>().unwrap(), &want_s, 1e-4);
        }
        assert_close(&got_y, &want_y, 1e-4);
    }
}

/// Sharded executions in flight at once, from several threads and from
/// clients whose devices share ids, each with its own inputs: every result
/// must be its own. With one launch id for all of them the plugin's
/// collective rendezvous met across executions (crashes, or one run's
/// all-reduce reading another's buffers).
#[test]
fn concurrent_sharded_executions_stay_apart() {
    let shared = client(4);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let shared = &shared;
            s.spawn(move || {
                let own;
                let c = if t % 2 == 0 {
                    shared
                } else {
                    own = client(4);
                    &own
                };
                let (module, partitioner) = if t < 2 {
                    (gspmd(), Partitioner::Gspmd)
                } else {
                    (shardy(), Partitioner::Shardy)
                };
                check_with(c, &module, partitioner, 100 + 10 * t, 40);
            });
        }
    });
}

#[test]
fn launch_ids_are_fresh_and_never_zero() {
    let ids: Vec<i32> = (0..1000).map(|_| pjrt_client::next_launch_id()).collect();
    assert!(ids.iter().all(|&i| i > 0));
    let distinct: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len());
}

#[test]
fn spmd_gspmd_matches_unsharded() {
    check(&gspmd(), Partitioner::Gspmd);
}

#[test]
fn spmd_shardy_matches_unsharded() {
    check(&shardy(), Partitioner::Shardy);
}

#[test]
fn spmd_wrong_device_count_is_an_error() {
    let c = client(4);
    let exe = c
        .compile(
            &Program::mlir_text(&gspmd()),
            &CompileOptions::spmd(4, Partitioner::Gspmd),
        )
        .unwrap();
    let b = c.buffer_from_host(&[0f32; 32], &[4, 8], None).unwrap();
    let err = exe.execute(&[&b, &b]).unwrap_err();
    assert!(
        matches!(
            err,
            pjrt_client::Error::DeviceCount {
                expected: 4,
                got: 1
            }
        ),
        "{err}"
    );
}
