//! Unit tests of the host GEMM rewrite: which products it takes, which it
//! leaves, that the output parses back, and a snapshot of the printed form.

use super::*;
use crate::{parse_module, print_module, PrintOptions};

fn rewrite(text: &str) -> (String, HostGemmReport) {
    let mut m = parse_module(text).expect("parse");
    let r = rewrite_host_gemm(&mut m, &HostGemmPolicy::default());
    let out = print_module(&m, &PrintOptions::default());
    parse_module(&out).expect("rewritten module parses back");
    (out, r)
}

const MLP: &str = r#"func.func public @main(%x: tensor<64x128xf32>, %w: tensor<128x128xf32>, %b: tensor<4x64x32xf64>, %c: tensor<4x48x32xf64>) -> (tensor<128x128xf32>, tensor<4x64x48xf64>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x128xf32>, tensor<128x128xf32>) -> tensor<64x128xf32>
  %1 = stablehlo.tanh %0 : tensor<64x128xf32>
  %2 = stablehlo.dot_general %x, %1, contracting_dims = [0] x [0] : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<128x128xf32>
  %3 = stablehlo.dot_general %b, %c, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<4x64x32xf64>, tensor<4x48x32xf64>) -> tensor<4x64x48xf64>
  return %2, %3 : tensor<128x128xf32>, tensor<4x64x48xf64>
}"#;

#[test]
fn mlp_products_become_host_gemm_calls() {
    let (out, r) = rewrite(MLP);
    assert_eq!(
        r,
        HostGemmReport {
            rewritten: 3,
            products: 3,
            onednn: 0,
            bias_fused: 0,
        }
    );
    assert!(
        out.contains("@hlobridge_gemm_nn(%arg0, %arg1)") || out.contains("@hlobridge_gemm_nn("),
        "{out}"
    );
    assert!(out.contains("@hlobridge_gemm_tn("), "{out}");
    assert!(out.contains("@hlobridge_gemm_nt("), "{out}");
    assert!(!out.contains("dot_general"), "{out}");
    insta::assert_snapshot!(out);
}

#[test]
fn products_outside_the_policy_stay() {
    let cases = [
        // matrix-vector
        "%0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<256x256xf32>, tensor<256x1xf32>) -> tensor<256x1xf32>",
        // tiny
        "%0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>",
        // large: XLA's threaded dot wins
        "%0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>",
        // f8: no kernel
        "%0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<64x64xf8E4M3FN>, tensor<64x64xf8E4M3FN>) -> tensor<64x64xf8E4M3FN>",
        // bf16 operands, f32 result: mixed
        "%0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<64x64xbf16>, tensor<64x64xbf16>) -> tensor<64x64xf32>",
        // mixed precision result
        "%0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf64>",
        // contracting dims not consecutive
        "%0 = stablehlo.dot_general %a, %b, contracting_dims = [0, 2] x [0, 1] : (tensor<8x64x8xf32>, tensor<8x8x64xf32>) -> tensor<64x64xf32>",
        // free dims on both sides of the contracting dim
        "%0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x64x8xf32>, tensor<64x64xf32>) -> tensor<8x8x64xf32>",
        // contracting dims paired out of order
        "%0 = stablehlo.dot_general %a, %b, contracting_dims = [1, 2] x [1, 0] : (tensor<64x8x8xf32>, tensor<8x8x64xf32>) -> tensor<64x64xf32>",
        // batch dims not leading
        "%0 = stablehlo.dot_general %a, %b, batching_dims = [2] x [0], contracting_dims = [1] x [1] : (tensor<64x64x4xf32>, tensor<4x64x64xf32>) -> tensor<4x64x64xf32>",
        // dynamic
        "%0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<?x64xf32>, tensor<64x64xf32>) -> tensor<?x64xf32>",
        // explicit algorithm
        "%0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0], algorithm = <lhs_precision_type = f32, rhs_precision_type = f32, accumulation_type = f32, lhs_component_count = 1, rhs_component_count = 1, num_primitive_operations = 1, allow_imprecise_accumulation = false> : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>",
    ];
    for body in cases {
        let types = body.rsplit_once(" : (").unwrap().1;
        let (ins, out) = types.split_once(") -> ").unwrap();
        let (ta, tb) = ins.split_once(", ").unwrap();
        let text = format!(
            "func.func @f(%a: {ta}, %b: {tb}) -> {out} {{\n  {body}\n  return %0 : {out}\n}}"
        );
        let (printed, r) = rewrite(&text);
        assert_eq!(r.rewritten, 0, "rewrote {body}:\n{printed}");
        assert_eq!(r.products, 1, "{body}");
    }
}

