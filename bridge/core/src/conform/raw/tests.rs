//! Unit tests of the raw (textual) check rewrite: it must agree with the
//! parsed rewrite on checks, kinds and output indices, leave every other
//! byte alone, and refuse what it cannot do with a reason.

use super::*;
use crate::conform::{attach_source_lines, rewrite_checks, CheckKind, ConformError};
use crate::parse_module;

const SUITE_STYLE: &str = r#"// RUN: stablehlo-translate --interpret %s

module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<2xf32> {jax.result_info = "", mhlo.layout_mode = "default"}) {
    %0 = call @inputs() : () -> tensor<2xf32>
    %1 = call @expected() : () -> tensor<2xf32>
    %2 = stablehlo.abs %0 : tensor<2xf32>
    stablehlo.custom_call @check.expect_close(%2, %1) {has_side_effect = true, max_ulp_difference = 5 : i64} : (tensor<2xf32>, tensor<2xf32>) -> ()
    "stablehlo.custom_call"(%2, %1) <{call_target_name = "check.expect_eq", has_side_effect = true}> : (tensor<2xf32>, tensor<2xf32>) -> ()
    "check.expect_almost_eq_const"(%2) <{value = dense<[1.0, 2.0]> : tensor<2xf32>}> {tolerance = 1.0e-2 : f64} : (tensor<2xf32>) -> ()
    %3 = "stablehlo.custom_call"(%1, %2) <{call_target_name = "check.eq"}> : (tensor<2xf32>, tensor<2xf32>) -> tensor<i1>
    %4 = stablehlo.not %3 : tensor<i1>
    return %2 : tensor<2xf32>
  }
  func.func private @inputs() -> (tensor<2xf32> {mhlo.layout_mode = "default"}) {
    %cst = stablehlo.constant dense<[-1.0, 2.0]> : tensor<2xf32>
    return %cst : tensor<2xf32>
  }
  func.func private @expected() -> (tensor<2xf32> {mhlo.layout_mode = "default"}) {
    %cst = stablehlo.constant dense<"0x0000803F00000040"> : tensor<2xf32>
    return %cst : tensor<2xf32>
  }
}
"#;

/// The parsed path's checks for `src`, with source lines.
fn parsed_checks(src: &str) -> Vec<Check> {
    let mut m = parse_module(src).unwrap_or_else(|e| panic!("{e}"));
    let mut rw = rewrite_checks(&mut m).unwrap();
    attach_source_lines(&mut rw.checks, src, 1);
    rw.checks
}

