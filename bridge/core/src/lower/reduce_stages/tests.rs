//! Unit tests of the reduction stages: batch norm's statistic (snapshot),
//! the plans for other shapes, the reductions it leaves, and that the
//! output parses back.

use super::*;
use crate::{parse_module, print_module, PrintOptions};

fn rewrite(text: &str) -> (String, ReduceStagesReport) {
    let mut m = parse_module(text).expect("parse");
    let r = rewrite_reduce_stages(&mut m);
    let out = print_module(&m, &PrintOptions::default());
    parse_module(&out).expect("rewritten module parses back");
    (out, r)
}

/// A sum of `(x - c)²` over every dim but the channels (batch norm's
/// variance), as torch_xla lowers it.
const BN_VARIANCE: &str = r#"func.func public @main(%x: tensor<8x64x56x56xf32>, %c: tensor<64xf32>) -> tensor<64xf32> {
  %0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %1 = stablehlo.broadcast_in_dim %c, dims = [1] : (tensor<64xf32>) -> tensor<8x64x56x56xf32>
  %2 = stablehlo.subtract %x, %1 : tensor<8x64x56x56xf32>
  %3 = stablehlo.multiply %2, %2 : tensor<8x64x56x56xf32>
  %4 = stablehlo.reduce(%3 init: %0) applies stablehlo.add across dimensions = [0, 2, 3] : (tensor<8x64x56x56xf32>, tensor<f32>) -> tensor<64xf32>
  return %4 : tensor<64xf32>
}"#;

#[test]
fn batch_norm_variance_runs_in_two_stages() {
    let (out, r) = rewrite(BN_VARIANCE);
    assert_eq!(r.rewritten, 1);
    insta::assert_snapshot!(out);
}

/// A plan's fields: staged dims, stage-1 result dims, stage-1 axis, stage-2 dims.
type PlanParts = (Vec<i64>, Vec<i64>, i64, Vec<i64>);

fn plan_of(dims: &[i64], reduced: &[i64]) -> Option<PlanParts> {
    plan(dims, reduced).map(|p| (p.staged_dims, p.partial_dims, p.axis, p.rest))
}

#[test]
fn plans_split_the_largest_run_by_its_largest_factor_up_to_32() {
    // Batch norm: the 56·56 run, 3136 = 32·98.
    assert_eq!(
        plan_of(&[8, 256, 56, 56], &[0, 2, 3]),
        Some((vec![8, 256, 32, 98], vec![8, 256, 98], 2, vec![0, 2]))
    );
    // 14·14 = 196 has no factor 29..32: 28·7.
    assert_eq!(
        plan_of(&[8, 1024, 14, 14], &[0, 2, 3]),
        Some((vec![8, 1024, 28, 7], vec![8, 1024, 7], 2, vec![0, 2]))
    );
    // Layer norm over the last dim.
    assert_eq!(
        plan_of(&[4096, 768], &[1]),
        Some((vec![4096, 32, 24], vec![4096, 24], 1, vec![1]))
    );
    // A bias gradient: the rows.
    assert_eq!(
        plan_of(&[4096, 768], &[0]),
        Some((vec![32, 128, 768], vec![128, 768], 0, vec![0]))
    );
    // A column sum keeps more than 32 per stage-2 result: 1024 = 16·64.
    assert_eq!(
        plan_of(&[1024, 768], &[0]),
        Some((vec![16, 64, 768], vec![64, 768], 0, vec![0]))
    );
    assert_eq!(plan_of(&[128, 768], &[0]), None);
    // Channels-last batch norm: the leading run of three dims.
    assert_eq!(
        plan_of(&[8, 56, 56, 96], &[0, 1, 2]),
        Some((vec![32, 784, 96], vec![784, 96], 0, vec![0]))
    );
    // Two runs of one dim; the larger (the later) is split, keeping more
    // than 32 (the innermost dim is kept).
    assert_eq!(
        plan_of(&[8, 96, 256, 7], &[0, 2]),
        Some((vec![8, 96, 4, 64, 7], vec![8, 96, 64, 7], 2, vec![0, 2]))
    );
}

#[test]
fn plans_leave_small_and_unsplittable_reductions() {
    // Below MIN_ELEMENTS.
    assert_eq!(plan_of(&[64, 128], &[1]), None);
    // A prime run: no factor from 4.
    assert_eq!(plan_of(&[1024, 197], &[1]), None);
    // Runs of at most 32 are one fused reduction already (a stage 1).
    assert_eq!(plan_of(&[8192, 4], &[1]), None);
    assert_eq!(plan_of(&[8, 256, 98, 32], &[3]), None);
    // An element count past i64 (hostile input) is left, not a panic.
    assert_eq!(plan_of(&[1 << 40, 1 << 40], &[1]), None);
    // Nothing reduced, or a dim out of range.
    assert_eq!(plan_of(&[128, 256], &[]), None);
    assert_eq!(plan_of(&[128, 256], &[2]), None);
}

fn reduce_module(elem: &str, init: &str, combiner: &str) -> String {
    format!(
        r#"func.func public @main(%x: tensor<64x1024x{elem}>) -> tensor<64x{elem}> {{
  %0 = stablehlo.constant dense<{init}> : tensor<{elem}>
  %1 = stablehlo.reduce(%x init: %0) applies {combiner} across dimensions = [1] : (tensor<64x1024x{elem}>, tensor<{elem}>) -> tensor<64x{elem}>
  return %1 : tensor<64x{elem}>
}}"#
    )
}

