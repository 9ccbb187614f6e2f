//! Unit tests of the oneDNN softmax rewrite: the forms it takes, the ones it
//! leaves, and that its output parses back.

use super::*;
use crate::{parse_module, print_module, PrintOptions};

fn rewrite(text: &str) -> (String, usize) {
    let mut m = parse_module(text).expect("parse");
    let n = rewrite_onednn_softmax(&mut m, 0);
    let out = print_module(&m, &PrintOptions::default());
    parse_module(&out).expect("rewritten module parses back");
    (out, n)
}

/// torch_xla's softmax along `axis` of `[8, 12, 128, 128]`, with the
/// reduction's init, combiner and element type given.
fn torch_xla_softmax(init: &str, elem: &str) -> String {
    format!(
        r#"func.func @main(%x: tensor<8x12x128x128x{elem}>) -> tensor<8x12x128x128x{elem}> {{
  %cst = stablehlo.constant dense<0.000000e+00> : tensor<{elem}>
  %cst_0 = stablehlo.constant dense<{init}> : tensor<{elem}>
  %5 = stablehlo.reduce(%x init: %cst_0) applies stablehlo.maximum across dimensions = [3] : (tensor<8x12x128x128x{elem}>, tensor<{elem}>) -> tensor<8x12x128x{elem}>
  %6 = stablehlo.broadcast_in_dim %5, dims = [0, 1, 2] : (tensor<8x12x128x{elem}>) -> tensor<8x12x128x128x{elem}>
  %7 = stablehlo.subtract %x, %6 : tensor<8x12x128x128x{elem}>
  %8 = stablehlo.exponential %7 : tensor<8x12x128x128x{elem}>
  %9 = stablehlo.reduce(%8 init: %cst) applies stablehlo.add across dimensions = [3] : (tensor<8x12x128x128x{elem}>, tensor<{elem}>) -> tensor<8x12x128x{elem}>
  %10 = stablehlo.broadcast_in_dim %9, dims = [0, 1, 2] : (tensor<8x12x128x{elem}>) -> tensor<8x12x128x128x{elem}>
  %11 = stablehlo.divide %8, %10 : tensor<8x12x128x128x{elem}>
  return %11 : tensor<8x12x128x128x{elem}>
}}"#
    )
}

#[test]
fn torch_xla_softmax_becomes_one_call() {
    let (out, n) = rewrite(&torch_xla_softmax("0xFF800000", "f32"));
    assert_eq!(n, 1, "{out}");
    assert!(out.contains("@__onednn$softmax(%x)"), "{out}");
    assert!(out.contains(r#"\"softmax_axis\": 3"#), "{out}");
    assert!(
        out.contains("operand_layouts = [dense<[3, 2, 1, 0]> : tensor<4xindex>]"),
        "{out}"
    );
    insta::assert_snapshot!(out);
}

#[test]
fn other_inits_and_types_stay() {
    // A finite init (not softmax's max), and f64 / bf16 (oneDNN's route is f32 only).
    for (init, elem) in [
        ("-1.000000e+00", "f32"),
        ("0xFFF0000000000000", "f64"),
        ("0xFF80", "bf16"),
    ] {
        let (out, n) = rewrite(&torch_xla_softmax(init, elem));
        assert_eq!(n, 0, "{init} {elem}: {out}");
    }
}

#[test]
fn jax_keepdims_softmax_along_a_middle_axis() {
    // jax.nn.softmax(x, axis=1): reductions keep the dim through a reshape.
    let text = r#"func.func @main(%x: tensor<4x64x32xf32>) -> tensor<4x64x32xf32> {
  %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
  %0 = stablehlo.reduce(%x init: %cst) applies stablehlo.maximum across dimensions = [1] : (tensor<4x64x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %1 = stablehlo.reshape %0 : (tensor<4x32xf32>) -> tensor<4x1x32xf32>
  %2 = stablehlo.broadcast_in_dim %1, dims = [0, 1, 2] : (tensor<4x1x32xf32>) -> tensor<4x64x32xf32>
  %3 = stablehlo.subtract %x, %2 : tensor<4x64x32xf32>
  %4 = stablehlo.exponential %3 : tensor<4x64x32xf32>
  %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
  %5 = stablehlo.reduce(%4 init: %cst_0) applies stablehlo.add across dimensions = [1] : (tensor<4x64x32xf32>, tensor<f32>) -> tensor<4x32xf32>
  %6 = stablehlo.reshape %5 : (tensor<4x32xf32>) -> tensor<4x1x32xf32>
  %7 = stablehlo.broadcast_in_dim %6, dims = [0, 1, 2] : (tensor<4x1x32xf32>) -> tensor<4x64x32xf32>
  %8 = stablehlo.divide %4, %7 : tensor<4x64x32xf32>
  return %8 : tensor<4x64x32xf32>
}"#;
    let (out, n) = rewrite(text);
    assert_eq!(n, 1, "{out}");
    assert!(out.contains(r#"\"softmax_axis\": 1"#), "{out}");
}

#[test]
fn mismatched_axes_or_inputs_stay() {
    // The sum runs over another axis than the max.
    let t = torch_xla_softmax("0xFF800000", "f32").replace(
        "applies stablehlo.add across dimensions = [3] : (tensor<8x12x128x128xf32>, tensor<f32>) -> tensor<8x12x128xf32>",
        "applies stablehlo.add across dimensions = [2] : (tensor<8x12x128x128xf32>, tensor<f32>) -> tensor<8x12x128xf32>",
    );
    assert_eq!(rewrite(&t).1, 0);
    // The max is a minimum.
    let t = torch_xla_softmax("0xFF800000", "f32")
        .replace("applies stablehlo.maximum", "applies stablehlo.minimum");
    assert_eq!(rewrite(&t).1, 0);
}

#[test]
fn small_softmaxes_stay_below_the_bound() {
    let mut m = parse_module(&torch_xla_softmax("0xFF800000", "f32")).expect("parse");
    // 8·12·128·128 elements: one more than that is above it.
    assert_eq!(rewrite_onednn_softmax(&mut m, 8 * 12 * 128 * 128 + 1), 0);
    assert_eq!(rewrite_onednn_softmax(&mut m, MIN_ELEMENTS), 1);
}
