//! Bounded mutation testing of the parser (runs in CI; `cargo fuzz` in
//! `bridge/core/fuzz` is the unbounded version). Seeds are real modules;
//! each mutant must either fail with an error or parse, print, and parse
//! back to a fixpoint — without panicking, hanging or overflowing the
//! stack.

mod common;

use common::Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const TOKENS: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    "<",
    ">",
    "[",
    "]",
    "%",
    "%0",
    "#",
    "^bb0:",
    "@",
    "\"",
    ":",
    ",",
    "=",
    "->",
    "x",
    "?",
    "tensor<",
    "dense<",
    "loc(",
    "#loc",
    "!",
    "0x",
    "-",
    "\\",
    "//",
    "{-#",
    "stablehlo.add",
    "\"stablehlo.add\"",
    "%arg0",
    "i1",
    "f32",
    "1.5e",
    "9999999999999999999999",
];

fn seeds() -> Vec<String> {
    let mut out = vec![include_str!("../../../tests/fixtures/seeds/small.mlir").to_string()];
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/jax");
    if let Ok(rd) = std::fs::read_dir(&corpus) {
        let mut files: Vec<_> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files {
            if f.extension().is_some_and(|e| e == "mlir") {
                if let Ok(t) = std::fs::read_to_string(&f) {
                    if t.len() < 20_000 {
                        out.push(t);
                    }
                }
            }
        }
    }
    out
}

fn mutate(rng: &mut Rng, src: &str) -> String {
    let mut b = src.as_bytes().to_vec();
    for _ in 0..1 + rng.below(4) {
        if b.is_empty() {
            break;
        }
        let at = rng.below(b.len());
        match rng.below(6) {
            0 => {
                b.remove(at);
            }
            1 => {
                let end = (at + 1 + rng.below(40)).min(b.len());
                b.drain(at..end);
            }
            2 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                b.splice(at..at, t.bytes());
            }
            3 => b[at] = b" \n{}()<>[]%#:,=\"x0"[rng.below(18)],
            4 => {
                let end = (at + 1 + rng.below(80)).min(b.len());
                let chunk = b[at..end].to_vec();
                b.splice(at..at, chunk);
            }
            _ => b.truncate(at),
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn check(text: &str) -> Result<(), String> {
    let Ok(m) = hlobridge::parse_module(text) else {
        return Ok(());
    };
    for generic in [false, true] {
        let opts = hlobridge::PrintOptions {
            generic,
            debug_info: true,
        };
        let once = hlobridge::print_module(&m, &opts);
        let again = hlobridge::parse_module(&once).map_err(|e| {
            format!("printed output does not parse back:\n{e}\n--- printed:\n{once}")
        })?;
        let twice = hlobridge::print_module(&again, &opts);
        if once != twice {
            return Err(format!(
                "not a fixpoint (generic={generic}):\n{once}\n---\n{twice}"
            ));
        }
    }
    Ok(())
}

/// Mutants checked at least, whatever the time budget.
const MIN_MUTANTS: u64 = 200;

#[test]
fn mutants_never_panic_or_hang() {
    let seeds = seeds();
    let budget = Duration::from_secs(
        hlobridge_config::parse(hlobridge_config::Var::MutationSecs)
            .ok()
            .flatten()
            .unwrap_or(20),
    );
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let start = Instant::now();
    let mut n = 0u64;
    // The budget bounds the time; at least MIN_MUTANTS run however slow the
    // machine (a loaded one-core run included), so the check never depends
    // on the CPU's speed.
    while start.elapsed() < budget || n < MIN_MUTANTS {
        let seed = &seeds[rng.below(seeds.len())];
        let text = mutate(&mut rng, seed);
        let t0 = Instant::now();
        let res = catch_unwind(AssertUnwindSafe(|| check(&text)));
        let took = t0.elapsed();
        match res {
            Ok(Ok(())) => {}
            Ok(Err(msg)) => panic!("mutant #{n} violates round trip: {msg}\n--- input:\n{text}"),
            Err(_) => panic!("mutant #{n} panicked\n--- input:\n{text}"),
        }
        // Generous: a mutant parses and prints in milliseconds; this only
        // flags pathological (super-linear) behaviour, never a slow CPU.
        assert!(
            took < Duration::from_secs(30),
            "mutant #{n} took {took:?} (hang?)\n--- input:\n{text}"
        );
        n += 1;
    }
    eprintln!("{n} mutants checked in {:?}", start.elapsed());
}
