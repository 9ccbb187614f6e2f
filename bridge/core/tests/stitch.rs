//! Stitcher tests on small plans: the fused module (insta snapshots),
//! structural properties (one @main, dead code gone, reused segments
//! called), and every error the plan can produce (snapshots too).

use hlobridge::stitch::{stitch, Plan, Program, Segment};
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/stitch")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(fixtures().join(name)).unwrap()
}

fn seg(name: &str, file: &str) -> Segment {
    Segment::from_text(name, file, &read(file)).unwrap()
}

fn print(m: &hlobridge::Module) -> String {
    hlobridge::print_module(m, &hlobridge::PrintOptions::default())
}

fn ops_in_main(text: &str) -> Vec<String> {
    let start = text.find("func.func public @main").expect("main");
    let body = &text[start..];
    let end = body.find("\n  }").unwrap_or(body.len());
    body[..end]
        .lines()
        .skip(1)
        .filter_map(|l| {
            let l = l.trim();
            let rhs = l.split(" = ").nth(1).unwrap_or(l);
            rhs.split_whitespace().next().map(str::to_string)
        })
        .collect()
}

#[test]
fn chain_plan_fuses_into_one_main() {
    let program = Program::from_plan_file(&fixtures().join("chain.toml")).unwrap();
    let out = stitch(&program).unwrap();
    let text = print(&out.module);
    // The printed module parses back and is a fixpoint.
    let again = hlobridge::parse_module(&text).unwrap();
    assert_eq!(print(&again), text);
    // Everything is inlined into @main; the helper function is kept and called.
    let ops = ops_in_main(&text);
    assert!(ops.contains(&"stablehlo.sine".to_string()), "{ops:?}");
    assert!(ops.contains(&"call".to_string()), "{ops:?}");
    assert!(
        !ops.contains(&"stablehlo.cosine".to_string()),
        "dead output survived: {ops:?}"
    );
    assert_eq!(out.report.dead_ops_removed, 1);
    assert!(text.contains("func.func private @jax_act__helper"));
    assert!(text.contains("jax.buffer_donor = true"));
    assert_eq!(text.matches("func.func public").count(), 1);
    insta::assert_snapshot!("chain_fused", text);
    insta::assert_snapshot!("chain_report", out.report.to_string());
}

#[test]
fn chain_without_inlining_calls_each_segment() {
    let mut program = Program::from_plan_file(&fixtures().join("chain.toml")).unwrap();
    program.inline = false;
    let out = stitch(&program).unwrap();
    let text = print(&out.module);
    hlobridge::parse_module(&text).unwrap();
    assert_eq!(
        ops_in_main(&text).iter().filter(|o| *o == "call").count(),
        3,
        "{text}"
    );
    insta::assert_snapshot!("chain_called", text);
}

#[test]
fn reused_segment_is_emitted_once_and_called_twice() {
    let text = read("jax_mid.mlir");
    let p = Program::new()
        .input("x", "tensor<8x16xf32>")
        .segment(
            Segment::from_text("act1", "jax_mid.mlir", &text)
                .unwrap()
                .inputs(&["x"])
                .outputs(&["a"]),
        )
        .segment(
            Segment::from_text("act2", "jax_mid.mlir", &text)
                .unwrap()
                .inputs(&["a"])
                .outputs(&["b"]),
        )
        .output("b");
    let out = stitch(&p).unwrap();
    let printed = print(&out.module);
    assert_eq!(
        printed.matches("func.func private @act1__main").count(),
        1,
        "{printed}"
    );
    assert_eq!(printed.matches("call @act1__main").count(), 2, "{printed}");
    assert!(!printed.contains("@act2__"), "{printed}");
}

#[test]
fn fan_in_and_fan_out() {
    let p = Program::new()
        .input("x", "tensor<8x16xf32>")
        .input("w", "tensor<8x16xf32>")
        .segment(
            seg("a", "torch_pre.mlir")
                .inputs(&["x", "w"])
                .outputs(&["h", "c"]),
        )
        .segment(
            seg("b", "torch_post.mlir")
                .inputs(&["h", "c"])
                .outputs(&["y"]),
        )
        .segment(
            seg("c", "torch_post.mlir")
                .inputs(&["h", "y"])
                .outputs(&["z"]),
        )
        .output("y")
        .output("z");
    let out = stitch(&p).unwrap();
    let text = print(&out.module);
    hlobridge::parse_module(&text).unwrap();
    assert!(
        text.contains("stablehlo.cosine"),
        "fan-in keeps cosine: {text}"
    );
    let h = out.report.handles.iter().find(|h| h.name == "h").unwrap();
    assert_eq!(h.consumers, vec!["b", "c"]);
}

