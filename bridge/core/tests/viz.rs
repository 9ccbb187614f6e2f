//! `hlobridge::viz`: the picture of a stitch plan (every segment and handle
//! named, producers coloured, donated and sharded handles marked, unused
//! handles shown) and of a single module (functions and call edges), as
//! DOT (insta snapshot), SVG and HTML.

use hlobridge::stitch::{Program, Segment};
use hlobridge::viz::{Graph, NodeKind};
use std::path::PathBuf;

fn chain() -> Graph {
    let plan =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/stitch/chain.toml");
    let p = Program::from_plan_file(&plan).unwrap_or_else(|e| panic!("{e}"));
    Graph::from_program(&p, "chain.toml").unwrap_or_else(|e| panic!("{e}"))
}

const SEGMENTS: &[&str] = &["torch_pre", "jax_act", "torch_post"];
const HANDLES: &[&str] = &["x", "w", "h", "unused_cos", "a", "y"];

#[test]
fn chain_dot_snapshot() {
    insta::assert_snapshot!("chain_dot", chain().to_dot());
}

#[test]
fn chain_graph_structure() {
    let g = chain();
    let label = |i: usize| g.nodes[i].label.as_str();
    let edges: Vec<(&str, &str, &str)> = g
        .edges
        .iter()
        .map(|e| (label(e.from), e.label.as_str(), label(e.to)))
        .collect();
    assert_eq!(
        edges,
        [
            ("x", "x", "torch_pre"),
            ("w", "w", "torch_pre"),
            ("torch_pre", "h", "jax_act"),
            ("jax_act", "a", "torch_post"),
            ("x", "x", "torch_post"),
            ("torch_post", "y", "y"),
            ("torch_pre", "unused_cos", "unused"),
        ]
    );
    assert!(g.edges.iter().all(|e| e.ty == "tensor<8x16xf32>"));
    let donated: Vec<&str> = g
        .edges
        .iter()
        .filter(|e| e.donated)
        .map(|e| e.label.as_str())
        .collect();
    assert_eq!(donated, ["w"]);
    assert!(g.edges.iter().all(|e| !e.sharded));
    // Layers follow the data flow left to right.
    let layer = |name: &str| g.nodes.iter().find(|n| n.label == name).unwrap().layer;
    assert!(layer("x") < layer("torch_pre"));
    assert!(layer("torch_pre") < layer("jax_act"));
    assert!(layer("jax_act") < layer("torch_post"));
    assert!(layer("torch_post") < layer("y"));
}

#[test]
fn chain_svg_and_html_name_everything() {
    let g = chain();
    for text in [g.to_svg(), g.to_html()] {
        for s in SEGMENTS {
            assert!(
                text.contains(&format!(">{s}</text>")),
                "segment {s} missing"
            );
        }
        for h in HANDLES {
            assert!(
                text.contains(&format!(">{h}: tensor&lt;8x16xf32&gt;")),
                "handle {h} missing"
            );
        }
        assert!(text.contains("[donated]"));
        // Producer colours: torch and jax fills are both used.
        assert!(text.contains("#fde0d9") && text.contains("#dbe8ff"));
    }
    let html = g.to_html();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<svg "));
    assert!(!html.contains("<script"), "self-contained and static");
}

const SHARDED: &str = r#"module @jit_f attributes {mhlo.num_partitions = 2 : i32} {
  func.func public @main(%arg0: tensor<8xf32> {mhlo.sharding = "{devices=[2]<=[2]}"}) -> (tensor<8xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.exponential %arg0 : tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
"#;

const PALLAS: &str = r#"module @kernel {
  func.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
    %0 = stablehlo.custom_call @tpu_custom_call(%arg0) {backend_config = "x"} : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
"#;

#[test]
fn sharded_and_pallas_marked() {
    let p = Program::new()
        .donated_input("x", "tensor<8xf32>")
        .segment(
            Segment::from_text("shard", "a.mlir", SHARDED)
                .unwrap()
                .producer("jax")
                .inputs(&["x"])
                .outputs(&["e"]),
        )
        .segment(
            Segment::from_text("k", "b.mlir", PALLAS)
                .unwrap()
                .producer("pallas")
                .inputs(&["e"])
                .outputs(&["out"]),
        )
        .output("out");
    let g = Graph::from_program(&p, "t").unwrap();
    let x = g.edges.iter().find(|e| e.label == "x").unwrap();
    assert!(x.sharded && x.donated);
    let e = g.edges.iter().find(|e| e.label == "e").unwrap();
    assert!(!e.sharded && !e.donated);
    let dot = g.to_dot();
    assert!(
        dot.contains(
            r##"[donated, sharded]", color="#c0392b", penwidth=2.5, style="bold,dashed""##
        ),
        "{dot}"
    );
    assert!(g.to_svg().contains(r#"stroke-dasharray="7 4" marker-end"#));
    assert!(dot.contains("#dcf3dc"), "pallas colour");
}

#[test]
fn bad_plan_is_an_error_not_a_panic() {
    let p = Program::new()
        .input("x", "tensor<8xf32>")
        .segment(
            Segment::from_text("s", "a.mlir", SHARDED)
                .unwrap()
                .inputs(&["nope"])
                .outputs(&["y"]),
        )
        .output("y");
    let err = Graph::from_program(&p, "t").unwrap_err().to_string();
    assert!(err.contains("unknown handle 'nope'"), "{err}");
}

#[test]
fn module_functions_and_calls() {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/stitch/jax_mid.mlir"),
    )
    .unwrap();
    let m = hlobridge::parse_module(&text).unwrap();
    let g = Graph::from_module(&m, "jax_mid.mlir").unwrap();
    let names: Vec<&str> = g
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Block)
        .map(|n| n.label.as_str())
        .collect();
    assert_eq!(names, ["@main", "@helper"]);
    let call = g
        .edges
        .iter()
        .find(|e| e.label == "call")
        .expect("call edge");
    assert_eq!(g.nodes[call.from].label, "@main");
    assert_eq!(g.nodes[call.to].label, "@helper");
    assert!(g
        .nodes
        .iter()
        .any(|n| n.kind == NodeKind::Input && n.label == "%arg0"));
    assert!(g
        .nodes
        .iter()
        .any(|n| n.kind == NodeKind::Output && n.label == "result"));
    assert!(g
        .nodes
        .iter()
        .all(|n| n.producer.is_empty() || n.producer == "jax"));
}

#[test]
fn module_inputs_are_named_by_their_locations() {
    let text = r#"#loc1 = loc("bias")
module {
  func.func public @main(%arg0: tensor<4xf32> loc("x"), %arg1: tensor<4xf32> loc(#loc1), %arg2: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>
    %1 = stablehlo.add %0, %arg2 : tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}
"#;
    let m = hlobridge::parse_module(text).unwrap();
    let g = Graph::from_module(&m, "named.mlir").unwrap();
    let inputs: Vec<&str> = g
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Input)
        .map(|n| n.label.as_str())
        .collect();
    assert_eq!(inputs, ["x", "bias", "%arg2"]);
    assert!(g.edges.iter().any(|e| e.label == "x"));
}
