//! The memory cache is bounded by what is in use (its own binary: it counts
//! the process's memory mappings, which other tests' compiles would move).
//!
//! Each loaded program holds memory mappings of its generated code, and
//! Linux caps a process's mappings (`vm.max_map_count`); an unbounded cache
//! made a long-running process fail to compile after some ten thousand
//! programs. Here: programs in use are shared, programs nobody holds are
//! freed beyond the retained few, and compiling many distinct programs
//! leaves the mapping count flat.

use hlobridge_compile::{
    compile, memory_cache_sizes, retained_capacity, CompilePolicy, DiskCacheMode,
};
use pjrt_client::{Client, ClientOptions, CompileOptions, Plugin};

/// A distinct program per `i` (the constant is part of the text).
fn program(i: usize) -> String {
    format!(
        "func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {{
  %c = stablehlo.constant dense<{i}.0> : tensor<3xf32>
  %0 = stablehlo.multiply %a, %c : tensor<3xf32>
  %1 = stablehlo.sine %0 : tensor<3xf32>
  return %1 : tensor<3xf32>
}}
"
    )
}

fn mappings() -> Option<usize> {
    let m = std::fs::read("/proc/self/maps").ok()?;
    Some(m.iter().filter(|&&b| b == b'\n').count())
}

#[test]
fn memory_cache_keeps_programs_in_use_and_a_bounded_few_more() {
    let plugin = Plugin::discover().expect("the CPU plugin (make setup installs it)");
    let client = Client::new(&plugin, &ClientOptions::new()).unwrap();
    let policy = CompilePolicy {
        disk_cache: DiskCacheMode::Off,
        ..CompilePolicy::in_process()
    };
    let cap = retained_capacity();
    let get = |i: usize| compile(&client, &program(i), CompileOptions::default(), &policy).unwrap();

    // A program someone holds is shared, however many come after it.
    let held = get(0);
    let first_dropped = get(1);
    drop(first_dropped);
    let n = 4 * cap + 40;
    let warm = cap + 20;
    let mut base = None;
    for i in 2..n {
        drop(get(i));
        if i == warm {
            base = mappings();
        }
    }
    let again = get(0);
    assert!(again.from_memory, "a program in use is shared");
    assert!(std::sync::Arc::ptr_eq(&held.compiled, &again.compiled));
    // Nobody held program 1 and more than `cap` came after it: freed, so
    // asking again compiles again.
    assert!(
        !get(1).from_memory,
        "a dropped program beyond the retained {cap} is freed"
    );
    // The most recent one is retained.
    assert!(
        get(n - 1).from_memory,
        "the most recent program is retained"
    );
    let (live, retained) = memory_cache_sizes();
    assert!(retained <= cap, "{retained} retained > {cap}");
    assert!(
        live <= cap + 2,
        "{live} programs alive, want at most {} (retained + held)",
        cap + 2
    );

    // Steady state: compiling and dropping many more programs does not grow
    // the mappings (an unbounded cache adds several per program).
    if let (Some(before), Some(after)) = (base, mappings()) {
        let grown = after.saturating_sub(before);
        let compiled = n - warm;
        assert!(
            grown < compiled,
            "{grown} mappings added over {compiled} compiled-and-dropped programs"
        );
    }
}