#[test]
fn default_port_names_come_from_result_info() {
    let p = Program::new()
        .input("x", "tensor<8x16xf32>")
        .segment(seg("act", "jax_mid.mlir").inputs(&["x"]))
        .output("act.result");
    let out = stitch(&p).unwrap();
    assert!(print(&out.module).contains("jax.result_info = \"act.result\""));
}

fn err_of(p: &Program) -> String {
    match stitch(p) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn errors_are_clear() {
    let seam = Program::new()
        .input("x", "tensor<4x16xf32>")
        .segment(seg("act", "jax_mid.mlir").inputs(&["x"]).outputs(&["y"]))
        .output("y");
    insta::assert_snapshot!("error_seam_mismatch", err_of(&seam));

    let unknown = Program::new()
        .input("x", "tensor<8x16xf32>")
        .segment(seg("act", "jax_mid.mlir").inputs(&["nope"]).outputs(&["y"]))
        .output("y");
    insta::assert_snapshot!("error_unknown_handle", err_of(&unknown));

    let cycle = Program::new()
        .segment(seg("a", "jax_mid.mlir").inputs(&["q"]).outputs(&["p"]))
        .segment(seg("b", "jax_mid.mlir").inputs(&["p"]).outputs(&["q"]))
        .output("p");
    insta::assert_snapshot!("error_cycle", err_of(&cycle));

    let entry = Program::new()
        .input("x", "tensor<8x16xf32>")
        .segment(
            seg("act", "jax_mid.mlir")
                .entry("forward")
                .inputs(&["x"])
                .outputs(&["y"]),
        )
        .output("y");
    insta::assert_snapshot!("error_missing_entry", err_of(&entry));

    let count = Program::new()
        .input("x", "tensor<8x16xf32>")
        .segment(
            seg("pre", "torch_pre.mlir")
                .inputs(&["x"])
                .outputs(&["y", "_"]),
        )
        .output("y");
    insta::assert_snapshot!("error_port_count", err_of(&count));

    let mesh = |n: &str| {
        format!(
            "module @jit_{n} attributes {{mhlo.num_partitions = {n} : i32}} {{\n  sdy.mesh @mesh = <[\"x\"={n}]>\n  func.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {{\n    return %arg0 : tensor<8xf32>\n  }}\n}}\n"
        )
    };
    let meshes = Program::new()
        .input("x", "tensor<8xf32>")
        .segment(
            Segment::from_text("m2", "m2.mlir", &mesh("2"))
                .unwrap()
                .inputs(&["x"])
                .outputs(&["y"]),
        )
        .segment(
            Segment::from_text("m4", "m4.mlir", &mesh("4"))
                .unwrap()
                .inputs(&["y"])
                .outputs(&["z"]),
        )
        .output("z");
    insta::assert_snapshot!("error_conflicting_partitions", err_of(&meshes));

    let same_parts =
        |n: &str| mesh(n).replace(&format!("num_partitions = {n}"), "num_partitions = 4");
    let meshes = Program::new()
        .input("x", "tensor<8xf32>")
        .segment(
            Segment::from_text("m2", "m2.mlir", &same_parts("2"))
                .unwrap()
                .inputs(&["x"])
                .outputs(&["y"]),
        )
        .segment(
            Segment::from_text("m4", "m4.mlir", &same_parts("4"))
                .unwrap()
                .inputs(&["y"])
                .outputs(&["z"]),
        )
        .output("z");
    insta::assert_snapshot!("error_conflicting_meshes", err_of(&meshes));

    let bad_plan = Plan::from_str_as("[[segment]]\nname = 1\n", false)
        .unwrap_err()
        .to_string();
    insta::assert_snapshot!("error_bad_plan", bad_plan);
}

/// A Shardy segment (as jax lowers it: sharded parameters and results)
/// between two single-device torch segments.
const SHARDY_SEG: &str = r#"module @jit_f attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=4]>
  func.func public @main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<8x16xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>}) {
    %0 = stablehlo.tanh %arg0 : tensor<8x16xf32>
    return %0 : tensor<8x16xf32>
  }
}
"#;

/// The same with GSPMD shardings.
const GSPMD_SEG: &str = r#"module @jit_f attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<8x16xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}) -> (tensor<8x16xf32> {jax.result_info = "result", mhlo.sharding = "{devices=[1,4]<=[4]}"}) {
    %0 = stablehlo.tanh %arg0 : tensor<8x16xf32>
    return %0 : tensor<8x16xf32>
  }
}
"#;