#[test]
fn plain_dot_and_nested_regions_are_rewritten() {
    let text = r#"func.func @f(%a: tensor<64x64xf32>, %p: tensor<i1>) -> tensor<64x64xf32> {
  %0 = "stablehlo.if"(%p) ({
    %1 = stablehlo.dot %a, %a : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    stablehlo.return %1 : tensor<64x64xf32>
  }, {
    stablehlo.return %a : tensor<64x64xf32>
  }) : (tensor<i1>) -> tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}"#;
    let (out, r) = rewrite(text);
    assert_eq!(r.rewritten, 1, "{out}");
    assert!(
        out.contains("stablehlo.custom_call @hlobridge_gemm_nn"),
        "{out}"
    );
}

#[test]
fn target_names_cover_every_transposition() {
    let names: std::collections::HashSet<_> =
        [(false, false), (true, false), (false, true), (true, true)]
            .map(|(a, b)| target_name(a, b))
            .into();
    assert_eq!(names.len(), 4);
}

#[test]
fn a_transpose_of_the_matrix_dims_is_folded_into_the_call() {
    // torch_xla's `x @ w.T`: transpose then dot; and a batched transpose.
    let text = r#"func.func @f(%x: tensor<64x128xf32>, %w: tensor<96x128xf32>, %a: tensor<2x64x32xf32>, %b: tensor<2x48x64xf32>) -> (tensor<64x96xf32>, tensor<2x32x48xf32>, tensor<128x96xf32>) {
  %0 = stablehlo.transpose %w, dims = [1, 0] : (tensor<96x128xf32>) -> tensor<128x96xf32>
  %1 = stablehlo.dot_general %x, %0, contracting_dims = [1] x [0] : (tensor<64x128xf32>, tensor<128x96xf32>) -> tensor<64x96xf32>
  %2 = stablehlo.transpose %a, dims = [0, 2, 1] : (tensor<2x64x32xf32>) -> tensor<2x32x64xf32>
  %3 = stablehlo.transpose %b, dims = [0, 2, 1] : (tensor<2x48x64xf32>) -> tensor<2x64x48xf32>
  %4 = stablehlo.dot_general %2, %3, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x32x64xf32>, tensor<2x64x48xf32>) -> tensor<2x32x48xf32>
  return %1, %4, %0 : tensor<64x96xf32>, tensor<2x32x48xf32>, tensor<128x96xf32>
}"#;
    let (out, r) = rewrite(text);
    assert_eq!(r.rewritten, 2, "{out}");
    assert!(out.contains("@hlobridge_gemm_nt(%x, %w)"), "{out}");
    assert!(out.contains("@hlobridge_gemm_tt(%a, %b)"), "{out}");
    // The transpose still feeds its other user (the third result).
    assert!(out.contains("stablehlo.transpose %w"), "{out}");
}

#[test]
fn a_transpose_that_moves_batch_dims_is_not_folded() {
    let text = r#"func.func @f(%a: tensor<32x2x64xf32>, %b: tensor<2x64x48xf32>) -> tensor<2x32x48xf32> {
  %0 = stablehlo.transpose %a, dims = [1, 0, 2] : (tensor<32x2x64xf32>) -> tensor<2x32x64xf32>
  %1 = stablehlo.dot_general %0, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x32x64xf32>, tensor<2x64x48xf32>) -> tensor<2x32x48xf32>
  return %1 : tensor<2x32x48xf32>
}"#;
    let (out, r) = rewrite(text);
    assert_eq!(r.rewritten, 1, "{out}");
    assert!(out.contains("@hlobridge_gemm_nn(%0, %b)"), "{out}");
}