#[test]
fn sums_need_a_zero_init_and_f32_or_f64() {
    for (elem, init, combiner, staged) in [
        ("f32", "0.000000e+00", "stablehlo.add", true),
        ("f64", "0.000000e+00", "stablehlo.add", true),
        ("f32", "1.000000e+00", "stablehlo.add", false),
        ("bf16", "0.000000e+00", "stablehlo.add", false),
        ("f32", "0xFF800000", "stablehlo.maximum", true),
        ("bf16", "1.000000e+00", "stablehlo.minimum", true),
        ("f32", "1.000000e+00", "stablehlo.multiply", false),
    ] {
        let (out, r) = rewrite(&reduce_module(elem, init, combiner));
        assert_eq!(r.rewritten, usize::from(staged), "{elem} {init} {combiner}");
        assert_eq!(out.contains("optimization_barrier"), staged, "{out}");
    }
}

#[test]
fn integer_and_variadic_reductions_are_left() {
    let int = r#"func.func public @main(%x: tensor<64x1024xi32>) -> tensor<64xi32> {
  %0 = stablehlo.constant dense<0> : tensor<i32>
  %1 = stablehlo.reduce(%x init: %0) applies stablehlo.add across dimensions = [1] : (tensor<64x1024xi32>, tensor<i32>) -> tensor<64xi32>
  return %1 : tensor<64xi32>
}"#;
    assert_eq!(rewrite(int).1.rewritten, 0);
    // An argmax: two inputs.
    let argmax = r#"func.func public @main(%x: tensor<64x1024xf32>, %i: tensor<64x1024xi32>) -> (tensor<64xf32>, tensor<64xi32>) {
  %0 = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %1 = stablehlo.constant dense<0> : tensor<i32>
  %2:2 = stablehlo.reduce(%x init: %0), (%i init: %1) across dimensions = [1] : (tensor<64x1024xf32>, tensor<64x1024xi32>, tensor<f32>, tensor<i32>) -> (tensor<64xf32>, tensor<64xi32>)
    reducer(%a: tensor<f32>, %c: tensor<f32>) (%b: tensor<i32>, %d: tensor<i32>)  {
    %3 = stablehlo.maximum %a, %c : tensor<f32>
    %4 = stablehlo.maximum %b, %d : tensor<i32>
    stablehlo.return %3, %4 : tensor<f32>, tensor<i32>
  }
  return %2#0, %2#1 : tensor<64xf32>, tensor<64xi32>
}"#;
    assert_eq!(rewrite(argmax).1.rewritten, 0);
}

#[test]
fn a_generic_form_reduction_is_staged_too() {
    let generic = r#"func.func public @main(%x: tensor<64x1024xf32>) -> tensor<64xf32> {
  %0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %1 = "stablehlo.reduce"(%x, %0) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %2 = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %2 : tensor<f32>
  }) {dimensions = array<i64: 1>} : (tensor<64x1024xf32>, tensor<f32>) -> tensor<64xf32>
  return %1 : tensor<64xf32>
}"#;
    let (out, r) = rewrite(generic);
    assert_eq!(r.rewritten, 1);
    assert!(out.contains("tensor<64x32x32xf32>"), "{out}");
    assert!(
        out.contains("across dimensions = [1] : (tensor<64x32x32xf32>"),
        "{out}"
    );
    assert!(
        out.contains("across dimensions = [1] : (tensor<64x32xf32>"),
        "{out}"
    );
}

/// A chain of `n` elementwise layers between the argument and the reduction
/// (a residual stream).
fn chain_module(n: usize) -> String {
    let mut body = String::new();
    let mut last = "%x".to_string();
    for i in 0..n {
        body.push_str(&format!(
            "  %a{i} = stablehlo.multiply {last}, %w : tensor<64x1024xf32>\n  %b{i} = stablehlo.add %a{i}, %x : tensor<64x1024xf32>\n"
        ));
        last = format!("%b{i}");
    }
    format!(
        r#"func.func public @main(%x: tensor<64x1024xf32>, %w: tensor<64x1024xf32>) -> tensor<64xf32> {{
  %z = stablehlo.constant dense<0.000000e+00> : tensor<f32>
{body}  %r = stablehlo.reduce({last} init: %z) applies stablehlo.add across dimensions = [1] : (tensor<64x1024xf32>, tensor<f32>) -> tensor<64xf32>
  return %r : tensor<64xf32>
}}"#
    )
}

#[test]
fn a_long_producer_chain_is_left_to_xla() {
    // 2 ops per layer: 16 layers fit the cone, 17 do not.
    assert_eq!(rewrite(&chain_module(16)).1.rewritten, 1);
    assert_eq!(rewrite(&chain_module(17)).1.rewritten, 0);
}

#[test]
fn a_chain_cut_by_a_product_is_staged() {
    // The product's result is materialised: only the ops after it count.
    let text = r#"func.func public @main(%x: tensor<64x1024xf32>, %w: tensor<1024x1024xf32>) -> tensor<64xf32> {
  %z = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<64x1024xf32>, tensor<1024x1024xf32>) -> tensor<64x1024xf32>
  %1 = stablehlo.multiply %0, %0 : tensor<64x1024xf32>
  %r = stablehlo.reduce(%1 init: %z) applies stablehlo.add across dimensions = [1] : (tensor<64x1024xf32>, tensor<f32>) -> tensor<64xf32>
  return %r : tensor<64xf32>
}"#;
    let mut m = parse_module(text).expect("parse");
    let input = m
        .ops
        .iter()
        .position(|o| m.str(o.name) == "stablehlo.reduce")
        .unwrap();
    let v = m.ops[input].operands[0];
    assert!(producer_cone_fits(&m, v));
    assert_eq!(rewrite_reduce_stages(&mut m).rewritten, 1);
}
