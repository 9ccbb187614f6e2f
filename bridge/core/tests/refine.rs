//! Shape refinement (`hlobridge::refine`): snapshots of refined modules,
//! the named errors, and a bounded no-panic check on mutated corpus
//! modules and shape lists. The differential test against jaxlib's own
//! refinement is `tests/python/test_refine_jaxlib.py`.

use hlobridge::refine::refine_text;
use hlobridge::Error;
mod common;

use common::Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

fn refine(src: &str, shapes: &[&[i64]]) -> String {
    let shapes: Vec<Vec<i64>> = shapes.iter().map(|s| s.to_vec()).collect();
    refine_text(src, &shapes).unwrap_or_else(|e| panic!("{e}"))
}

fn refine_err(src: &str, shapes: &[&[i64]]) -> Error {
    let shapes: Vec<Vec<i64>> = shapes.iter().map(|s| s.to_vec()).collect();
    match refine_text(src, &shapes) {
        Ok(t) => panic!("refined unexpectedly:\n{t}"),
        Err(e) => e,
    }
}

/// jax.export's form: dims read with get_dimension_size, shape arithmetic,
/// dynamic ops, an inner function called with the dimension as a constant.
const EXPORT_STYLE: &str = r#"
module @jit_f {
  func.func public @main(%arg0: tensor<?x4xf32>, %arg1: tensor<2x?x4xf32>) -> tensor<2x?x4xf32> {
    %0 = stablehlo.get_dimension_size %arg0, dim = 0 : (tensor<?x4xf32>) -> tensor<i32>
    %1 = stablehlo.convert %0 : (tensor<i32>) -> tensor<i64>
    %2 = call @_wrapped(%1, %arg0, %arg1) : (tensor<i64>, tensor<?x4xf32>, tensor<2x?x4xf32>) -> tensor<2x?x4xf32>
    return %2 : tensor<2x?x4xf32>
  }
  func.func private @_wrapped(%b: tensor<i64> {jax.global_constant = "b"}, %x: tensor<?x4xf32>, %y: tensor<2x?x4xf32>) -> tensor<2x?x4xf32> {
    %c2 = stablehlo.constant dense<2> : tensor<1xi32>
    %c4 = stablehlo.constant dense<4> : tensor<1xi32>
    %0 = stablehlo.convert %b : (tensor<i64>) -> tensor<i32>
    %1 = stablehlo.reshape %0 : (tensor<i32>) -> tensor<1xi32>
    %2 = stablehlo.concatenate %c2, %1, %c4, dim = 0 : (tensor<1xi32>, tensor<1xi32>, tensor<1xi32>) -> tensor<3xi32>
    %3 = stablehlo.dynamic_broadcast_in_dim %x, %2, dims = [1, 2] : (tensor<?x4xf32>, tensor<3xi32>) -> tensor<2x?x4xf32>
    %4 = stablehlo.add %3, %y : tensor<2x?x4xf32>
    %5 = stablehlo.dynamic_iota %2, dim = 1 : (tensor<3xi32>) -> tensor<2x?x4xf32>
    %6 = stablehlo.multiply %4, %5 : tensor<2x?x4xf32>
    return %6 : tensor<2x?x4xf32>
  }
}
"#;

#[test]
fn export_style_module_becomes_static() {
    insta::assert_snapshot!(refine(EXPORT_STYLE, &[&[5, 4], &[2, 5, 4]]));
}

/// One function called with two different shapes is copied per signature.
const TWO_CALLS: &str = r#"
module {
  func.func public @main(%a: tensor<?xf32>, %b: tensor<?xf32>) -> (tensor<?xf32>, tensor<?xf32>) {
    %0 = call @neg(%a) : (tensor<?xf32>) -> tensor<?xf32>
    %1 = call @neg(%b) : (tensor<?xf32>) -> tensor<?xf32>
    return %0, %1 : tensor<?xf32>, tensor<?xf32>
  }
  func.func private @neg(%x: tensor<?xf32>) -> tensor<?xf32> {
    %0 = stablehlo.negate %x : tensor<?xf32>
    return %0 : tensor<?xf32>
  }
}
"#;