#[test]
fn grouped_dims_are_merged_with_reshapes() {
    // A torch Linear on a 3-D activation, its weight gradient (two
    // contracting dims), and a product with two free dims on the right.
    let text = r#"func.func @f(%x: tensor<4x32x64xf32>, %w: tensor<64x48xf32>, %g: tensor<4x32x48xf32>, %v: tensor<64x6x8xf32>) -> (tensor<4x32x48xf32>, tensor<64x48xf32>, tensor<4x32x6x8xf32>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [2] x [0] : (tensor<4x32x64xf32>, tensor<64x48xf32>) -> tensor<4x32x48xf32>
  %1 = stablehlo.dot_general %x, %g, contracting_dims = [0, 1] x [0, 1] : (tensor<4x32x64xf32>, tensor<4x32x48xf32>) -> tensor<64x48xf32>
  %2 = stablehlo.dot_general %x, %v, contracting_dims = [2] x [0] : (tensor<4x32x64xf32>, tensor<64x6x8xf32>) -> tensor<4x32x6x8xf32>
  %3 = stablehlo.add %0, %g : tensor<4x32x48xf32>
  return %3, %1, %2 : tensor<4x32x48xf32>, tensor<64x48xf32>, tensor<4x32x6x8xf32>
}"#;
    let (out, r) = rewrite(text);
    assert_eq!(r.rewritten, 3, "{out}");
    assert!(!out.contains("dot_general"), "{out}");
    assert!(
        out.contains("stablehlo.reshape %x : (tensor<4x32x64xf32>) -> tensor<128x64xf32>"),
        "{out}"
    );
    assert!(out.contains("@hlobridge_gemm_tn("), "{out}");
    // The original results keep their users through a reshape back.
    assert!(out.contains("-> tensor<4x32x48xf32>"), "{out}");
    assert!(out.contains("-> tensor<4x32x6x8xf32>"), "{out}");
    insta::assert_snapshot!(out);
}

#[test]
fn a_skinny_product_with_a_large_transposed_weight_runs_swapped() {
    // A decode step's LM head: [4, 768] · [50257, 768]ᵀ.
    let head = r#"func.func public @main(%x: tensor<4x768xf32>, %w: tensor<50257x768xf32>) -> tensor<4x50257xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [1] : (tensor<4x768xf32>, tensor<50257x768xf32>) -> tensor<4x50257xf32>
  return %0 : tensor<4x50257xf32>
}"#;
    let (out, r) = rewrite(head);
    assert_eq!(r.rewritten, 1, "{out}");
    assert!(out.contains("@hlobridge_gemm_nt"), "{out}");
    assert!(
        out.contains("(tensor<50257x768xf32>, tensor<4x768xf32>) -> tensor<50257x4xf32>"),
        "{out}"
    );
    assert!(
        out.contains("stablehlo.transpose %0, dims = [1, 0]"),
        "{out}"
    );
    insta::assert_snapshot!(out);
    // As torch_xla lowers `x @ w.t()`: the transpose is folded.
    let torch = r#"func.func public @main(%x: tensor<4x768xf32>, %w: tensor<50257x768xf32>) -> tensor<4x50257xf32> {
  %t = stablehlo.transpose %w, dims = [1, 0] : (tensor<50257x768xf32>) -> tensor<768x50257xf32>
  %0 = stablehlo.dot_general %x, %t, contracting_dims = [1] x [0] : (tensor<4x768xf32>, tensor<768x50257xf32>) -> tensor<4x50257xf32>
  return %0 : tensor<4x50257xf32>
}"#;
    let (out, r) = rewrite(torch);
    assert_eq!(r.rewritten, 1, "{out}");
    assert!(
        out.contains("@hlobridge_gemm_nt(%arg1, %arg0)")
            || out.contains("@hlobridge_gemm_nt(%w, %x)"),
        "{out}"
    );
    // The same weight stored [K, N], a small weight, or a batched product:
    // XLA keeps them.
    for case in [
        "%0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<4x768xf32>, tensor<768x50257xf32>) -> tensor<4x50257xf32>",
        "%0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [1] : (tensor<4x768xf32>, tensor<2304x768xf32>) -> tensor<4x2304xf32>",
        "%0 = stablehlo.dot_general %a, %b, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<2x4x768xf32>, tensor<2x50257x768xf32>) -> tensor<2x4x50257xf32>",
    ] {
        let ty = |s: &str| s.split(" : (").nth(1).unwrap().to_string();
        let t = ty(case);
        let (a, rest) = t.split_once(", ").unwrap();
        let (b, res) = rest.split_once(") -> ").unwrap();
        let text = format!(
            "func.func public @main(%a: {a}, %b: {b}) -> {res} {{\n  {case}\n  return %0 : {res}\n}}"
        );
        let (out, r) = rewrite(&text);
        assert_eq!(r.rewritten, 0, "{out}");
    }
}

