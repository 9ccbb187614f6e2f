//! Input-output aliasing requested of the stitcher (`Program::alias`,
//! `[[alias]]` in a plan): the `tf.aliasing_output` it writes on `@main`'s
//! arguments (insta snapshot of the signature; the printed module parses
//! back) and every pair it refuses (`Error::Alias`, snapshots too).

use hlobridge::stitch::{stitch, InputAlias, Plan, Program, Segment};

/// `(cache, x) -> (cache + x, x as f16, x reshaped to 2x2)`.
const UPDATE: &str = r#"module @jit_update {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf16>, tensor<2x2xf32>) {
    %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>
    %1 = stablehlo.convert %arg1 : (tensor<4xf32>) -> tensor<4xf16>
    %2 = stablehlo.reshape %arg1 : (tensor<4xf32>) -> tensor<2x2xf32>
    return %0, %1, %2 : tensor<4xf32>, tensor<4xf16>, tensor<2x2xf32>
  }
}
"#;

/// The same update, whose module already aliases its first argument to
/// its first result.
const UPDATE_DONATING: &str = r#"module @jit_update_donating {
  func.func public @main(%arg0: tensor<4xf32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %arg0, %arg1 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"#;

fn update() -> Program {
    let seg = Segment::from_text("update", "update.mlir", UPDATE)
        .unwrap()
        .inputs(&["cache", "x"])
        .outputs(&["new_cache", "half", "square"]);
    Program::new()
        .input("cache", "tensor<4xf32>")
        .input("x", "tensor<4xf32>")
        .segment(seg)
        .output("half")
        .output("new_cache")
        .output("square")
}

fn print(m: &hlobridge::Module) -> String {
    hlobridge::print_module(m, &hlobridge::PrintOptions::default())
}

fn main_signature(text: &str) -> &str {
    text.lines()
        .find(|l| l.contains("func.func public @main"))
        .expect("@main")
        .trim()
}

fn err_of(p: &Program) -> String {
    match stitch(p) {
        Ok(out) => panic!("expected an error, got\n{}", print(&out.module)),
        Err(e @ hlobridge::Error::Alias(_)) => e.to_string(),
        Err(e) => panic!("expected an alias error, got {e}"),
    }
}

#[test]
fn aliased_input_is_marked_on_main() {
    let out = stitch(&update().alias(0, 1)).unwrap();
    let text = print(&out.module);
    // The printed module parses back and is a fixpoint.
    let again = hlobridge::parse_module(&text).unwrap();
    assert_eq!(print(&again), text);
    let sig = main_signature(&text);
    assert_eq!(sig.matches("tf.aliasing_output").count(), 1, "{sig}");
    insta::assert_snapshot!("main_signature", sig);
}

#[test]
fn no_alias_no_attribute() {
    let text = print(&stitch(&update()).unwrap().module);
    assert!(!text.contains("tf.aliasing_output"), "{text}");
}

#[test]
fn aliasing_survives_a_called_segment() {
    let out = stitch(&update().alias(0, 1).inline(false)).unwrap();
    let text = print(&out.module);
    hlobridge::parse_module(&text).unwrap();
    let sig = main_signature(&text);
    assert!(sig.contains("tf.aliasing_output = 1 : i32"), "{sig}");
}

#[test]
fn plan_files_carry_aliases() {
    let toml = r#"
[[input]]
name = "cache"
type = "tensor<4xf32>"
[[output]]
handle = "cache"
[[alias]]
input = 0
output = 0
"#;
    let plan = Plan::from_str_as(toml, false).unwrap();
    assert_eq!(
        plan.aliases,
        vec![InputAlias {
            input: 0,
            output: 0
        }]
    );
    let again = Plan::from_str_as(&plan.to_toml().unwrap(), false).unwrap();
    assert_eq!(again, plan);
    // A plan without aliases prints none.
    let none = Plan::from_str_as("[[output]]\nhandle = \"x\"\n", false).unwrap();
    assert!(!none.to_toml().unwrap().contains("alias"));
}

#[test]
fn bad_pairs_are_named_errors() {
    let donating = Segment::from_text("update", "donating.mlir", UPDATE_DONATING)
        .unwrap()
        .inputs(&["cache", "x"])
        .outputs(&["new_cache"]);
    let donor_taken = Program::new()
        .donated_input("cache", "tensor<4xf32>")
        .input("x", "tensor<4xf32>")
        .segment(donating)
        .output("new_cache")
        .alias(1, 0);
    let cases = [
        ("input out of range", update().alias(2, 1)),
        ("output out of range", update().alias(0, 3)),
        ("dtype mismatch", update().alias(1, 0)),
        ("shape mismatch", update().alias(1, 2)),
        ("output aliased twice", update().alias(0, 1).alias(1, 1)),
        ("input aliased twice", update().alias(0, 1).alias(0, 2)),
        ("donated input", {
            let mut p = update().alias(0, 1);
            p.inputs[0].donate = true;
            p
        }),
        ("output of a donated input", donor_taken),
    ];
    let report: Vec<String> = cases
        .iter()
        .map(|(what, p)| format!("{what}: {}", err_of(p)))
        .collect();
    insta::assert_snapshot!("errors", report.join("\n"));
}
