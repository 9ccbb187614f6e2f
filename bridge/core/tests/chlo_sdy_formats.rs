//! The custom formats of the `chlo` and Shardy (`sdy`) ops
//! (`dialects/chlo.rs`, `dialects/sdy.rs`) against text printed by MLIR
//! itself (jaxlib 0.10.2): `tests/fixtures/formats/chlo_sdy.mlir` is MLIR's
//! pretty form and `chlo_sdy.generic.mlir` its generic form of the same
//! module.

mod common;
use common::fmt;
use hlobridge::parse_module;

fn fixture(name: &str) -> String {
    common::fixture("formats", name)
}

/// Replace the result bindings (`%a, %b =`, `%0:2 =`) by `%_ =` and every
/// other SSA name by `%_`, so lines compare independently of naming.
fn normalize(line: &str) -> String {
    let line = line.trim();
    let body = match (line.starts_with('%'), line.find(" = ")) {
        (true, Some(i)) => &line[i..],
        _ => line,
    };
    let mut out = String::from(if body.len() < line.len() { "%_" } else { "" });
    let mut chars = body.chars().peekable();
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

/// The normalized lines holding a `chlo.` or `sdy.` op.
fn op_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| {
            let t = l.trim_start();
            let t = t.split_once(" = ").map_or(
                t,
                |(lhs, rhs)| {
                    if lhs.starts_with('%') {
                        rhs
                    } else {
                        t
                    }
                },
            );
            t.starts_with("chlo.")
                || t.starts_with("sdy.")
                || t.starts_with("\"chlo.")
                || t.starts_with("\"sdy.")
        })
        .map(normalize)
        .collect()
}

fn assert_same_lines(got: &str, want: &str) {
    let (got, want) = (op_lines(got), op_lines(want));
    assert!(want.len() > 40, "fixture has only {} op lines", want.len());
    assert_eq!(got.len(), want.len(), "number of op lines");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w);
    }
}

#[test]
fn pretty_fixture_prints_like_mlir() {
    let pretty = fixture("chlo_sdy.mlir");
    assert_same_lines(&fmt(&pretty, false), &pretty);
}

#[test]
fn generic_fixture_prints_pretty_like_mlir() {
    let pretty = fixture("chlo_sdy.mlir");
    let generic = fixture("chlo_sdy.generic.mlir");
    assert_same_lines(&fmt(&generic, false), &pretty);
}

#[test]
fn pretty_fixture_prints_generic_like_mlir() {
    let pretty = fixture("chlo_sdy.mlir");
    let generic = fixture("chlo_sdy.generic.mlir");
    assert_same_lines(&fmt(&pretty, true), &generic);
    assert_same_lines(&fmt(&generic, true), &generic);
}

#[test]
fn printing_is_idempotent() {
    for name in ["chlo_sdy.mlir", "chlo_sdy.generic.mlir"] {
        let src = fixture(name);
        for generic in [false, true] {
            let once = fmt(&src, generic);
            assert_eq!(fmt(&once, generic), once, "{name} generic={generic}");
        }
    }
}