fn rewrite_onednn(text: &str, from_work: u64) -> (String, HostGemmReport) {
    rewrite_with(
        text,
        &HostGemmPolicy::default()
            .with_onednn(Some(from_work))
            .with_onednn_reorient(None),
    )
}

fn rewrite_with(text: &str, policy: &HostGemmPolicy) -> (String, HostGemmReport) {
    let mut m = parse_module(text).expect("parse");
    let r = rewrite_host_gemm(&mut m, policy);
    let out = print_module(&m, &PrintOptions::default());
    parse_module(&out).expect("rewritten module parses back");
    (out, r)
}

#[test]
fn large_f32_products_go_to_onednn_with_transposes_and_row_major_layouts() {
    // A torch Linear on a 3-D input (weight stored [N, K]), attention's
    // batched q·kᵀ, a weight gradient (lhs stored transposed), and an f64
    // product of the same size, which oneDNN's route never takes.
    let text = r#"func.func public @main(%x: tensor<4x256x768xf32>, %w: tensor<3072x768xf32>, %q: tensor<24x128x64xf32>, %k: tensor<24x128x64xf32>, %g: tensor<1024x768xf32>, %a: tensor<1024x3072xf32>, %d: tensor<256x256xf64>) -> (tensor<4x256x3072xf32>, tensor<24x128x128xf32>, tensor<768x3072xf32>, tensor<256x256xf64>) {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [2] x [1] : (tensor<4x256x768xf32>, tensor<3072x768xf32>) -> tensor<4x256x3072xf32>
  %1 = stablehlo.dot_general %q, %k, batching_dims = [0] x [0], contracting_dims = [2] x [2] : (tensor<24x128x64xf32>, tensor<24x128x64xf32>) -> tensor<24x128x128xf32>
  %2 = stablehlo.dot_general %g, %a, contracting_dims = [0] x [0] : (tensor<1024x768xf32>, tensor<1024x3072xf32>) -> tensor<768x3072xf32>
  %3 = stablehlo.dot_general %d, %d, contracting_dims = [1] x [0] : (tensor<256x256xf64>, tensor<256x256xf64>) -> tensor<256x256xf64>
  return %0, %1, %2, %3 : tensor<4x256x3072xf32>, tensor<24x128x128xf32>, tensor<768x3072xf32>, tensor<256x256xf64>
}"#;
    let (out, r) = rewrite_onednn(text, 1 << 24);
    assert_eq!((r.rewritten, r.onednn), (4, 3), "{out}");
    assert_eq!(out.matches("@__onednn$matmul(").count(), 3, "{out}");
    // The f64 product keeps the host kernel.
    assert!(out.contains("@hlobridge_gemm_nn("), "{out}");
    for flags in [
        r#"\"transpose_a\": false, \"transpose_b\": true"#,
        r#"\"transpose_a\": true, \"transpose_b\": false"#,
    ] {
        assert!(out.contains(flags), "{flags}: {out}");
    }
    // The Linear's [4, 256, 768] input is one [1024, 768] matrix.
    assert!(
        out.contains("tensor<4x256x768xf32>) -> tensor<1024x768xf32>"),
        "{out}"
    );
    assert!(
        out.contains(
            "operand_layouts = [dense<[1, 0]> : tensor<2xindex>, dense<[1, 0]> : tensor<2xindex>]"
        ),
        "{out}"
    );
    assert!(out.contains("operand_layouts = [dense<[2, 1, 0]> : tensor<3xindex>, dense<[2, 1, 0]> : tensor<3xindex>]"), "{out}");
    insta::assert_snapshot!(out);
}

