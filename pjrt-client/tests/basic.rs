//! Compile + run a small StableHLO module and check numerics.

mod common;
use common::*;
use pjrt_client::{CompileOptions, ElementType, Program};

#[test]
fn compile_and_run_sine_exp() {
    let c = client(1);
    assert_eq!(c.platform_name(), "cpu");
    let exe = c
        .compile(
            &Program::mlir_text(&sine_exp_module(64)),
            &CompileOptions::default(),
        )
        .unwrap();
    assert_eq!(exe.num_outputs(), 1);
    assert_eq!(exe.output_info()[0].dtype, ElementType::F32);
    assert_eq!(&exe.output_info()[0].dims[..], &[64]);
    let params = exe.parameter_info().expect("parameter info");
    assert_eq!(params.len(), 2);
    let x = random_f32(64, 1);
    let y = random_f32(64, 2);
    let bx = c.buffer_from_host(&x, &[64], None).unwrap();
    let by = c.buffer_from_host(&y, &[64], None).unwrap();
    let out = exe.execute(&[&bx, &by]).unwrap();
    let got = out[0].to_host::<f32>().unwrap();
    let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a.sin() * b.exp()).collect();
    assert_close(&got, &want, 1e-5);
    // Inputs are reusable.
    let out2 = exe.execute(&[&bx, &by]).unwrap();
    assert_close(&out2[0].to_host::<f32>().unwrap(), &want, 1e-5);
}

#[test]
fn optimized_hlo_lists_fusions() {
    let c = client(1);
    let exe = c
        .compile(
            &Program::mlir_text(&sine_exp_module(1024)),
            &CompileOptions::default(),
        )
        .unwrap();
    let hlo = exe.optimized_hlo().unwrap();
    let fusions = hlo.fusions();
    eprintln!("{}", hlo.to_text());
    assert!(
        fusions
            .iter()
            .any(|f| f.contains_all(&["sine", "exponential"])),
        "expected a fusion containing sine and exponential: {fusions:?}"
    );
}

#[test]
fn discovery_finds_cpu_plugin_via_entry_points() {
    let all = pjrt_client::discovery::list_plugins();
    assert!(
        all.iter()
            .any(|p| p.source == "entry_point" && p.name.contains("cpu")),
        "expected the xla_plugins entry point of the CPU wheel: {all:?}"
    );
    let p = plugin();
    let (major, minor) = p.api().version();
    assert_eq!(major, 0);
    assert!(minor > 0);
    let attrs = p.attributes().unwrap();
    assert!(attrs.iter().any(|(k, _)| k == "xla_version"), "{attrs:?}");
}
