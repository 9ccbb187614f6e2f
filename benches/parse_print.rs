//! Criterion benchmark: parse and print throughput (placeholder until the
//! large generated module is wired in).
fn main() {}