#[test]
fn onednn_starts_at_its_work_bound() {
    let text = r#"func.func public @main(%a: tensor<128x128xf32>, %b: tensor<256x256xf32>) -> (tensor<128x128xf32>, tensor<256x256xf32>) {
  %0 = stablehlo.dot_general %a, %a, contracting_dims = [1] x [0] : (tensor<128x128xf32>, tensor<128x128xf32>) -> tensor<128x128xf32>
  %1 = stablehlo.dot_general %b, %b, contracting_dims = [1] x [0] : (tensor<256x256xf32>, tensor<256x256xf32>) -> tensor<256x256xf32>
  return %0, %1 : tensor<128x128xf32>, tensor<256x256xf32>
}"#;
    let (out, r) = rewrite_onednn(text, 256 * 256 * 256);
    assert_eq!((r.rewritten, r.onednn), (2, 1), "{out}");
    assert!(
        out.contains("@hlobridge_gemm_nn("),
        "128³ keeps the host kernel: {out}"
    );
    // Off: the 256³ product is the host kernel's again.
    let (out, r) = rewrite(text);
    assert_eq!((r.rewritten, r.onednn), (2, 0), "{out}");
    assert!(!out.contains("onednn"), "{out}");
}

#[test]
fn onednn_takes_products_above_the_host_window() {
    // 1024³ is XLA's without oneDNN (above `max_work`), oneDNN's with it;
    // a matrix-vector product stays with XLA either way.
    let text = r#"func.func public @main(%a: tensor<1024x1024xf32>, %v: tensor<1024x1xf32>) -> (tensor<1024x1024xf32>, tensor<1024x1xf32>) {
  %0 = stablehlo.dot_general %a, %a, contracting_dims = [1] x [0] : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %1 = stablehlo.dot_general %a, %v, contracting_dims = [1] x [0] : (tensor<1024x1024xf32>, tensor<1024x1xf32>) -> tensor<1024x1xf32>
  return %0, %1 : tensor<1024x1024xf32>, tensor<1024x1xf32>
}"#;
    assert_eq!(rewrite(text).1.rewritten, 0);
    let (out, r) = rewrite_onednn(text, 1 << 24);
    assert_eq!((r.rewritten, r.onednn), (1, 1), "{out}");
}

