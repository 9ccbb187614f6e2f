//! Deviceless compiles for TPU (libtpu) and NVIDIA GPU (the CUDA PJRT
//! plugin) of StableHLO programs, against topologies with no device here.
//!
//! The plugins are installed by `scripts/setup.sh` into `.venv/accel`. When
//! one is missing these tests skip with a message, except under `CI=true`
//! where setup must have installed them and a missing plugin fails.

use pjrt_client::{accel, CompileOptions, OptionValue, Plugin, Program, Topology};
use std::sync::OnceLock;

fn require(what: &str, found: Option<std::path::PathBuf>) -> Option<std::path::PathBuf> {
    if found.is_none() {
        let msg = format!("{what} not installed (scripts/setup.sh installs it into .venv/accel)");
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        let opted_out = hlobridge_config::get(hlobridge_config::Var::Accel).as_deref() == Some("0");
        assert!(!ci || opted_out, "{msg}; CI=true requires it");
        eprintln!("skipping: {msg}");
    }
    found
}

/// Whether libtpu's load-time variables ([`accel::TPU_LOAD_ENV`]) are all
/// in this process's environment. The test harness runs tests on threads,
/// so hlobridge refuses to write them here (`Error::TpuEnvironment`); the TPU
/// tests then run in a child started with them set
/// ([`tpu_tests_run_in_a_process_started_with_libtpus_variables`]).
fn tpu_env_present() -> bool {
    accel::TPU_LOAD_ENV
        .iter()
        .all(|(k, _)| std::env::var_os(k).is_some())
}

fn tpu() -> Option<Plugin> {
    static P: OnceLock<Option<Plugin>> = OnceLock::new();
    P.get_or_init(|| {
        let path = require("libtpu", accel::find_libtpu())?;
        if !tpu_env_present() {
            return None; // covered by the child run
        }
        assert!(!accel::skip_tpu_metadata_query().expect("variables present"));
        Some(Plugin::load(path).expect("load libtpu"))
    })
    .clone()
}

/// TPU tests whose plugin needs the variables libtpu reads at load.
const TPU_TESTS: &[&str] = &[
    "tpu_v5e_topology_and_compile",
    "compile_for_target_cpu_and_tpu",
];

#[test]
fn tpu_tests_run_in_a_process_started_with_libtpus_variables() {
    if tpu_env_present() || require("libtpu", accel::find_libtpu()).is_none() {
        return; // this is the child, or there is no libtpu
    }
    // In this multithreaded process a missing variable is refused by name,
    // and nothing is written to the environment.
    let e = accel::skip_tpu_metadata_query().unwrap_err();
    assert!(
        matches!(e, pjrt_client::Error::TpuEnvironment { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("TPU_SKIP_MDS_QUERY=1"), "{e}");
    assert!(!tpu_env_present());
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(TPU_TESTS).args(["--exact", "--test-threads=1"]);
    for (k, v) in accel::TPU_LOAD_ENV {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the TPU tests in a child");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("{} passed", TPU_TESTS.len())),
        "{text}"
    );
}

const TANH_MATMUL: &str = r#"module @m {
  func.func public @main(%a: tensor<256x512xf32>, %b: tensor<512x128xf32>) -> tensor<256x128xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<256x512xf32>, tensor<512x128xf32>) -> tensor<256x128xf32>
    %1 = stablehlo.tanh %0 : tensor<256x128xf32>
    return %1 : tensor<256x128xf32>
  }
}"#;

#[test]
fn tpu_v5e_topology_and_compile() {
    let Some(p) = tpu() else { return };
    // libtpu's C API is newer than our 0.81 declarations: accepted by size.
    assert!(p.api().version().1 > 81, "{:?}", p.api().version());
    assert!(p.api().struct_size() > std::mem::size_of::<pjrt_client::ffi::PJRT_Api>());
    let t = Topology::new(&p, "v5e:2x2", &[]).expect("topology");
    assert_eq!(t.platform_name().unwrap(), "tpu");
    let devs = t.devices().unwrap();
    assert_eq!(devs.len(), 4);
    assert_eq!(devs[0].kind, "TPU v5 lite");
    assert!(devs
        .iter()
        .all(|d| d.attributes.iter().any(|(k, _)| k == "coords")));
    let exe = t
        .compile(&Program::mlir_text(TANH_MATMUL), &CompileOptions::default())
        .expect("compile");
    assert_eq!(exe.name().unwrap(), "m");
    let code = exe.generated_code_size().unwrap();
    assert!(code > 0);
    let m = exe.memory_stats().unwrap();
    assert_eq!(m.arguments, (256 * 512 + 512 * 128) * 4);
    assert_eq!(m.outputs, 256 * 128 * 4);
    assert_eq!(m.generated_code, code);
    assert!(exe.serialize().unwrap().len() as i64 > code / 2);
    let txt = exe.optimized_text().unwrap();
    assert!(txt.contains("tanh") && txt.contains("ENTRY"), "{txt}");
    // A bad topology name is a PJRT error, not a crash.
    assert!(matches!(
        Topology::new(&p, "v99:1x1", &[]),
        Err(pjrt_client::Error::Pjrt { .. })
    ));
}

