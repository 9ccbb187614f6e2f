//! Criterion benchmark: stitch the largest generated module (the 24-layer
//! transformer train step, >= 5 MB) between two small segments and print
//! the result, end to end from text; and the same on a module of half the
//! size, to show the cost grows linearly with module size.
//!
//! The big module comes from `tests/tools/gen_big_module.py`
//! (`.cache/big/transformer24_train.mlir`).

use criterion::{black_box, Criterion};
use hlobridge::stitch::{stitch, Program, Segment};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Measured with the allocator our binaries ship (CLI, Python extension).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PRE: &str = "module @IrToHlo.1 {\n  func.func @main(%arg0: TY) -> TY {\n    %0 = stablehlo.sine %arg0 : TY\n    return %0 : TY\n  }\n}\n";
const POST: &str = "module @IrToHlo.2 {\n  func.func @main(%arg0: TY) -> TY {\n    %0 = stablehlo.exponential %arg0 : TY\n    return %0 : TY\n  }\n}\n";

/// Build a program: pre → big (first param; other params are program
/// inputs) → post (first result; other results are program outputs).
fn program(big_text: &str) -> Program {
    let big = Segment::from_text("big", "big.mlir", big_text).expect("big module parses");
    let main = big
        .module
        .top_ops()
        .find_map(|top| {
            let mut found = None;
            big.module.walk(top, &mut |op| {
                if big.module.op_name(op) == "func.func" && found.is_none() {
                    if let Some(a) = big.module.op_attr(op, "sym_name") {
                        if let hlobridge::ir::Attribute::String { escaped, .. } = big.module.attr(a)
                        {
                            if &**escaped == "main" {
                                found = Some(op);
                            }
                        }
                    }
                }
            });
            found
        })
        .expect("@main");
    let fty = big
        .module
        .op_attr(main, "function_type")
        .expect("function_type");
    let hlobridge::ir::Attribute::Type(fty) = big.module.attr(fty) else {
        panic!()
    };
    let hlobridge::ir::Type::Function { inputs, results } = big.module.ty(*fty).clone() else {
        panic!()
    };
    let ty = |t| hlobridge::print::type_to_string(&big.module, t);
    let t_in = ty(inputs[0]);
    let t_out = ty(results[0]);
    let mut p = Program::new().input("x", &t_in);
    let mut big_inputs = vec!["h".to_string()];
    for (i, &t) in inputs.iter().enumerate().skip(1) {
        let name = format!("p{i}");
        p = p.input(&name, &ty(t));
        big_inputs.push(name);
    }
    let big_outputs: Vec<String> = (0..results.len())
        .map(|k| {
            if k == 0 {
                "b".to_string()
            } else {
                format!("r{k}")
            }
        })
        .collect();
    p = p
        .segment(
            Segment::from_text("pre", "pre.mlir", &PRE.replace("TY", &t_in))
                .unwrap()
                .inputs(&["x"])
                .outputs(&["h"]),
        )
        .segment(big.inputs(&big_inputs).outputs(&big_outputs))
        .segment(
            Segment::from_text("post", "post.mlir", &POST.replace("TY", &t_out))
                .unwrap()
                .inputs(&["b"])
                .outputs(&["y"]),
        )
        .output("y");
    for k in 1..results.len() {
        p = p.output(&format!("r{k}"));
    }
    p
}

/// Stitch the (already parsed) segments and print the fused module.
fn stitch_and_print(p: &Program) -> usize {
    let out = stitch(p).expect("stitch");
    hlobridge::print_module(&out.module, &hlobridge::PrintOptions::default()).len()
}

/// The half-size module: the same train step with 12 layers
/// (`gen_big_module.py --layers 12 --out .cache/big/transformer12_train.mlir`).
fn half_module(root: &Path) -> Option<String> {
    std::fs::read_to_string(root.join(".cache/big/transformer12_train.mlir")).ok()
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Ok(big) = std::fs::read_to_string(root.join(".cache/big/transformer24_train.mlir")) else {
        eprintln!("stitch bench: run tests/tools/gen_big_module.py first");
        return;
    };
    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    let mut sizes = vec![("transformer24", big)];
    if let Some(half) = half_module(&root) {
        sizes.push(("transformer12", half));
    }
    for (name, text) in &sizes {
        // Parsing is measured by the parse_print bench; here the segments
        // are parsed once and the stitch + print is timed.
        let p = program(text);
        c.bench_function(&format!("stitch_and_print/{name}"), |b| {
            b.iter(|| stitch_and_print(black_box(&p)))
        });
        let median = |f: &mut dyn FnMut()| {
            let mut times: Vec<f64> = (0..9)
                .map(|_| {
                    let t = Instant::now();
                    f();
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            times.sort_by(f64::total_cmp);
            times[4]
        };
        let both = median(&mut || {
            black_box(stitch_and_print(&p));
        });
        let only_stitch = median(&mut || {
            black_box(stitch(&p).expect("stitch"));
        });
        let mb = text.len() as f64 / 1e6;
        println!(
            "{name}: {mb:.1} MB: stitch {only_stitch:.1} ms + print = {both:.1} ms median ({:.2} ms/MB)",
            both / mb
        );
    }
    c.final_summary();
}