#[test]
fn onednn_products_with_a_wide_row_major_right_operand_are_reoriented() {
    // `dY · W` of a [768, 3072] weight (right operand stored [K, N], N =
    // 3072) at 1576 and at 512 rows: one call per 1024-column block of the
    // weight, on slices of it, concatenated. `Xᵀ · dH` (a weight gradient:
    // left operand stored transposed, M = 768): the product runs swapped
    // and its [3072, 768] result is transposed back. The same in a batch.
    // A right operand 2304 wide keeps its orientation, and so does a
    // 64-row `x · W` (the slices would cost what they save).
    let text = r#"func.func public @main(%dy: tensor<1576x768xf32>, %w: tensor<768x3072xf32>, %x: tensor<1576x768xf32>, %dh: tensor<1576x3072xf32>, %bx: tensor<2x512x768xf32>, %bh: tensor<2x512x3072xf32>, %v: tensor<768x2304xf32>, %s: tensor<512x768xf32>, %t: tensor<64x768xf32>) -> (tensor<1576x3072xf32>, tensor<768x3072xf32>, tensor<2x768x3072xf32>, tensor<1576x2304xf32>, tensor<512x3072xf32>, tensor<64x3072xf32>) {
  %0 = stablehlo.dot_general %dy, %w, contracting_dims = [1] x [0] : (tensor<1576x768xf32>, tensor<768x3072xf32>) -> tensor<1576x3072xf32>
  %1 = stablehlo.dot_general %x, %dh, contracting_dims = [0] x [0] : (tensor<1576x768xf32>, tensor<1576x3072xf32>) -> tensor<768x3072xf32>
  %2 = stablehlo.dot_general %bx, %bh, batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<2x512x768xf32>, tensor<2x512x3072xf32>) -> tensor<2x768x3072xf32>
  %3 = stablehlo.dot_general %dy, %v, contracting_dims = [1] x [0] : (tensor<1576x768xf32>, tensor<768x2304xf32>) -> tensor<1576x2304xf32>
  %4 = stablehlo.dot_general %s, %w, contracting_dims = [1] x [0] : (tensor<512x768xf32>, tensor<768x3072xf32>) -> tensor<512x3072xf32>
  %5 = stablehlo.dot_general %t, %w, contracting_dims = [1] x [0] : (tensor<64x768xf32>, tensor<768x3072xf32>) -> tensor<64x3072xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<1576x3072xf32>, tensor<768x3072xf32>, tensor<2x768x3072xf32>, tensor<1576x2304xf32>, tensor<512x3072xf32>, tensor<64x3072xf32>
}"#;
    let on = HostGemmPolicy::default().with_onednn(Some(1 << 24));
    let (out, r) = rewrite_with(text, &on);
    assert_eq!((r.rewritten, r.onednn), (6, 6), "{out}");
    assert_eq!(out.matches("stablehlo.slice %w").count(), 6, "{out}");
    for cols in ["0:1024", "1024:2048", "2048:3072"] {
        assert_eq!(
            out.matches(&format!("stablehlo.slice %w [0:768, {cols}]"))
                .count(),
            2,
            "{out}"
        );
    }
    assert_eq!(
        out.matches("dim = 1 : (tensor<1576x1024xf32>, tensor<1576x1024xf32>, tensor<1576x1024xf32>) -> tensor<1576x3072xf32>").count(),
        1,
        "{out}"
    );
    assert_eq!(
        out.matches("dim = 1 : (tensor<512x1024xf32>, tensor<512x1024xf32>, tensor<512x1024xf32>) -> tensor<512x3072xf32>").count(),
        1,
        "{out}"
    );
    assert!(!out.contains("stablehlo.transpose %w"), "{out}");
    assert!(out.contains("@__onednn$matmul(%t, %w)"), "{out}");
    assert!(out.contains("@__onednn$matmul(%dh, %x)"), "{out}");
    assert!(
        out.contains("(tensor<3072x768xf32>) -> tensor<768x3072xf32>"),
        "{out}"
    );
    assert!(out.contains("@__onednn$matmul(%bh, %bx)"), "{out}");
    assert!(
        out.contains("dims = [0, 2, 1] : (tensor<2x3072x768xf32>) -> tensor<2x768x3072xf32>"),
        "{out}"
    );
    assert!(out.contains("@__onednn$matmul(%dy, %v)"), "{out}");
    insta::assert_snapshot!(out);
    // Off: every product keeps its orientation and no transpose is added.
    let (out, _) = rewrite_with(text, &on.with_onednn_reorient(None));
    assert!(!out.contains("stablehlo.transpose"), "{out}");
    assert!(!out.contains("stablehlo.slice"), "{out}");
}