#[test]
fn callee_is_copied_per_signature() {
    insta::assert_snapshot!(refine(TWO_CALLS, &[&[3], &[7]]));
}

#[test]
fn identical_calls_share_one_specialisation() {
    let out = refine(TWO_CALLS, &[&[3], &[3]]);
    assert_eq!(out.matches("func.func").count(), 2, "{out}");
}

/// torchax's form of GELU: a `stablehlo.composite` whose decomposition is
/// a private function; two composites of different shapes share it.
const COMPOSITE: &str = r#"
module {
  func.func public @main(%x: tensor<?x4xf32>, %y: tensor<?xf32>) -> (tensor<?x4xf32>, tensor<?xf32>) {
    %0 = stablehlo.composite "aten.gelu.default" %x {composite_attributes = {approximate = "tanh"}, decomposition = @gelu_impl} : (tensor<?x4xf32>) -> tensor<?x4xf32>
    %1 = stablehlo.add %0, %x : tensor<?x4xf32>
    %2 = stablehlo.composite "aten.gelu.default" %y {decomposition = @gelu_impl_1d} : (tensor<?xf32>) -> tensor<?xf32>
    %3 = stablehlo.composite "aten.gelu.default" %2 {decomposition = @gelu_impl_1d} : (tensor<?xf32>) -> tensor<?xf32>
    return %1, %3 : tensor<?x4xf32>, tensor<?xf32>
  }
  func.func private @gelu_impl(%a: tensor<?x4xf32>) -> tensor<?x4xf32> {
    %h = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %n = stablehlo.get_dimension_size %a, dim = 0 : (tensor<?x4xf32>) -> tensor<i32>
    %n1 = stablehlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
    %c4 = stablehlo.constant dense<4> : tensor<1xi32>
    %s = stablehlo.concatenate %n1, %c4, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %hb = stablehlo.dynamic_broadcast_in_dim %h, %s, dims = [] : (tensor<f32>, tensor<2xi32>) -> tensor<?x4xf32>
    %t = stablehlo.tanh %a : tensor<?x4xf32>
    %m = stablehlo.multiply %t, %hb : tensor<?x4xf32>
    return %m : tensor<?x4xf32>
  }
  func.func private @gelu_impl_1d(%a: tensor<?xf32>) -> tensor<?xf32> {
    %t = stablehlo.tanh %a : tensor<?xf32>
    return %t : tensor<?xf32>
  }
}
"#;

