//! Unit tests of the dot operand rewrite: the decode-attention form it
//! takes (snapshot), the products it leaves, and that the output parses
//! back.

use super::*;
use crate::{parse_module, print_module, PrintOptions};

fn rewrite(text: &str) -> (String, DotOperandsReport) {
    let mut m = parse_module(text).expect("parse");
    let r = rewrite_dot_operands(&mut m);
    let out = print_module(&m, &PrintOptions::default());
    parse_module(&out).expect("rewritten module parses back");
    (out, r)
}

/// One decode step's attention as torch_xla lowers GPT-2's: the K and V
/// caches updated in place (`index_copy_`), `q·Kᵀ` with SDPA's √scale on
/// both sides, and `p·V`, each through a 3-D product on reshaped operands.
const DECODE: &str = r#"func.func public @main(%kc: tensor<2x3x16x8xf32>, %vc: tensor<2x3x16x8xf32>, %i: tensor<1x1xi64>, %k: tensor<2x3x1x8xf32>, %v: tensor<2x3x1x8xf32>, %q: tensor<2x3x1x8xf32>, %c: tensor<f32>) -> (tensor<2x3x16x8xf32>, tensor<2x3x16x8xf32>, tensor<6x1x8xf32>) {
  %0 = "stablehlo.scatter"(%kc, %i, %k) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0, 1, 3], inserted_window_dims = [2], scatter_dims_to_operand_dims = [2], index_vector_dim = 1>, unique_indices = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<2x3x16x8xf32>, tensor<1x1xi64>, tensor<2x3x1x8xf32>) -> tensor<2x3x16x8xf32>
  %1 = "stablehlo.scatter"(%vc, %i, %v) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0, 1, 3], inserted_window_dims = [2], scatter_dims_to_operand_dims = [2], index_vector_dim = 1>, unique_indices = false}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    stablehlo.return %b : tensor<f32>
  }) : (tensor<2x3x16x8xf32>, tensor<1x1xi64>, tensor<2x3x1x8xf32>) -> tensor<2x3x16x8xf32>
  %2 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<2x3x1x8xf32>
  %3 = stablehlo.multiply %q, %2 : tensor<2x3x1x8xf32>
  %4 = stablehlo.reshape %3 : (tensor<2x3x1x8xf32>) -> tensor<6x1x8xf32>
  %5 = stablehlo.transpose %0, dims = [0, 1, 3, 2] : (tensor<2x3x16x8xf32>) -> tensor<2x3x8x16xf32>
  %6 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<2x3x8x16xf32>
  %7 = stablehlo.multiply %5, %6 : tensor<2x3x8x16xf32>
  %8 = stablehlo.reshape %7 : (tensor<2x3x8x16xf32>) -> tensor<6x8x16xf32>
  %9 = stablehlo.dot_general %4, %8, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<6x1x8xf32>, tensor<6x8x16xf32>) -> tensor<6x1x16xf32>
  %10 = stablehlo.reshape %1 : (tensor<2x3x16x8xf32>) -> tensor<6x16x8xf32>
  %11 = stablehlo.dot_general %9, %10, batching_dims = [0] x [0], contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<6x1x16xf32>, tensor<6x16x8xf32>) -> tensor<6x1x8xf32>
  return %0, %1, %11 : tensor<2x3x16x8xf32>, tensor<2x3x16x8xf32>, tensor<6x1x8xf32>
}"#;

#[test]
fn decode_attention_products_read_the_caches_unmerged() {
    let (out, r) = rewrite(DECODE);
    assert_eq!(
        r,
        DotOperandsReport {
            rewritten: 2,
            unmerged: 2,
            transposes: 1,
            scalings: 1,
        }
    );
    // q·Kᵀ reads the updated K cache itself, contracting its last dim, with
    // two batch dims; the √scale is applied to the small result.
    assert!(
        out.contains("batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [3]"),
        "{out}"
    );
    // p·V reads the updated V cache itself.
    assert!(
        out.contains("batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2]"),
        "{out}"
    );
    insta::assert_snapshot!(out);
}