/// Number of results of `@main` in `text`, read by hlobridge's parser.
fn main_results(text: &str) -> usize {
    let m = parse_module(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    crate::conform::entry_results(&m).unwrap().len()
}

#[test]
fn agrees_with_the_parsed_rewrite_and_keeps_other_bytes() {
    let r = rewrite_checks_text(SUITE_STYLE, 1).unwrap();
    assert_eq!(r.checks, parsed_checks(SUITE_STYLE));
    assert_eq!((r.original_outputs, r.total_outputs), (1, 9));
    assert_eq!(
        r.checks[0].kind,
        CheckKind::Close {
            min_ulp_difference: 0,
            max_ulp_difference: 5
        }
    );
    assert_eq!(r.checks[2].kind, CheckKind::AlmostEq { tolerance: 0.01 });
    assert_eq!(r.checks[3].line, Some(11));
    assert!(!r.text.contains("check."), "{}", r.text);
    // Same number of lines; only the signature, the check lines and the
    // return differ.
    let (a, b): (Vec<&str>, Vec<&str>) = (SUITE_STYLE.lines().collect(), r.text.lines().collect());
    assert_eq!(a.len(), b.len());
    let changed: Vec<usize> = (0..a.len())
        .filter(|&i| a[i] != b[i])
        .map(|i| i + 1)
        .collect();
    assert_eq!(changed, vec![4, 8, 9, 10, 11, 13], "{}", r.text);
    assert_eq!(b[7], "", "a blanked check line is empty");
    assert!(b[3].ends_with(
        "-> (tensor<2xf32> {jax.result_info = \"\", mhlo.layout_mode = \"default\"}, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) {"
    ), "{}", b[3]);
    assert_eq!(
        b[12].trim(),
        "return %2, %2, %1, %2, %1, %2, %__hb_check_2, %2, %1 : tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>"
    );
    assert!(b[10].contains("%3 = \"stablehlo.constant\"() <{value = dense<true> : tensor<i1>}>"));
    assert_eq!(main_results(&r.text), 9);
}

#[test]
fn signature_and_return_forms() {
    let check = "    stablehlo.custom_call @check.expect_eq(%0, %0) {has_side_effect = true} : (tensor<i32>, tensor<i32>) -> ()\n";
    let c0 = "    %0 = stablehlo.constant dense<1> : tensor<i32>\n";
    // No results, bare return.
    let src = format!("func.func @main() {{\n{c0}{check}    return\n}}\n");
    let r = rewrite_checks_text(&src, 1).unwrap();
    assert_eq!((r.original_outputs, r.total_outputs), (0, 2));
    assert_eq!(r.entry_params, 0);
    assert!(
        r.text.contains("@main() -> (tensor<i32>, tensor<i32>) {"),
        "{}",
        r.text
    );
    assert!(
        r.text.contains("return %0, %0 : tensor<i32>, tensor<i32>"),
        "{}",
        r.text
    );
    assert_eq!(main_results(&r.text), 2);
    // One unparenthesized result, generic return, a function with another
    // name (the single public one) renamed to main, `attributes`.
    let src = format!(
        "module {{\n  func.func public @f() -> tensor<i32> attributes {{x = 1 : i32}} {{\n{c0}{check}    \"func.return\"(%0) : (tensor<i32>) -> ()\n  }}\n}}\n"
    );
    let r = rewrite_checks_text(&src, 1).unwrap();
    assert!(
        r.text.contains(
            "func.func public @main() -> (tensor<i32>, tensor<i32>, tensor<i32>) attributes"
        ),
        "{}",
        r.text
    );
    assert!(
        r.text.contains(
            "\"func.return\"(%0, %0, %0) : (tensor<i32>, tensor<i32>, tensor<i32>) -> ()"
        ),
        "{}",
        r.text
    );
    assert_eq!(main_results(&r.text), 3);
    // No checks: the text is unchanged.
    let src = format!("func.func @main() -> tensor<i32> {{\n{c0}    return %0 : tensor<i32>\n}}\n");
    let r = rewrite_checks_text(&src, 1).unwrap();
    assert_eq!(r.text, src);
    assert!(r.checks.is_empty());
}

#[test]
fn refuses_what_it_cannot_rewrite() {
    let check = "stablehlo.custom_call @check.expect_eq(%0, %0) {has_side_effect = true} : (tensor<i32>, tensor<i32>) -> ()";
    let in_callee = format!(
        "module {{\n  func.func @main() -> tensor<i32> {{\n    %0 = call @g() : () -> tensor<i32>\n    return %0 : tensor<i32>\n  }}\n  func.func private @g() -> tensor<i32> {{\n    %0 = stablehlo.constant dense<1> : tensor<i32>\n    {check}\n    return %0 : tensor<i32>\n  }}\n}}\n"
    );
    let e = rewrite_checks_text(&in_callee, 1).unwrap_err();
    assert!(
        matches!(&e, ConformError::Unsupported { reason, .. } if reason.contains("not in @main")),
        "{e}"
    );
    let nested = format!(
        "func.func @main() -> tensor<i32> {{\n  %0 = stablehlo.constant dense<1> : tensor<i32>\n  %1 = \"stablehlo.case\"(%0) ({{\n    {check}\n    stablehlo.return %0 : tensor<i32>\n  }}) : (tensor<i32>) -> tensor<i32>\n  return %1 : tensor<i32>\n}}\n"
    );
    let e = rewrite_checks_text(&nested, 1).unwrap_err();
    assert!(e.to_string().contains("nested region"), "{e}");
    let used = "func.func @main() -> tensor<i32> {\n  %0 = stablehlo.constant dense<1> : tensor<i32>\n  %1 = stablehlo.custom_call @check.expect_eq(%0, %0) : (tensor<i32>, tensor<i32>) -> tensor<i32>\n  return %1 : tensor<i32>\n}\n";
    let e = rewrite_checks_text(used, 1).unwrap_err();
    assert!(e.to_string().contains("is used"), "{e}");
    let with_args = "func.func @main(%a: tensor<2xf32>, %b: tensor<i32> {jax.arg_info = \"b\"}) -> tensor<2xf32> {\n  return %a : tensor<2xf32>\n}\n";
    assert_eq!(rewrite_checks_text(with_args, 1).unwrap().entry_params, 2);
    let two = "func.func @a() {\n  return\n}\nfunc.func @b() {\n  return\n}\n";
    assert!(matches!(
        rewrite_checks_text(two, 1),
        Err(ConformError::NoEntry(_))
    ));
}

#[test]
fn first_line_offsets_lines() {
    let r = rewrite_checks_text(SUITE_STYLE, 101).unwrap();
    assert_eq!(r.checks[0].line, Some(108));
}

/// Every 40th module of the StableHLO suite (when the shared corpus is
/// there): the raw rewrite finds the same checks as the parsed one, and its
/// text still parses with the expected number of results.
#[test]
fn agrees_with_the_parsed_rewrite_on_the_suite() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpus/stablehlo-testdata");
    let Ok(rd) = std::fs::read_dir(&dir) else {
        eprintln!("skipping: no corpus at {}", dir.display());
        return;
    };
    let mut files: Vec<_> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "mlir"))
        .collect();
    files.sort();
    let mut n = 0;
    for p in files.iter().step_by(40) {
        let src = std::fs::read_to_string(p).unwrap();
        let r = rewrite_checks_text(&src, 1).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(r.checks, parsed_checks(&src), "{}", p.display());
        assert!(!r.checks.is_empty(), "{}", p.display());
        assert_eq!(main_results(&r.text), r.total_outputs, "{}", p.display());
        n += 1;
    }
    assert!(n > 50, "{n}");
}