#[test]
fn composite_decomposition_is_refined_like_a_call() {
    let out = refine(COMPOSITE, &[&[3, 4], &[5]]);
    assert!(!out.contains('?'), "{out}");
    assert_eq!(out.matches("stablehlo.composite").count(), 3, "{out}");
    // The printed module parses back to itself, and is valid refinement
    // input again.
    let m = hlobridge::parse_module(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_eq!(
        hlobridge::print_module(&m, &hlobridge::PrintOptions::default()),
        out
    );
    assert!(!refine(&out, &[&[3, 4], &[5]]).contains('?'));
    insta::assert_snapshot!(out);
}

#[test]
fn composite_decomposition_is_copied_per_signature() {
    const TWO: &str = r#"
module {
  func.func public @main(%a: tensor<?xf32>, %b: tensor<?xf32>) -> (tensor<?xf32>, tensor<?xf32>) {
    %0 = stablehlo.composite "my.neg" %a {decomposition = @neg} : (tensor<?xf32>) -> tensor<?xf32>
    %1 = call @neg(%b) : (tensor<?xf32>) -> tensor<?xf32>
    return %0, %1 : tensor<?xf32>, tensor<?xf32>
  }
  func.func private @neg(%x: tensor<?xf32>) -> tensor<?xf32> {
    %0 = stablehlo.negate %x : tensor<?xf32>
    return %0 : tensor<?xf32>
  }
}
"#;
    let out = refine(TWO, &[&[3], &[7]]);
    assert!(
        out.contains("decomposition = @neg_refined_0") || out.contains("@neg_refined_0("),
        "{out}"
    );
    assert!(
        out.contains("tensor<3xf32>") && out.contains("tensor<7xf32>"),
        "{out}"
    );
    assert!(!out.contains('?'), "{out}");
    let same = refine(TWO, &[&[3], &[3]]);
    assert_eq!(same.matches("func.func").count(), 2, "{same}");
}

#[test]
fn composite_without_decomposition_function_is_a_named_error() {
    const BAD: &str = r#"
module {
  func.func public @main(%a: tensor<?xf32>) -> tensor<?xf32> {
    %0 = stablehlo.composite "my.neg" %a {decomposition = @missing} : (tensor<?xf32>) -> tensor<?xf32>
    return %0 : tensor<?xf32>
  }
}
"#;
    match refine_err(BAD, &[&[3]]) {
        Error::ShapeRefinement { .. } => {}
        e => panic!("wrong error: {e}"),
    }
}

/// Shape ops: real_dynamic_slice, dynamic_pad, dynamic_reshape, reduce,
/// dot_general, concatenate.
const SHAPE_OPS: &str = r#"
module {
  func.func public @main(%x: tensor<?x6xf32>, %w: tensor<6x?xf32>) -> tensor<?xf32> {
    %n = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?x6xf32>) -> tensor<i32>
    %n1 = stablehlo.reshape %n : (tensor<i32>) -> tensor<1xi32>
    %z = stablehlo.constant dense<0> : tensor<1xi32>
    %one = stablehlo.constant dense<1> : tensor<2xi32>
    %c2 = stablehlo.constant dense<2> : tensor<1xi32>
    %lim = stablehlo.concatenate %n1, %c2, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %st = stablehlo.concatenate %z, %z, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
    %s = stablehlo.real_dynamic_slice %x, %st, %lim, %one : (tensor<?x6xf32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<?x?xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %lo = stablehlo.constant dense<[0, 1]> : tensor<2xi32>
    %p = stablehlo.dynamic_pad %s, %zero, %lo, %lo, %st : (tensor<?x?xf32>, tensor<f32>, tensor<2xi32>, tensor<2xi32>, tensor<2xi32>) -> tensor<?x?xf32>
    %d = "stablehlo.dot_general"(%x, %w) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<?x6xf32>, tensor<6x?xf32>) -> tensor<?x?xf32>
    %c = stablehlo.concatenate %p, %d, dim = 1 : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>
    %r = stablehlo.reduce(%c init: %zero) applies stablehlo.add across dimensions = [1] : (tensor<?x?xf32>, tensor<f32>) -> tensor<?xf32>
    %m = stablehlo.multiply %n, %n : tensor<i32>
    %m1 = stablehlo.reshape %m : (tensor<i32>) -> tensor<1xi32>
    %q = stablehlo.dynamic_reshape %r, %n1 : (tensor<?xf32>, tensor<1xi32>) -> tensor<?xf32>
    return %q : tensor<?xf32>
  }
}
"#;

#[test]
fn shape_ops_fold() {
    insta::assert_snapshot!(refine(SHAPE_OPS, &[&[3, 6], &[6, 5]]));
}

/// A jax.export shape assertion: the dimension must be at least 2.
const ASSERTING: &str = r#"
module {
  func.func public @main(%x: tensor<?xf32>) -> tensor<?xf32> {
    %n = stablehlo.get_dimension_size %x, dim = 0 : (tensor<?xf32>) -> tensor<i32>
    %two = stablehlo.constant dense<2> : tensor<i32>
    %ok = stablehlo.compare GE, %n, %two, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.custom_call @shape_assertion(%ok, %n) {api_version = 2 : i32, error_message = "Input shapes do not match the polymorphic shapes specification. Expected value >= 2 for dimension variable 'b'. Using the following polymorphic shapes specifications: args[0].shape = (b,). Obtained dimension variables: 'b' = {0} from specification 'b' for dimension args[0].shape[0] (= {0}), .", has_side_effect = true} : (tensor<i1>, tensor<i32>) -> ()
    %y = stablehlo.sine %x : tensor<?xf32>
    return %y : tensor<?xf32>
  }
}
"#;