fn torch_sharded_torch(sharded: &str, inline: bool) -> String {
    let p = Program::new()
        .input("x", "tensor<8x16xf32>")
        .input("w", "tensor<8x16xf32>")
        .segment(
            seg("pre", "torch_pre.mlir")
                .inputs(&["x", "w"])
                .outputs(&["h", "_"]),
        )
        .segment(
            Segment::from_text("mid", "mid.mlir", sharded)
                .unwrap()
                .inputs(&["h"])
                .outputs(&["a"]),
        )
        .segment(
            seg("post", "torch_post.mlir")
                .inputs(&["a", "x"])
                .outputs(&["y"]),
        )
        .output("y")
        .output("a")
        .inline(inline);
    let out = stitch(&p).unwrap();
    let text = print(&out.module);
    // The printed module parses back and is a fixpoint.
    assert_eq!(print(&hlobridge::parse_module(&text).unwrap()), text);
    text
}

#[test]
fn inlined_shardy_segment_keeps_its_port_shardings_as_constraints() {
    let text = torch_sharded_torch(SHARDY_SEG, true);
    let ops = ops_in_main(&text);
    // The parameter's sharding constrains the handle fed to it, the result's
    // sharding the handle it defines.
    assert!(
        text.contains("sdy.sharding_constraint %1 <@mesh, [{\"x\"}, {}]> : tensor<8x16xf32>"),
        "{text}"
    );
    assert!(
        text.contains("sdy.sharding_constraint %3 <@mesh, [{}, {\"x\"}]> : tensor<8x16xf32>"),
        "{text}"
    );
    assert_eq!(
        ops.iter()
            .filter(|o| *o == "sdy.sharding_constraint")
            .count(),
        2,
        "{ops:?}"
    );
    // The single-device torch ports hold whole arrays: replicated inputs and
    // output; the jax output keeps its own sharding.
    assert!(
        text.contains("func.func public @main(%x: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %w: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>})"),
        "{text}"
    );
    assert!(
        text.contains("-> (tensor<8x16xf32> {jax.result_info = \"y\", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, tensor<8x16xf32> {jax.result_info = \"a\", sdy.sharding = #sdy.sharding<@mesh, [{}, {\"x\"}]>})"),
        "{text}"
    );
    insta::assert_snapshot!("shardy_inlined", text);
}

#[test]
fn called_shardy_segment_keeps_shardings_on_its_function() {
    let text = torch_sharded_torch(SHARDY_SEG, false);
    assert!(!text.contains("sdy.sharding_constraint"), "{text}");
    assert!(
        text.contains("func.func private @mid__main(%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"x\"}, {}]>})"),
        "{text}"
    );
    assert!(
        text.contains("%x: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}"),
        "{text}"
    );
}

#[test]
fn inlined_gspmd_segment_keeps_its_port_shardings_as_sharding_calls() {
    let text = torch_sharded_torch(GSPMD_SEG, true);
    assert!(
        text.contains(
            "stablehlo.custom_call @Sharding(%1) {mhlo.sharding = \"{devices=[4,1]<=[4]}\"}"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "stablehlo.custom_call @Sharding(%3) {mhlo.sharding = \"{devices=[1,4]<=[4]}\"}"
        ),
        "{text}"
    );
    assert!(
        text.contains("%x: tensor<8x16xf32> {mhlo.sharding = \"{replicated}\"}"),
        "{text}"
    );
    assert!(
        text.contains("jax.result_info = \"y\", mhlo.sharding = \"{replicated}\""),
        "{text}"
    );
}

#[test]
fn sharded_program_input_needs_no_constraint() {
    let p = Program::new()
        .input("x", "tensor<8x16xf32>")
        .segment(
            Segment::from_text("mid", "mid.mlir", SHARDY_SEG)
                .unwrap()
                .inputs(&["x"])
                .outputs(&["a"]),
        )
        .segment(
            Segment::from_text("mid2", "mid2.mlir", &SHARDY_SEG.replace("tanh", "sine"))
                .unwrap()
                .inputs(&["x"])
                .outputs(&["b"]),
        )
        .output("a")
        .output("b");
    let text = print(&stitch(&p).unwrap().module);
    // The input carries the parameter's sharding (once); only the results
    // are constrained.
    assert!(
        text.contains("%x: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"x\"}, {}]>}"),
        "{text}"
    );
    assert_eq!(text.matches("<@mesh, [{\"x\"}, {}]>").count(), 1, "{text}");
    assert_eq!(text.matches("sdy.sharding_constraint").count(), 2, "{text}");
}

#[test]
fn single_device_programs_get_no_sharding_attributes() {
    let program = Program::from_plan_file(&fixtures().join("chain.toml")).unwrap();
    let text = print(&stitch(&program).unwrap().module);
    assert!(!text.contains("sharding"), "{text}");
}