#[test]
fn products_without_work_to_remove_stay() {
    let cases = [
        // A merging reshape of a plain value: nothing to fold.
        r#"func.func public @main(%a: tensor<2x3x4x8xf32>, %b: tensor<6x8x5xf32>) -> tensor<6x4x5xf32> {
  %0 = stablehlo.reshape %a : (tensor<2x3x4x8xf32>) -> tensor<6x4x8xf32>
  %1 = stablehlo.dot_general %0, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<6x4x8xf32>, tensor<6x8x5xf32>) -> tensor<6x4x5xf32>
  return %1 : tensor<6x4x5xf32>
}"#,
        // No batch dims: XLA folds a 2-D transpose itself.
        r#"func.func public @main(%a: tensor<4x8xf32>, %b: tensor<5x8xf32>) -> tensor<4x5xf32> {
  %0 = stablehlo.transpose %b, dims = [1, 0] : (tensor<5x8xf32>) -> tensor<8x5xf32>
  %1 = stablehlo.dot_general %a, %0, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
  return %1 : tensor<4x5xf32>
}"#,
        // A transpose that moves a batch dim is not folded.
        r#"func.func public @main(%a: tensor<3x2x4x8xf32>, %b: tensor<6x8x5xf32>) -> tensor<6x4x5xf32> {
  %0 = stablehlo.transpose %a, dims = [1, 0, 2, 3] : (tensor<3x2x4x8xf32>) -> tensor<2x3x4x8xf32>
  %1 = stablehlo.reshape %0 : (tensor<2x3x4x8xf32>) -> tensor<6x4x8xf32>
  %2 = stablehlo.dot_general %1, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<6x4x8xf32>, tensor<6x8x5xf32>) -> tensor<6x4x5xf32>
  return %2 : tensor<6x4x5xf32>
}"#,
        // bf16: the scaling stays on the operand (rounding).
        r#"func.func public @main(%a: tensor<6x1x8xbf16>, %b: tensor<6x16x8xbf16>, %c: tensor<bf16>) -> tensor<6x1x16xbf16> {
  %0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<bf16>) -> tensor<6x16x8xbf16>
  %1 = stablehlo.multiply %b, %0 : tensor<6x16x8xbf16>
  %2 = stablehlo.dot_general %a, %1, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<6x1x8xbf16>, tensor<6x16x8xbf16>) -> tensor<6x1x16xbf16>
  return %2 : tensor<6x1x16xbf16>
}"#,
        // A scaled operand smaller than the result: scaling it is cheaper.
        r#"func.func public @main(%a: tensor<6x16x8xf32>, %b: tensor<6x16x8xf32>, %c: tensor<f32>) -> tensor<6x16x16xf32> {
  %0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<6x16x8xf32>
  %1 = stablehlo.multiply %b, %0 : tensor<6x16x8xf32>
  %2 = stablehlo.dot_general %a, %1, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<6x16x8xf32>, tensor<6x16x8xf32>) -> tensor<6x16x16xf32>
  return %2 : tensor<6x16x16xf32>
}"#,
    ];
    for text in cases {
        let (out, r) = rewrite(text);
        assert_eq!(r, DotOperandsReport::default(), "{out}");
    }
}

#[test]
fn a_transpose_reordering_free_dims_is_not_folded() {
    // Free dims [4, 5] swapped by the transpose would reorder the result.
    let text = r#"func.func public @main(%a: tensor<2x3x5x4x8xf32>, %b: tensor<6x8x7xf32>, %c: tensor<f32>) -> tensor<6x4x5x7xf32> {
  %0 = stablehlo.transpose %a, dims = [0, 1, 3, 2, 4] : (tensor<2x3x5x4x8xf32>) -> tensor<2x3x4x5x8xf32>
  %1 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<2x3x4x5x8xf32>
  %2 = stablehlo.multiply %0, %1 : tensor<2x3x4x5x8xf32>
  %3 = stablehlo.reshape %2 : (tensor<2x3x4x5x8xf32>) -> tensor<6x4x5x8xf32>
  %4 = stablehlo.dot_general %3, %b, batching_dims = [0] x [0], contracting_dims = [3] x [1] : (tensor<6x4x5x8xf32>, tensor<6x8x7xf32>) -> tensor<6x4x5x7xf32>
  return %4 : tensor<6x4x5x7xf32>
}"#;
    let (out, r) = rewrite(text);
    // The scaling (960 elements, larger than the 840 of the result) moves;
    // the transpose under it stays.
    assert_eq!(r.transposes, 0, "{out}");
    assert_eq!(r.scalings, 1, "{out}");
    assert!(out.contains("stablehlo.transpose"), "{out}");
}

#[test]
fn an_unmerged_side_reshapes_the_other_operand() {
    let text = r#"func.func public @main(%a: tensor<6x1x8xf32>, %v: tensor<2x3x16x8xf32>, %i: tensor<i64>, %u: tensor<2x3x1x8xf32>) -> tensor<6x1x16xf32> {
  %z = stablehlo.constant dense<0> : tensor<i64>
  %0 = stablehlo.dynamic_update_slice %v, %u, %z, %z, %i, %z : (tensor<2x3x16x8xf32>, tensor<2x3x1x8xf32>, tensor<i64>, tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<2x3x16x8xf32>
  %1 = stablehlo.reshape %0 : (tensor<2x3x16x8xf32>) -> tensor<6x16x8xf32>
  %2 = stablehlo.dot_general %a, %1, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<6x1x8xf32>, tensor<6x16x8xf32>) -> tensor<6x1x16xf32>
  return %2 : tensor<6x1x16xf32>
}"#;
    let (out, r) = rewrite(text);
    assert_eq!(r.unmerged, 1, "{out}");
    assert!(
        out.contains("stablehlo.reshape %a : (tensor<6x1x8xf32>) -> tensor<2x3x1x8xf32>"),
        "{out}"
    );
    assert!(out.contains("-> tensor<2x3x1x16xf32>"), "{out}");
}

#[test]
fn a_transpose_feeding_the_product_directly_is_left_to_xla() {
    // One batch dim, no reshape, no scaling: XLA folds this transpose into
    // its dot by itself.
    let text = r#"func.func public @main(%a: tensor<6x4x8xf32>, %b: tensor<6x5x8xf32>) -> tensor<6x4x5xf32> {
  %0 = stablehlo.transpose %b, dims = [0, 2, 1] : (tensor<6x5x8xf32>) -> tensor<6x8x5xf32>
  %1 = stablehlo.dot_general %a, %0, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<6x4x8xf32>, tensor<6x8x5xf32>) -> tensor<6x4x5xf32>
  return %1 : tensor<6x4x5xf32>
}"#;
    let (out, r) = rewrite(text);
    assert_eq!(r, DotOperandsReport::default(), "{out}");
}
