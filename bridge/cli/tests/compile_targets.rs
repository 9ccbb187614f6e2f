//! `hlobridge compile --target ...`: deviceless compiles for TPU v5e/v6e
//! (libtpu) and H100 (the CUDA PJRT plugin) of a matmul+tanh, a JAX train
//! step and Pallas kernels from the shared corpus; an over-HBM program is
//! the named `OutOfMemory` error with exit status 2.
//!
//! The compilers are installed by `scripts/setup.sh` into `.venv/accel`.
//! Without them these tests skip with a message, except under `CI=true`
//! (unless `HLOBRIDGE_ACCEL=0`), where a missing compiler fails.

use std::path::{Path, PathBuf};
use std::process::Command;

fn installed(what: &str, found: Option<PathBuf>) -> bool {
    if found.is_some() {
        return true;
    }
    let msg = format!("{what} not installed (scripts/setup.sh installs it into .venv/accel)");
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let opted_out = hlobridge_config::get(hlobridge_config::Var::Accel).as_deref() == Some("0");
    assert!(!ci || opted_out, "{msg}; CI=true requires it");
    eprintln!("skipping: {msg}");
    false
}

fn tpu() -> bool {
    installed("libtpu", pjrt_client::accel::find_libtpu())
}

fn cuda() -> bool {
    installed(
        "the CUDA PJRT plugin",
        pjrt_client::accel::find_cuda_plugin(),
    ) && installed(
        "nvidia-cuda-nvcc-cu12",
        pjrt_client::accel::find_cuda_data_dir(),
    )
}

fn corpus(rel: &str) -> PathBuf {
    let root = hlobridge_config::path(hlobridge_config::Var::Shared)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"));
    let p = root.join("corpus").join(rel);
    assert!(p.exists(), "corpus file {} missing", p.display());
    p
}

fn write_tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hlobridge_compile_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs `hlobridge compile FILE --target T --json ARGS`; returns (status,
/// parsed JSON report or Null, stderr).
fn compile(file: &Path, target: &str, args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hlobridge"))
        .arg("compile")
        .arg(file)
        .args(["--target", target, "--json"])
        .args(args)
        .output()
        .expect("run hlobridge");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let json = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(serde_json::Value::Null);
    (
        out.status.code().unwrap_or(-1),
        json,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

const MATMUL_TANH: &str = r#"module @matmul_tanh {
  func.func public @main(%a: tensor<256x512xf32>, %b: tensor<512x128xf32>) -> tensor<256x128xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<256x512xf32>, tensor<512x128xf32>) -> tensor<256x128xf32>
    %1 = stablehlo.tanh %0 : tensor<256x128xf32>
    return %1 : tensor<256x128xf32>
  }
}"#;

fn check_matmul(r: &serde_json::Value, platform: &str) {
    assert_eq!(r["platform"], platform, "{r}");
    let m = &r["memory"];
    // Arguments 256x512 + 512x128 f32, output 256x128 f32: exact sizes.
    assert_eq!(m["arguments"], (256 * 512 + 512 * 128) * 4, "{r}");
    assert_eq!(m["outputs"], 256 * 128 * 4, "{r}");
    assert!(r["serialized_bytes"].as_u64().unwrap() > 1000, "{r}");
    assert!(
        r["device_memory_capacity"].as_i64().unwrap() > 1 << 30,
        "{r}"
    );
    assert!(!r["fusions"].as_object().unwrap().is_empty(), "{r}");
}

#[test]
fn tpu_v5e_and_v6e_compile_matmul_tanh() {
    if !tpu() {
        return;
    }
    let f = write_tmp("mm.mlir", MATMUL_TANH);
    for (target, kind) in [
        ("tpu:v5e:2x2", "TPU v5 lite"),
        ("tpu:v6e:2x2", "TPU v6 lite"),
    ] {
        let exe = f.with_extension(target.replace(':', "_"));
        let (code, r, err) = compile(&f, target, &["-o", exe.to_str().unwrap()]);
        assert_eq!(code, 0, "{target}: {err}");
        check_matmul(&r, "tpu");
        assert_eq!(r["device_kind"], kind);
        assert_eq!(r["topology_devices"], 4);
        assert!(r["generated_code_bytes"].as_i64().unwrap() > 0, "{r}");
        let written = std::fs::metadata(&exe).unwrap().len();
        assert_eq!(written, r["serialized_bytes"].as_u64().unwrap());
    }
}

