//! Unit tests of the check rewrite: parse → rewrite → print → parse.

use super::*;
use crate::{parse_module, print_module, PrintOptions};

const MAIN_CHECKS: &str = r#"module @jit_main attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main() -> (tensor<2xf32> {jax.result_info = ""}) {
%0 = call @inputs() : () -> tensor<2xf32>
%1 = call @expected() : () -> tensor<2xf32>
%2 = stablehlo.abs %0 : tensor<2xf32>
"stablehlo.custom_call"(%2, %1) <{call_target_name = "check.expect_close", has_side_effect = true}> {max_ulp_difference = 5 : i64} : (tensor<2xf32>, tensor<2xf32>) -> ()
"stablehlo.custom_call"(%2, %1) <{call_target_name = "check.expect_eq", has_side_effect = true}> : (tensor<2xf32>, tensor<2xf32>) -> ()
"check.expect_almost_eq_const"(%2) <{value = dense<[1.0, 2.0]> : tensor<2xf32>}> {tolerance = 1.0e-2 : f64} : (tensor<2xf32>) -> ()
%3 = "stablehlo.custom_call"(%1, %2) <{call_target_name = "check.eq"}> : (tensor<2xf32>, tensor<2xf32>) -> tensor<i1>
return %2 : tensor<2xf32>
  }
  func.func private @inputs() -> (tensor<2xf32> {mhlo.layout_mode = "default"}) {
%0 = "stablehlo.constant"() <{value = dense<[-1.0, 2.0]> : tensor<2xf32>}> : () -> tensor<2xf32>
return %0 : tensor<2xf32>
  }
  func.func private @expected() -> (tensor<2xf32> {mhlo.layout_mode = "default"}) {
%0 = "stablehlo.constant"() <{value = dense<[1.0, 2.0]> : tensor<2xf32>}> : () -> tensor<2xf32>
return %0 : tensor<2xf32>
  }
}
"#;

fn rewrite(src: &str) -> (Result<Rewrite, ConformError>, String) {
    let mut m = parse_module(src).unwrap_or_else(|e| panic!("{e}"));
    let r = rewrite_checks(&mut m);
    (r, print_module(&m, &PrintOptions::default()))
}

/// Parse the printed text again: it must be a fixpoint of print ∘ parse.
fn reparse(text: &str) -> Module {
    let m = parse_module(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(print_module(&m, &PrintOptions::default()), text);
    m
}

fn main_results(m: &Module) -> usize {
    let funcs = collect_funcs(m);
    let main = pick_entry(m, &funcs).unwrap();
    func_type(m, main).unwrap().1.len()
}

#[test]
fn checks_in_main_become_outputs() {
    let (r, text) = rewrite(MAIN_CHECKS);
    let mut r = r.unwrap();
    assert!(!text.contains("check."), "{text}");
    assert_eq!(r.entry, "main");
    assert_eq!((r.original_outputs, r.total_outputs), (1, 9));
    attach_source_lines(&mut r.checks, MAIN_CHECKS, 1);
    let c = &r.checks;
    assert_eq!(c.len(), 4);
    assert_eq!(
        c[0].kind,
        CheckKind::Close {
            min_ulp_difference: 0,
            max_ulp_difference: 5
        }
    );
    assert_eq!((c[0].actual_output, c[0].expected_output), (1, 2));
    assert_eq!(c[0].line, Some(6));
    assert_eq!(c[1].kind, CheckKind::Eq);
    assert_eq!((c[1].actual_output, c[1].expected_output), (3, 4));
    assert_eq!(c[2].kind, CheckKind::AlmostEq { tolerance: 0.01 });
    assert_eq!(c[2].target, "check.expect_almost_eq_const");
    assert_eq!(c[3].target, "check.eq");
    // check.eq(expected, actual): actual is the abs result (output 0's value).
    assert_eq!((c[3].actual_output, c[3].expected_output), (7, 8));
    assert_eq!(c[3].label(), "check.eq #3 (line 9)");
    assert!(
        !text.contains("dense<true>"),
        "unused verdicts leave no constant"
    );
    // The const check materialized its value as a constant.
    assert!(text.contains("dense<[1.0, 2.0]>"), "{text}");
    let m = reparse(&text);
    assert_eq!(main_results(&m), 9);
    // res_attrs keeps the original entry and covers the new results.
    assert!(text.contains(r#"jax.result_info = """#), "{text}");
}

#[test]
fn rewrite_is_idempotent_on_clean_modules() {
    let (r, text) = rewrite(MAIN_CHECKS);
    r.unwrap();
    let (r2, text2) = rewrite(&text);
    let r2 = r2.unwrap();
    assert!(r2.checks.is_empty());
    assert_eq!(r2.original_outputs, r2.total_outputs);
    assert_eq!(text, text2);
}

const NESTED: &str = r#"module {
  func.func public @main() -> tensor<f32> {
%0 = call @helper() : () -> tensor<f32>
%1 = call @helper() : () -> tensor<f32>
%2 = stablehlo.add %0, %1 : tensor<f32>
return %2 : tensor<f32>
  }
  func.func private @helper() -> tensor<f32> {
%0 = call @leaf() : () -> tensor<f32>
return %0 : tensor<f32>
  }
  func.func private @leaf() -> (tensor<f32> {mhlo.layout_mode = "default"}) {
%0 = "stablehlo.constant"() <{value = dense<1.0> : tensor<f32>}> : () -> tensor<f32>
"stablehlo.custom_call"(%0, %0) <{call_target_name = "check.expect_eq", has_side_effect = true}> : (tensor<f32>, tensor<f32>) -> ()
return %0 : tensor<f32>
  }
}
"#;

#[test]
fn checks_in_callees_are_threaded_through_every_call() {
    let (r, text) = rewrite(NESTED);
    let r = r.unwrap();
    assert_eq!(r.checks.len(), 2, "one check per call path");
    assert_eq!(r.checks[0].function, "leaf");
    let outs: Vec<_> = r
        .checks
        .iter()
        .map(|c| (c.actual_output, c.expected_output))
        .collect();
    assert_eq!(outs, vec![(1, 2), (3, 4)]);
    assert!(text.contains("call @leaf() : () -> (tensor<f32>, tensor<f32>, tensor<f32>)"));
    assert!(text.contains("call @helper() : () -> (tensor<f32>, tensor<f32>, tensor<f32>)"));
    let m = reparse(&text);
    assert_eq!(main_results(&m), 5);
}

#[test]
fn unsupported_checks_are_reported() {
    let in_loop = r#"func.func @main() -> tensor<f32> {
  %0 = "stablehlo.constant"() <{value = dense<1.0> : tensor<f32>}> : () -> tensor<f32>
  %1 = "stablehlo.while"(%0) ({
  ^bb0(%a: tensor<f32>):
%c = "stablehlo.compare"(%a, %a) <{comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
"stablehlo.return"(%c) : (tensor<i1>) -> ()
  }, {
  ^bb0(%a: tensor<f32>):
"stablehlo.custom_call"(%a, %a) <{call_target_name = "check.expect_eq"}> : (tensor<f32>, tensor<f32>) -> ()
"stablehlo.return"(%a) : (tensor<f32>) -> ()
  }) : (tensor<f32>) -> tensor<f32>
  return %1 : tensor<f32>
}
"#;
    let (r, _) = rewrite(in_loop);
    let e = r.unwrap_err();
    assert!(e.to_string().contains("nested region"), "{e}");

    let uncalled = r#"module {
  func.func public @main() -> tensor<f32> {
%0 = "stablehlo.constant"() <{value = dense<1.0> : tensor<f32>}> : () -> tensor<f32>
return %0 : tensor<f32>
  }
  func.func private @orphan(%a: tensor<f32>) {
"stablehlo.custom_call"(%a, %a) <{call_target_name = "check.expect_close"}> : (tensor<f32>, tensor<f32>) -> ()
return
  }
}
"#;
    let e = rewrite(uncalled).0.unwrap_err();
    assert!(e.to_string().contains("never called"), "{e}");
    assert!(
        e.to_string().contains("check.expect_close #0 in @orphan"),
        "{e}"
    );

    let unknown = r#"func.func @main(%a: tensor<f32>) {
  "check.expect_serialized_eq"(%a) <{probe_id = "p"}> : (tensor<f32>) -> ()
  return
}
"#;
    let e = rewrite(unknown).0.unwrap_err();
    assert!(e.to_string().contains("unknown check"), "{e}");
    let e = rewrite("module {\n}\n").0.unwrap_err();
    assert!(matches!(e, ConformError::NoEntry(_)), "{e}");
}

