//! Fusion is proven: a torch elementwise segment (`sine`) feeding a JAX
//! elementwise segment (`exponential`), stitched into one module and
//! compiled by the CPU plugin, shows ONE XLA fusion holding ops from both
//! sides; the computation of a dead torch output (`cosine`) is gone; and
//! the numbers match a host computation on random inputs.

use hlobridge::stitch::{stitch, Program, Segment};
use pjrt_client::{Client, ClientOptions, CompileOptions, Plugin, Program as PjrtProgram};

const TORCH: &str = r#"module @IrToHlo.9 {
  func.func @main(%arg0: tensor<256xf32>, %arg1: tensor<256xf32>) -> (tensor<256xf32>, tensor<256xf32>) {
    %0 = stablehlo.sine %arg0 : tensor<256xf32>
    %1 = stablehlo.multiply %0, %arg1 : tensor<256xf32>
    %2 = stablehlo.cosine %arg1 : tensor<256xf32>
    return %1, %2 : tensor<256xf32>, tensor<256xf32>
  }
}
"#;

const JAX: &str = r#"module @jit_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<256xf32>) -> (tensor<256xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.exponential %arg0 : tensor<256xf32>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<256xf32>
    %1 = stablehlo.add %0, %cst : tensor<256xf32>
    return %1 : tensor<256xf32>
  }
}
"#;

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed ^ 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[test]
fn torch_sine_and_jax_exp_share_one_fusion_and_dead_code_is_gone() {
    let program = Program::new()
        .input("x", "tensor<256xf32>")
        .input("w", "tensor<256xf32>")
        .segment(
            Segment::from_text("torch_pre", "torch.mlir", TORCH)
                .unwrap()
                .producer("torch")
                .inputs(&["x", "w"])
                .outputs(&["h", "dead"]),
        )
        .segment(
            Segment::from_text("jax_act", "jax.mlir", JAX)
                .unwrap()
                .producer("jax")
                .inputs(&["h"])
                .outputs(&["y"]),
        )
        .output("y");
    let fused = stitch(&program).unwrap();
    let text = hlobridge::print_module(&fused.module, &Default::default());
    assert!(!text.contains("cosine"), "stitcher left dead code:\n{text}");

    let plugin = Plugin::discover().expect("CPU plugin (run `make` to set up .venv)");
    let client = Client::new(&plugin, &ClientOptions::new().cpu_device_count(1)).unwrap();
    let exe = client
        .compile(&PjrtProgram::mlir_text(&text), &CompileOptions::default())
        .unwrap();
    let hlo = exe.optimized_hlo().unwrap();
    let fusions = hlo.fusions();
    let both: Vec<_> = fusions
        .iter()
        .filter(|f| f.contains_all(&["sine", "exponential"]))
        .collect();
    assert_eq!(
        both.len(),
        1,
        "expected one fusion holding torch's sine and jax's exponential:\n{}",
        hlo.to_text()
    );
    let counts = hlo.opcode_counts();
    assert!(
        !counts.contains_key("cosine"),
        "dead output still computed: {counts:?}"
    );

    let x = random(256, 1);
    let w = random(256, 2);
    let bx = client.buffer_from_host(&x, &[256], None).unwrap();
    let bw = client.buffer_from_host(&w, &[256], None).unwrap();
    let out = exe.execute(&[&bx, &bw]).unwrap();
    let got = out[0].to_host::<f32>().unwrap();
    for i in 0..256 {
        let want = (x[i].sin() * w[i]).exp() + 1.0;
        assert!(
            (got[i] - want).abs() <= 1e-5 * want.abs().max(1.0),
            "element {i}: {} vs {want}",
            got[i]
        );
    }
}