#[test]
fn tpu_compiles_a_pallas_kernel_and_a_jax_train_step() {
    if !tpu() {
        return;
    }
    let (code, r, err) = compile(&corpus("pallas/pallas_matmul_tpu.mlir"), "tpu:v5e", &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(r["custom_calls"]["tpu_custom_call"], 1, "{r}");
    assert_eq!(r["kernels"][0]["backend"], "Pallas TPU (Mosaic)", "{r}");
    let (code, r, err) = compile(&corpus("jax/adam_train_step_manual.mlir"), "tpu:v6e", &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        r["memory"]["alias"].as_i64().unwrap() > 0,
        "donated state aliases: {r}"
    );
}

#[test]
fn over_hbm_program_is_out_of_memory_with_exit_2() {
    if !tpu() {
        return;
    }
    let f = write_tmp(
        "big.mlir",
        r#"module @big {
  func.func public @main(%a: tensor<40000x40000xf32>) -> tensor<40000x40000xf32> {
    %0 = stablehlo.exponential %a : tensor<40000x40000xf32>
    %1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<40000x40000xf32>) -> tensor<40000x40000xf32>
    %2 = stablehlo.add %0, %1 : tensor<40000x40000xf32>
    return %2 : tensor<40000x40000xf32>
  }
}"#,
    );
    let (code, _, err) = compile(&f, "tpu:v5e", &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("OutOfMemory: the program does not fit HBM on tpu:v5e"),
        "{err}"
    );
    assert!(err.contains("available 15.75G"), "{err}");
    // v5p has 95 GiB of HBM: the same program fits.
    let (code, r, err) = compile(&f, "tpu:v5p", &[]);
    assert_eq!(code, 0, "{err}");
    assert!(r["memory"]["total"].as_i64().unwrap() > 16 << 30, "{r}");
}

