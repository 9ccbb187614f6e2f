//! Quick throughput check: `cargo run --release --example parse_speed -- FILE`.
use std::time::Instant;

/// The allocator our binaries ship (CLI, Python extension).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let path = std::env::args().nth(1).expect("usage: parse_speed FILE");
    let text = std::fs::read_to_string(&path).expect("read");
    let mut best_parse = f64::MAX;
    let mut best_print = f64::MAX;
    let mut m = hlobridge::parse_module(&text).expect("parse");
    let mut len = 0;
    for _ in 0..7 {
        let t = Instant::now();
        let fresh = hlobridge::parse_module(&text).expect("parse");
        best_parse = best_parse.min(t.elapsed().as_secs_f64());
        // Tear-down is not part of parsing.
        drop(std::mem::replace(&mut m, fresh));
        let t = Instant::now();
        len = hlobridge::print_module(&m, &Default::default()).len();
        best_print = best_print.min(t.elapsed().as_secs_f64());
    }
    println!(
        "{:.1} MB: parse {:.1} MB/s ({:.1} ms), print {:.1} MB/s ({:.1} ms), {} ops",
        text.len() as f64 / 1e6,
        text.len() as f64 / 1e6 / best_parse,
        best_parse * 1e3,
        len as f64 / 1e6 / best_print,
        best_print * 1e3,
        m.ops.len()
    );
}
