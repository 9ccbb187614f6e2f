//! Criterion benchmark: parse and print throughput (MB/s) of hlobridge on
//! the largest generated module (a 24-layer transformer train step lowered
//! from JAX, `.cache/big/transformer24_train.mlir`, made by
//! `tests/tools/gen_big_module.py`) and on a half-size module cut from it,
//! then MLIR's own C++ parser/printer from jaxlib on the same file in the
//! same run (`benches/mlir_anchor.py`) as the anchor.
//!
//! Results go to `bench-results/parse_print.json`.

use criterion::{black_box, Criterion, Throughput};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Measured with the allocator our binaries ship (CLI, Python extension).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn big_module() -> Option<(PathBuf, String)> {
    let path = hlobridge_config::path(hlobridge_config::Var::BigModule)
        .unwrap_or_else(|| root().join(".cache/big/transformer24_train.mlir"));
    let text = std::fs::read_to_string(&path).ok()?;
    Some((path, text))
}

/// Median throughput in MB/s of `f` over `text_len` bytes.
fn median_mb_s(text_len: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    let mut times: Vec<Duration> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    text_len as f64 / 1e6 / times[reps / 2].as_secs_f64()
}

fn main() {
    let Some((path, text)) = big_module() else {
        eprintln!(
            "parse_print: no big module; run `.venv/bin/python tests/tools/gen_big_module.py` first"
        );
        return;
    };
    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(20)
        .measurement_time(Duration::from_secs(8));
    let module = hlobridge::parse_module(&text).expect("big module parses");
    let pretty = hlobridge::PrintOptions::default();
    let printed_len = hlobridge::print_module(&module, &pretty).len();
    {
        let mut g = c.benchmark_group("parse");
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function("transformer24_train", |b| {
            b.iter_with_large_drop(|| hlobridge::parse_module(black_box(&text)).unwrap())
        });
        g.finish();
        let mut g = c.benchmark_group("print");
        g.throughput(Throughput::Bytes(printed_len as u64));
        g.bench_function("transformer24_train", |b| {
            b.iter_with_large_drop(|| hlobridge::print_module(black_box(&module), &pretty))
        });
        g.finish();
    }
    // Summary numbers for the README, plus the MLIR anchor in the same run.
    let parse = {
        // Tear-down is not part of parsing: drop each module after timing.
        let mut times: Vec<f64> = (0..15)
            .map(|_| {
                let t = Instant::now();
                let m = black_box(hlobridge::parse_module(&text).unwrap());
                let dt = t.elapsed().as_secs_f64();
                drop(m);
                dt
            })
            .collect();
        times.sort_by(f64::total_cmp);
        text.len() as f64 / 1e6 / times[7]
    };
    let print = median_mb_s(printed_len, 15, || {
        black_box(hlobridge::print_module(&module, &pretty));
    });
    println!(
        "hlobridge: parse {parse:.1} MB/s, print {print:.1} MB/s on {} ({:.1} MB)",
        path.display(),
        text.len() as f64 / 1e6
    );
    let python = root().join(".venv/bin/python");
    let anchor = std::process::Command::new(&python)
        .arg(root().join("benches/mlir_anchor.py"))
        .arg(&path)
        .output();
    let mut summary = serde_json::json!({
        "file": path.display().to_string(),
        "bytes": text.len(),
        "hlobridge_parse_mb_s": parse,
        "hlobridge_print_mb_s": print,
    });
    match anchor {
        Ok(out) if out.status.success() => {
            let v: serde_json::Value =
                serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
            let mp = v["mlir_parse_mb_s"].as_f64().unwrap_or(f64::NAN);
            let mq = v["mlir_print_mb_s"].as_f64().unwrap_or(f64::NAN);
            println!(
                "MLIR (jaxlib): parse {mp:.1} MB/s, print {mq:.1} MB/s -> hlobridge is {:.1}x (parse), {:.1}x (print)",
                parse / mp,
                print / mq
            );
            summary["mlir_parse_mb_s"] = mp.into();
            summary["mlir_print_mb_s"] = mq.into();
            summary["parse_ratio"] = (parse / mp).into();
            summary["print_ratio"] = (print / mq).into();
        }
        Ok(out) => eprintln!(
            "MLIR anchor failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => eprintln!("MLIR anchor not run ({}): {e}", python.display()),
    }
    let dir = root().join("bench-results");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(
        dir.join("parse_print.json"),
        serde_json::to_string_pretty(&summary).unwrap_or_default(),
    );
    c.final_summary();
}