#[test]
fn cuda_h100_compiles_matmul_tanh_and_a_triton_kernel() {
    if !cuda() {
        return;
    }
    let f = write_tmp("mm_cuda.mlir", MATMUL_TANH);
    let (code, r, err) = compile(&f, "cuda:h100", &[]);
    assert_eq!(code, 0, "{err}");
    check_matmul(&r, "cuda");
    assert_eq!(r["device_kind"], "NVIDIA H100 80GB HBM3");
    let (code, r, err) = compile(
        &corpus("pallas/pallas_matmul_cuda_triton.mlir"),
        "cuda:h100",
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(r["custom_calls"]["__gpu$xla.gpu.triton"], 1, "{r}");
    assert_eq!(r["kernels"][0]["backend"], "Pallas Triton", "{r}");
    let (code, r, err) = compile(&f, "cuda:h100:8", &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(r["topology_devices"], 8, "{r}");
}

#[test]
fn unknown_target_and_cross_platform_kernel_are_named_errors() {
    let f = write_tmp("mm_unknown.mlir", MATMUL_TANH);
    let (code, _, err) = compile(&f, "tpu:v99", &[]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("UnknownTarget:") && err.contains("tpu:v5e"),
        "{err}"
    );
    if tpu() {
        let (code, _, err) = compile(
            &corpus("pallas/pallas_matmul_cuda_triton.mlir"),
            "tpu:v5e",
            &[],
        );
        assert_eq!(code, 1);
        assert!(err.contains("CompileFailed:"), "{err}");
    }
}

/// A stitch plan of two segments (a matmul+tanh and an elementwise scale),
/// written next to its modules.
fn write_plan(dir_name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "hlobridge_compile_plan_{}_{dir_name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("mm.mlir"), MATMUL_TANH).unwrap();
    std::fs::write(
        dir.join("scale.mlir"),
        r#"module @scale {
  func.func public @main(%a: tensor<256x128xf32>) -> tensor<256x128xf32> {
    %c = stablehlo.constant dense<2.0> : tensor<256x128xf32>
    %0 = stablehlo.multiply %a, %c : tensor<256x128xf32>
    return %0 : tensor<256x128xf32>
  }
}"#,
    )
    .unwrap();
    let plan = dir.join("plan.toml");
    std::fs::write(
        &plan,
        r#"[[input]]
name = "a"
type = "tensor<256x512xf32>"
[[input]]
name = "b"
type = "tensor<512x128xf32>"
[[segment]]
name = "mm"
module = "mm.mlir"
inputs = ["a", "b"]
outputs = ["h"]
[[segment]]
name = "scale"
module = "scale.mlir"
inputs = ["h"]
outputs = ["out"]
[[output]]
handle = "out"
"#,
    )
    .unwrap();
    plan
}

#[test]
fn stitch_plan_compiles_for_cpu_and_tpu() {
    let plan = write_plan("cpu_tpu");
    // cpu: compiled through a CPU client (xla-cpu-pjrt has no topology API).
    let (code, r, err) = compile(&plan, "cpu", &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(r["platform"], "cpu", "{r}");
    assert!(
        r["program"].as_str().unwrap().ends_with("(stitched)"),
        "{r}"
    );
    assert!(r["serialized_bytes"].as_u64().unwrap() > 0, "{r}");
    if tpu() {
        let (code, r, err) = compile(&plan, "tpu:v5e", &[]);
        assert_eq!(code, 0, "{err}");
        check_matmul(&r, "tpu");
    }
    // A plan that does not stitch is a named failure, not a panic.
    let bad = plan.with_file_name("bad.toml");
    std::fs::write(
        &bad,
        "[[segment]]\nname = \"x\"\nmodule = \"missing.mlir\"\n",
    )
    .unwrap();
    let (code, _, err) = compile(&bad, "cpu", &[]);
    assert_eq!(code, 1);
    assert!(err.contains("CompileFailed: stitch"), "{err}");
}

/// A Shardy program over `n` devices: rows sharded on axis "x", a sum
/// across it (an all-reduce).
fn sharded_module(n: usize) -> String {
    format!(
        r#"module @sharded attributes {{mhlo.num_partitions = {n} : i32, mhlo.num_replicas = 1 : i32}} {{
  sdy.mesh @mesh = <["x"={n}]>
  func.func public @main(%a: tensor<64x256xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{"x"}}, {{}}]>}}) -> (tensor<256xf32> {{sdy.sharding = #sdy.sharding<@mesh, [{{}}]>}}) {{
    %0 = stablehlo.tanh %a : tensor<64x256xf32>
    %z = stablehlo.constant dense<0.0> : tensor<f32>
    %1 = stablehlo.reduce(%0 init: %z) applies stablehlo.add across dimensions = [0] : (tensor<64x256xf32>, tensor<f32>) -> tensor<256xf32>
    return %1 : tensor<256xf32>
  }}
}}"#
    )
}

#[test]
fn sharded_programs_compile_for_4_tpu_and_8_gpu_devices() {
    if tpu() {
        let f = write_tmp("sharded4.mlir", &sharded_module(4));
        let (code, r, err) = compile(&f, "tpu:v5e:2x2", &[]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(r["partitions"], 4, "{r}");
        // Each device holds 16 of the 64 rows of f32[64,256].
        assert_eq!(r["memory"]["arguments"], 16 * 256 * 4, "{r}");
    }
    if cuda() {
        let f = write_tmp("sharded8.mlir", &sharded_module(8));
        let (code, r, err) = compile(&f, "cuda:h100:8", &[]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            (r["partitions"].clone(), r["topology_devices"].clone()),
            (8.into(), 8.into()),
            "{r}"
        );
        assert_eq!(r["memory"]["arguments"], 8 * 256 * 4, "{r}");
        // More partitions than the topology has devices: a named failure.
        let (code, _, err) = compile(&f, "cuda:h100:4", &[]);
        assert_eq!(code, 1);
        assert!(
            err.contains("CompileFailed: invalid argument: the program needs 8 devices"),
            "{err}"
        );
    }
}