/// Ops whose attributes do not fit the custom syntax fall back to the
/// generic form instead of losing information.
#[test]
fn unfit_ops_print_generic() {
    let src = r#"
"sdy.mesh"() <{mesh = #sdy<not_a_mesh>, sym_name = "m"}> : () -> ()
func.func @f(%a: tensor<4xf32>) {
  %0 = "sdy.sharding_constraint"(%a) <{sharding = "oops"}> : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "sdy.propagation_barrier"(%a) <{allowed_direction = 7 : i32}> : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "chlo.asin"(%a) <{bogus = 1 : i64}> : (tensor<4xf32>) -> tensor<4xf32>
  %3:2 = "chlo.top_k"(%a) <{k = 2 : i32}> : (tensor<4xf32>) -> (tensor<2xf32>, tensor<2xi32>)
  %4 = "sdy.all_reduce"(%a) <{out_sharding = #sdy.sharding<@m, [{}]>, reduction_axes = #sdy<axis_ref_list{"x"} {"y"}>}> : (tensor<4xf32>) -> tensor<4xf32>
  %5 = "sdy.reshard"(%a) <{sharding = #sdy.sharding<@m, [{}]>}> : (tensor<4xf32>) -> tensor<4xi32>
  return
}
"#;
    let out = fmt(src, false);
    for op in [
        "\"sdy.mesh\"",
        "\"sdy.sharding_constraint\"",
        "\"sdy.propagation_barrier\"",
        "\"chlo.asin\"",
        "\"chlo.top_k\"",
        "\"sdy.all_reduce\"",
        "\"sdy.reshard\"",
    ] {
        assert!(out.contains(op), "{op} should print generic:\n{out}");
    }
    assert_eq!(fmt(&out, false), out);
}

/// Malformed custom syntax gives an error, never a panic.
#[test]
fn malformed_custom_syntax_is_an_error() {
    let cases = [
        "sdy.mesh @m = <[\"x\"=2]",
        "sdy.mesh @m <[]>",
        "sdy.mesh = <[]>",
        "func.func @f(%a: tensor<4xf32>) {\n %0 = sdy.sharding_constraint %a : tensor<4xf32>\n return\n}",
        "func.func @f(%a: tensor<4xf32>) {\n %0 = sdy.sharding_constraint %a <@m, [{}] : tensor<4xf32>\n return\n}",
        "func.func @f(%a: tensor<4xf32>) {\n %0 = sdy.propagation_barrier %a allowed_direction=SIDEWAYS : tensor<4xf32>\n return\n}",
        "func.func @f(%a: tensor<4xf32>) {\n sdy.sharding_group %a group_id=x : tensor<4xf32>\n return\n}",
        "func.func @f(%a: tensor<4xf32>) {\n %0 = sdy.manual_computation(%a) in_shardings=[] out_shardings=[] manual_axes={} (%b: tensor<4xf32> {\n sdy.return %b : tensor<4xf32>\n } : (tensor<4xf32>) -> tensor<4xf32>\n return\n}",
        "func.func @f(%a: tensor<4xf32>) {\n %0 = sdy.named_computation<foo>(%a) (%b: tensor<4xf32>) {\n sdy.return %b : tensor<4xf32>\n } : (tensor<4xf32>) -> tensor<4xf32>\n return\n}",
        "func.func @f(%a: tensor<4xf32>) {\n %0 = sdy.all_gather [{\"x\"}] %a out_sharding= : tensor<4xf32>\n return\n}",
        "func.func @f(%a: tensor<4xf32>) {\n %0 = chlo.asin %a : tensor<4xf32>\n return\n}",
        "func.func @f(%a: tensor<4xf32>) {\n %0 = chlo.next_after %a : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>\n return\n}",
        "func.func @f(%a: tensor<4xf32>) {\n %0:2 = chlo.top_k(%a, k = 2.5) : tensor<4xf32> -> (tensor<2xf32>, tensor<2xi32>)\n return\n}",
        "func.func @f(%a: tensor<4xf32>) {\n %0:2 = chlo.top_k(%a) : tensor<4xf32> -> (tensor<2xf32>, tensor<2xi32>)\n return\n}",
        "func.func @f() {\n %0 = chlo.constant 1.0 : f32\n return\n}",
        "func.func @f(%a: tensor<4xf32>, %b: tensor<f32>) {\n %0:2 = chlo.scan(%a) inits (%b) dimension=0 {\n ^bb0(%x: tensor<f32>, %c: tensor<f32>):\n stablehlo.return %x, %c : tensor<f32>, tensor<f32>\n } : (tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>)\n return\n}",
        "func.func @f(%a: tensor<4xf32>, %b: tensor<f32>) {\n %0 = chlo.scan(%a) inits (%b) dimension=0 {\n ^bb0(%x: tensor<f32>, %c: tensor<f32>):\n stablehlo.return %x, %c : tensor<f32>, tensor<f32>\n } : (tensor<4xf32>, tensor<f32>) -> ()\n return\n}",
    ];
    for src in cases {
        assert!(parse_module(src).is_err(), "should not parse:\n{src}");
    }
}
