//! insta snapshots of printed IR (pretty and generic) for small modules,
//! plus the round-trip properties on each.

mod common;

fn fixture(name: &str) -> String {
    common::fixture("seeds", name)
}

fn print(text: &str, generic: bool, debug_info: bool) -> String {
    let m = hlobridge::parse_module_named("snapshot.mlir", text).unwrap_or_else(|e| panic!("{e}"));
    hlobridge::print_module(
        &m,
        &hlobridge::PrintOptions {
            generic,
            debug_info,
        },
    )
}

fn check_round_trip(text: &str) {
    for generic in [false, true] {
        let once = print(text, generic, true);
        assert_eq!(
            once,
            print(&once, generic, true),
            "printer is not a fixpoint"
        );
    }
}

#[test]
fn small_module_pretty() {
    let text = fixture("small.mlir");
    check_round_trip(&text);
    insta::assert_snapshot!(print(&text, false, true));
}

#[test]
fn small_module_generic() {
    let text = fixture("small.mlir");
    insta::assert_snapshot!(print(&text, true, true));
}

#[test]
fn small_module_without_locations() {
    let text = fixture("small.mlir");
    insta::assert_snapshot!(print(&text, false, false));
}
