//! The custom formats of StableHLO's shape and data-movement ops
//! (`dialects/stablehlo_data.rs`) against text printed by MLIR itself
//! (jaxlib 0.10.2): `tests/fixtures/formats/stablehlo_data.mlir` is MLIR's
//! pretty form and `stablehlo_data.generic.mlir` its generic form of the
//! same module.

mod common;
use common::fmt;
use hlobridge::parse_module;

fn fixture(name: &str) -> String {
    common::fixture("formats", name)
}

/// Replace every SSA name (`%foo`, `%3#1`) by `%_`, so lines compare
/// independently of value naming.
fn normalize(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.trim().chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '%' {
            out.push('_');
            while chars
                .peek()
                .is_some_and(|&c| c.is_ascii_alphanumeric() || "_$.-#".contains(c))
            {
                chars.next();
            }
        }
    }
    out
}

/// The normalized lines holding a `stablehlo.` op.
fn op_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains("stablehlo."))
        .map(normalize)
        .collect()
}

#[test]
fn mlir_pretty_text_round_trips_exactly() {
    let src = fixture("stablehlo_data.mlir");
    let out = fmt(&src, false);
    assert_eq!(out, src);
    assert_eq!(fmt(&out, false), out);
}

#[test]
fn generic_form_matches_mlir() {
    let want = op_lines(&fixture("stablehlo_data.generic.mlir"));
    let got = op_lines(&fmt(&fixture("stablehlo_data.mlir"), true));
    assert_eq!(got, want);
}

#[test]
fn generic_input_prints_like_mlir_pretty() {
    let want = op_lines(&fixture("stablehlo_data.mlir"));
    let got = op_lines(&fmt(&fixture("stablehlo_data.generic.mlir"), false));
    assert_eq!(got, want);
}

/// Ops the custom syntax cannot express stay generic, and survive a
/// round trip unchanged.
#[test]
fn unexpressible_ops_fall_back_to_generic() {
    let cases = [
        // MLIR's own pretty form of a rank-0 dynamic_slice does not parse.
        r#"%0 = "stablehlo.dynamic_slice"(%c) <{slice_sizes = array<i64>}> : (tensor<f32>) -> tensor<f32>"#,
        // mismatched slice lists
        r#"%0 = "stablehlo.slice"(%b) <{limit_indices = array<i64: 2>, start_indices = array<i64: 0, 1>, strides = array<i64: 1, 1>}> : (tensor<2x4xf32>) -> tensor<2x3xf32>"#,
        // wrong integer widths
        r#"%0 = "stablehlo.get_tuple_element"(%t) <{index = 1 : i64}> : (tuple<tensor<f32>, tensor<i32>>) -> tensor<i32>"#,
        r#"%0 = "stablehlo.iota"() <{iota_dimension = 0 : i32}> : () -> tensor<4xf32>"#,
        r#"%0 = "stablehlo.reduce_precision"(%b) <{exponent_bits = 5 : i64, mantissa_bits = 10 : i32}> : (tensor<2x4xf32>) -> tensor<2x4xf32>"#,
        // tuple operand types differ from the result's element types
        r#"%0 = "stablehlo.tuple"(%c) : (tensor<f32>) -> tuple<tensor<i32>>"#,
        // no operands / missing or non-array attributes / unknown property
        r#"%0 = "stablehlo.concatenate"() <{dimension = 0 : i64}> : () -> tensor<2x4xf32>"#,
        r#"%0 = "stablehlo.transpose"(%b) : (tensor<2x4xf32>) -> tensor<4x2xf32>"#,
        r#"%0 = "stablehlo.reverse"(%b) <{dimensions = [0]}> : (tensor<2x4xf32>) -> tensor<2x4xf32>"#,
        r#"%0 = "stablehlo.broadcast_in_dim"(%c) <{broadcast_dimensions = array<i64>, extra = 1 : i64}> : (tensor<f32>) -> tensor<3xf32>"#,
        // the same attribute twice (inherent and discardable)
        r#"%0 = "stablehlo.iota"() <{iota_dimension = 0 : i64}> {iota_dimension = 1 : i64} : () -> tensor<4xf32>"#,
        // wrong arity
        r#"%0 = "stablehlo.reshape"(%b, %b) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<8xf32>"#,
    ];
    for case in cases {
        let src = format!(
            "func.func @f(%b: tensor<2x4xf32>, %c: tensor<f32>, %t: tuple<tensor<f32>, tensor<i32>>) {{\n  {case}\n  return\n}}\n"
        );
        let out = fmt(&src, false);
        assert_eq!(out, src, "{case}");
    }
}

/// Optional syntax that MLIR accepts: strides, attr-dicts, the stray
/// comma of a rank-0 `dynamic_slice` and `SameOperandsAndResultType`'s
/// functional spelling.
#[test]
fn accepted_variants() {
    let src = "func.func @f(%b: tensor<2x4xf32>, %c: tensor<f32>) {
  %0 = stablehlo.slice %b [0:2:1, 1:4:3] {x} : (tensor<2x4xf32>) -> tensor<2x1xf32>
  %1 = stablehlo.dynamic_slice %c, , sizes = [] : (tensor<f32>) -> tensor<f32>
  %2 = stablehlo.reverse %b, dims = [0] : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return
}
";
    let want = "func.func @f(%b: tensor<2x4xf32>, %c: tensor<f32>) {
  %0 = stablehlo.slice %b [0:2, 1:4:3] {x} : (tensor<2x4xf32>) -> tensor<2x1xf32>
  %1 = \"stablehlo.dynamic_slice\"(%c) <{slice_sizes = array<i64>}> : (tensor<f32>) -> tensor<f32>
  %2 = stablehlo.reverse %b, dims = [0] : tensor<2x4xf32>
  return
}
";
    assert_eq!(fmt(src, false), want);
}

#[test]
fn malformed_custom_syntax_is_an_error() {
    let cases = [
        "%0 = stablehlo.slice %b [0:2, 1] : (tensor<2x4xf32>) -> tensor<2x3xf32>",
        "%0 = stablehlo.slice %b [0:2 : (tensor<2x4xf32>) -> tensor<2x3xf32>",
        "%0 = stablehlo.reduce_precision %b, format = e5 : tensor<2x4xf32>",
        "%0 = stablehlo.reduce_precision %b, format = e99999999999m1 : tensor<2x4xf32>",
        "%0 = stablehlo.tuple %c : tensor<f32>",
        "%0 = stablehlo.tuple %c, %c : tuple<tensor<f32>>",
        "%0 = stablehlo.pad %b, %c, high = [0, 0], low = [0, 0], interior = [0, 0] : (tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>",
        "%0 = stablehlo.iota dim = x : tensor<4xf32>",
        "%0 = stablehlo.get_tuple_element %c[] : (tensor<f32>) -> tensor<f32>",
        "%0 = stablehlo.get_tuple_element %c[4294967296] : (tensor<f32>) -> tensor<f32>",
        "%0 = stablehlo.concatenate %b, %b dim = 0 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>",
        "%0 = stablehlo.broadcast_in_dim %c, dims = [99999999999999999999] : (tensor<f32>) -> tensor<3xf32>",
        "%0 = stablehlo.dynamic_slice %b, %c sizes = [1] : (tensor<2x4xf32>, tensor<f32>) -> tensor<1xf32>",
    ];
    for case in cases {
        let src = format!(
            "func.func @f(%b: tensor<2x4xf32>, %c: tensor<f32>) {{\n  {case}\n  return\n}}\n"
        );
        assert!(parse_module(&src).is_err(), "parsed: {case}");
    }
}