#[test]
fn used_check_eq_verdict_becomes_true() {
    let src = r#"func.func @main() -> tensor<i1> {
  %0 = "stablehlo.constant"() <{value = dense<1.0> : tensor<f32>}> : () -> tensor<f32>
  %1 = "stablehlo.custom_call"(%0, %0) <{call_target_name = "check.eq"}> : (tensor<f32>, tensor<f32>) -> tensor<i1>
  return %1 : tensor<i1>
}
"#;
    let (r, text) = rewrite(src);
    let r = r.unwrap();
    assert_eq!((r.original_outputs, r.total_outputs), (1, 3));
    assert!(text.contains("dense<true> : tensor<i1>"), "{text}");
    assert!(!text.contains("check."), "{text}");
    reparse(&text);
}

#[test]
fn single_public_function_becomes_main() {
    let src = r#"module {
  func.func @add_op_test_si4() {
%0 = "stablehlo.constant"() <{value = dense<[1, 2]> : tensor<2xi4>}> : () -> tensor<2xi4>
"check.expect_eq_const"(%0) <{value = dense<[1, 2]> : tensor<2xi4>}> : (tensor<2xi4>) -> ()
return
  }
}
"#;
    let (r, text) = rewrite(src);
    let r = r.unwrap();
    assert_eq!(r.entry, "add_op_test_si4");
    assert_eq!(r.checks.len(), 1);
    assert!(
        text.contains("@main() -> (tensor<2xi4>, tensor<2xi4>)"),
        "{text}"
    );
    reparse(&text);
}

#[test]
fn entry_params_names() {
    let src = r#"func.func public @main(%arg0: tensor<2xf32>, %x: tensor<i32> {jax.arg_info = "y"}) -> tensor<2xf32> {
  return %arg0 : tensor<2xf32>
}
"#;
    let m = parse_module(src).unwrap();
    let p = entry_params(&m).unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].1, vec!["arg0"]);
    assert_eq!(p[1].1, vec!["arg1", "x", "y"]);
}

#[test]
fn float_literals() {
    assert_eq!(parse_float("1.0e-2"), Some(0.01));
    assert_eq!(parse_float("0x3F800000"), Some(1.0));
    assert_eq!(parse_float("0x3FF0000000000000"), Some(1.0));
    assert_eq!(parse_float("nope"), None);
}
