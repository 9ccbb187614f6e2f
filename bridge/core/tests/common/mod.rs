//! Helpers shared by the integration tests: reading fixtures and
//! formatting module text.
#![allow(dead_code)]

use hlobridge::{parse_module, print_module, PrintOptions};
use std::path::PathBuf;

/// The text of `tests/fixtures/<dir>/<name>`.
pub fn fixture(dir: &str, name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(dir)
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Parse `src` and print it back (pretty, or generic).
pub fn fmt(src: &str, generic: bool) -> String {
    let m = parse_module(src).unwrap_or_else(|e| panic!("{e}"));
    let opts = PrintOptions {
        generic,
        ..PrintOptions::default()
    };
    print_module(&m, &opts)
}

/// Small deterministic PRNG (xorshift64*), for the mutation tests.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}
