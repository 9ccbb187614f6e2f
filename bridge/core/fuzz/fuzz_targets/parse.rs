//! Fuzz the parser: any input either fails with an error or parses; what
//! parses must print, and the printed text must parse back to a fixpoint.
//! Run with `cargo +nightly fuzz run parse` from `bridge/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(m) = hlobridge::parse_module(text) {
        for generic in [false, true] {
            let opts = hlobridge::PrintOptions {
                generic,
                debug_info: true,
            };
            let once = hlobridge::print_module(&m, &opts);
            let again = hlobridge::parse_module(&once).expect("printed output must parse");
            assert_eq!(once, hlobridge::print_module(&again, &opts));
        }
    }
});