fn cuda() -> Option<Plugin> {
    static P: OnceLock<Option<Plugin>> = OnceLock::new();
    P.get_or_init(|| {
        let path = require("the CUDA PJRT plugin", accel::find_cuda_plugin())?;
        let data = require(
            "nvidia-cuda-nvcc-cu12 (ptxas, libdevice)",
            accel::find_cuda_data_dir(),
        )?;
        accel::set_cuda_data_dir_flag(&data);
        Some(Plugin::load(path).expect("load the CUDA plugin"))
    })
    .clone()
}

fn h100_config() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/targets/h100_sxm.txtpb"
    ))
    .unwrap()
}

#[test]
fn cuda_h100_compile() {
    let Some(p) = cuda() else { return };
    assert!(p.api().version().1 > 81, "{:?}", p.api().version());
    let opts = vec![
        ("topology".to_string(), OptionValue::String("1x1x1".into())),
        (
            "target_config".to_string(),
            OptionValue::String(h100_config()),
        ),
    ];
    let t = Topology::new(&p, "", &opts).expect("topology");
    assert_eq!(t.platform_name().unwrap(), "cuda");
    let devs = t.devices().unwrap();
    assert_eq!(devs.len(), 1);
    assert_eq!(devs[0].kind, "NVIDIA H100 80GB HBM3");
    let exe = t
        .compile(&Program::mlir_text(TANH_MATMUL), &{
            let mut o = CompileOptions::default();
            accel::add_cuda_xla_options(&mut o);
            o
        })
        .expect("compile");
    let m = exe.memory_stats().unwrap();
    assert_eq!(m.arguments, (256 * 512 + 512 * 128) * 4);
    assert_eq!(m.outputs, 256 * 128 * 4);
    // The GEMM becomes a Triton/custom fusion ("gemm_fusion").
    let h = exe.optimized_hlo().unwrap();
    assert!(
        h.fusions().iter().any(|f| f.kind == "kCustom"),
        "{}",
        h.to_text()
    );
    assert!(!exe.serialize().unwrap().is_empty());
    // Without target_config the plugin has no GPU to describe.
    assert!(Topology::new(&p, "", &opts[..1]).is_err());
}

/// `targets::compile_for_target`: the shared path of `hlobridge compile` and
/// `hb.compile_for`, for the `cpu` target (a CPU client) and, when
/// installed, a TPU target, with the same report.
#[test]
fn compile_for_target_cpu_and_tpu() {
    use pjrt_client::targets::{compile_for_target, Target};
    let cpu = Target::resolve("cpu", None).unwrap();
    let c = compile_for_target(&cpu, TANH_MATMUL, &CompileOptions::default(), None)
        .expect("cpu compile");
    assert_eq!(c.platform, "cpu");
    assert!(!c.serialized.is_empty());
    assert!(c.capacity.is_none());
    if let Some(m) = c.memory {
        assert_eq!(m.arguments, (256 * 512 + 512 * 128) * 4);
        assert_eq!(m.outputs, 256 * 128 * 4);
    }
    // Two partitions need two devices: named, not a crash.
    let two = CompileOptions::spmd(2, pjrt_client::Partitioner::Shardy);
    let e = compile_for_target(&cpu, TANH_MATMUL, &two, None).unwrap_err();
    assert!(e.to_string().contains("needs 2 devices"), "{e}");
    if tpu().is_none() {
        return;
    }
    let t = Target::resolve("tpu:v6e", None).unwrap();
    let c =
        compile_for_target(&t, TANH_MATMUL, &CompileOptions::default(), None).expect("tpu compile");
    assert_eq!((c.platform.as_str(), c.topology_devices), ("tpu", 4));
    assert_eq!(c.device_kind, "TPU v6 lite");
    let m = c.memory.expect("memory stats");
    assert_eq!(m.arguments, (256 * 512 + 512 * 128) * 4);
    assert!(c.capacity.unwrap() > 30 << 30);
    assert!(c.fusions.values().sum::<usize>() > 0);
}
