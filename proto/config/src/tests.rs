//! Unit tests of the table, the nearest-name suggestion and the value
//! parsing (no environment access; `tests/env.rs` covers the accessors).

use super::*;
use std::collections::HashSet;

#[test]
fn table_names_are_unique_prefixed_and_described() {
    let mut seen = HashSet::new();
    for &v in Var::ALL {
        let info = v.info();
        assert!(seen.insert(info.name), "{} listed twice", info.name);
        assert!(info.name.starts_with(PREFIX), "{}", info.name);
        let tail = &info.name[PREFIX.len()..];
        assert!(
            !tail.is_empty()
                && !tail.ends_with('_')
                && tail
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
            "{}: not an upper-case name",
            info.name
        );
        assert!(!info.default.trim().is_empty(), "{}: no default", info.name);
        assert!(
            info.meaning.ends_with('.'),
            "{}: meaning is not a sentence",
            info.name
        );
        assert!(!info.read_by.is_empty(), "{}: no reader", info.name);
        assert!(!info.section.is_empty());
        assert_eq!(Var::from_name(info.name), Some(v));
        assert_eq!(v.to_string(), info.name);
    }
    assert_eq!(Var::from_name("HLOBRIDGE_NOPE"), None);
    assert_eq!(Var::from_name("hlobridge_plugin"), None);
}

#[test]
fn sections_are_contiguous() {
    // The doc renders one table per section, in table order: a section
    // split in two would render twice.
    let mut done: Vec<&str> = Vec::new();
    for &v in Var::ALL {
        let s = v.info().section;
        if done.last() != Some(&s) {
            assert!(!done.contains(&s), "section {s:?} is split");
            done.push(s);
        }
    }
}

#[test]
fn levenshtein_counts_edits() {
    assert_eq!(levenshtein("", ""), 0);
    assert_eq!(levenshtein("abc", ""), 3);
    assert_eq!(levenshtein("", "abc"), 3);
    assert_eq!(levenshtein("kitten", "sitting"), 3);
    assert_eq!(levenshtein("flaw", "lawn"), 2);
    assert_eq!(levenshtein("HLOBRIDGE_CACHE_DIR", "HLOBRIDGE_CACHE_DIR"), 0);
    assert_eq!(
        levenshtein("HLOBRIDGE_CACHE_DIRR", "HLOBRIDGE_CACHE_DIR"),
        1
    );
}

#[test]
fn nearest_names_the_intended_variable() {
    for (typo, want) in [
        ("HLOBRIDGE_CACHE_DIRR", Var::CacheDir),
        ("HLOBRIDGE_CACHEDIR", Var::CacheDir),
        ("HLOBRIDGE_PLUGN", Var::Plugin),
        ("HLOBRIDGE_PLUGINS", Var::Plugin),
        ("HLOBRIDGE_HOST_GEM", Var::HostGemm),
        ("HLOBRIDGE_HOST_CONVS", Var::HostConv),
        ("HLOBRIDGE_SPIN_MS", Var::SpinUs),
        ("HLOBRIDGE_AFTERFORK", Var::AfterFork),
        ("HLOBRIDGE_TEST_SEEDS", Var::TestSeed),
        ("HLOBRIDGE_CACHE_MAXBYTES", Var::CacheMaxBytes),
    ] {
        assert_eq!(nearest(typo), Some(want), "{typo}");
    }
}

#[test]
fn nearest_suggests_nothing_far() {
    for name in [
        "HLOBRIDGE_FOO",
        "HLOBRIDGE_X",
        "HLOBRIDGE_SOMETHING_ELSE",
        "HLOBRIDGE_",
    ] {
        assert_eq!(nearest(name), None, "{name}");
    }
}

#[test]
fn check_names_warns_about_unknown_names_only() {
    let got = check_names([
        "PATH",
        "HLOBRIDGE_CACHE_DIR",
        "HLOBRIDGE_CACHE_DIRR",
        "HLOBRIDGE_FOO",
        "HLOBRIDGE_CACHE_DIRR",
        "hlobridge_cache_dirr",
    ]);
    assert_eq!(
        got,
        [
            "HLOBRIDGE_CACHE_DIRR is not a known variable; did you mean HLOBRIDGE_CACHE_DIR?",
            "HLOBRIDGE_FOO is not a known variable (docs/configuration.md lists every HLOBRIDGE_* variable)",
        ]
    );
    let all: Vec<&str> = Var::ALL.iter().map(|v| v.name()).collect();
    assert!(check_names(all).is_empty());
}

#[test]
fn switch_words() {
    for w in ["0", "false", "off", "no", " OFF ", "False"] {
        assert!(is_off_word(w), "{w:?}");
        assert!(!is_on_word(w), "{w:?}");
    }
    for w in ["1", "true", "on", "yes", " Yes"] {
        assert!(is_on_word(w), "{w:?}");
        assert!(!is_off_word(w), "{w:?}");
    }
    for w in ["", "2", "maybe", "all"] {
        assert!(!is_on_word(w) && !is_off_word(w), "{w:?}");
    }
}

#[test]
fn levels() {
    assert_eq!(level_of(None), Level::On);
    assert_eq!(level_of(Some("off")), Level::Off);
    assert_eq!(level_of(Some("0")), Level::Off);
    assert_eq!(level_of(Some("no")), Level::Off);
    assert_eq!(level_of(Some("all")), Level::All);
    assert_eq!(level_of(Some(" ALL ")), Level::All);
    assert_eq!(level_of(Some("on")), Level::On);
    assert_eq!(level_of(Some("whatever")), Level::On);
}

#[test]
fn bad_value_names_the_variable() {
    let e = BadValue {
        var: Var::SpinUs,
        value: "lots".into(),
    };
    let s = e.to_string();
    assert!(
        s.starts_with("HLOBRIDGE_SPIN_US=\"lots\" is not a valid value (default 250): "),
        "{s}"
    );
}

#[test]
fn markdown_lists_every_variable_once() {
    let md = render_markdown();
    for &v in Var::ALL {
        let row = format!("| `{}` |", v.name());
        assert_eq!(md.matches(&row).count(), 1, "{}", v.name());
    }
}