#[test]
fn satisfied_assertion_is_removed() {
    let out = refine(ASSERTING, &[&[4]]);
    assert!(!out.contains("shape_assertion"), "{out}");
    assert!(out.contains("tensor<4xf32>"), "{out}");
}

#[test]
fn violated_assertion_names_dimension_and_constraint() {
    match refine_err(ASSERTING, &[&[1]]) {
        Error::ShapeAssertion {
            dimension,
            constraint,
            message,
            ..
        } => {
            assert_eq!(dimension, "b");
            assert_eq!(constraint, "Expected value >= 2 for dimension variable 'b'");
            assert!(message.contains("'b' = 1"), "{message}");
        }
        e => panic!("wrong error: {e}"),
    }
}

#[test]
fn named_errors() {
    let errs: Vec<String> = [
        refine_err(SHAPE_OPS, &[&[3, 6]]),
        refine_err(SHAPE_OPS, &[&[3, 7], &[6, 5]]),
        refine_err(SHAPE_OPS, &[&[3], &[6, 5]]),
        refine_err(SHAPE_OPS, &[&[-3, 6], &[6, 5]]),
        refine_err("module {", &[]),
        refine_err("module {}", &[]),
    ]
    .iter()
    .map(|e| {
        assert!(
            matches!(e, Error::ShapeRefinement { .. } | Error::Parse(_)),
            "{e}"
        );
        e.to_string()
    })
    .collect();
    insta::assert_snapshot!(errs.join("\n---\n"));
}

#[test]
fn error_points_at_file_line_col() {
    let src = r#"
module {
  func.func public @main(%x: tensor<?xf32>, %s: tensor<1xi32>) -> tensor<?xf32> {
    %y = stablehlo.dynamic_reshape %x, %s : (tensor<?xf32>, tensor<1xi32>) -> tensor<?xf32> loc("model.py":12:7)
    return %y : tensor<?xf32>
  }
}
"#;
    let e = refine_err(src, &[&[3], &[1]]).to_string();
    assert!(
        e.starts_with("model.py:12:7: stablehlo.dynamic_reshape in @main"),
        "{e}"
    );
    assert!(e.contains("does not fold to a constant"), "{e}");
}

/// Corpus modules truncated and mutated, with odd shape lists: every run
/// ends in `Ok` or a named error, never a panic.
#[test]
fn mutated_inputs_never_panic() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/corpus/stablehlo-testdata/dynamic");
    let mut seeds: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                .collect()
        })
        .unwrap_or_default();
    seeds.sort();
    seeds.truncate(40);
    seeds.push(EXPORT_STYLE.to_string());
    seeds.push(SHAPE_OPS.to_string());
    seeds.push(ASSERTING.to_string());
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let edits = [
        "?",
        "0",
        "-1",
        "x",
        "dense<-7>",
        "dim = 9",
        "]",
        "tensor<i64>",
        "2147483647",
    ];
    for seed in &seeds {
        for _ in 0..12 {
            let mut text = seed.clone();
            match rng.below(3) {
                0 => {
                    let mut cut = rng.below(text.len());
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    text.truncate(cut);
                }
                _ => {
                    for _ in 0..1 + rng.below(3) {
                        let mut at = rng.below(text.len());
                        while !text.is_char_boundary(at) {
                            at -= 1;
                        }
                        let mut end = (at + rng.below(4)).min(text.len());
                        while !text.is_char_boundary(end) {
                            end -= 1;
                        }
                        text.replace_range(at..end, edits[rng.below(edits.len())]);
                    }
                }
            }
            let nargs = rng.below(5);
            let shapes: Vec<Vec<i64>> = (0..nargs)
                .map(|_| {
                    (0..rng.below(4))
                        .map(|_| [0, 1, 3, 4, -2, 1 << 40][rng.below(6)])
                        .collect()
                })
                .collect();
            let r = catch_unwind(AssertUnwindSafe(|| refine_text(&text, &shapes)));
            assert!(r.is_ok(), "panicked on shapes {shapes:?} for:\n{text}");
        }
    }
}
