//! The table against the repository: `docs/configuration.md` is the table
//! rendered, every `HLOBRIDGE_*` name used anywhere in the source tree
//! (Rust, Python, shell, Makefile, TOML, docs) is in the table, and no
//! Rust code outside this crate (library, tests, benches) reads an
//! `HLOBRIDGE_*` variable directly.

use hlobridge_config::{render_markdown, Var, PREFIX};
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Files that spell unknown names on purpose (tests of the unknown-variable
/// warning), relative to the repository root; this crate is skipped whole.
const TYPO_TESTS: &[&str] = &[
    "tests/python/test_config_env.py",
    "bridge/cli/tests/config_env.rs",
];

/// Text files of the source tree: sources, scripts, build files and docs;
/// not hidden directories (`.git`, `.venv`, `.cache`), build outputs, or
/// this crate (whose tests spell unknown names on purpose).
fn source_files() -> Vec<PathBuf> {
    let root = repo_root();
    let skip_crate = root.join("proto/config");
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                if !name.starts_with('.')
                    && !matches!(name.as_str(), "target" | "node_modules" | "__pycache__")
                    && p != skip_crate
                {
                    stack.push(p);
                }
            } else if ft.is_file() && is_source(&name) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn is_source(name: &str) -> bool {
    let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    name == "Makefile"
        || matches!(
            ext,
            "rs" | "py"
                | "pyi"
                | "sh"
                | "toml"
                | "md"
                | "txt"
                | "yml"
                | "yaml"
                | "cfg"
                | "ini"
                | "proto"
                | "mk"
        )
}

/// Every `HLOBRIDGE_*` name in `text`, with the byte offset of its start.
/// A name ending in `_` (a family, as in `HLOBRIDGE_CUDA_*`) is not one.
fn names_in(text: &str) -> Vec<(usize, &str)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find(PREFIX).map(|i| i + from) {
        let word_start = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let mut end = i + PREFIX.len();
        while end < b.len()
            && (b[end].is_ascii_uppercase() || b[end].is_ascii_digit() || b[end] == b'_')
        {
            end += 1;
        }
        let name = &text[i..end];
        if word_start && end > i + PREFIX.len() && !name.ends_with('_') {
            out.push((i, name));
        }
        from = end.max(i + 1);
    }
    out
}

#[test]
fn docs_configuration_md_is_the_table() {
    let path = repo_root().join("docs/configuration.md");
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    let want = render_markdown();
    assert!(
        have == want,
        "docs/configuration.md differs from the table in proto/config/src/table.rs; regenerate it:\n\
         cargo run -q -p hlobridge-config --example config_doc > docs/configuration.md"
    );
}

#[test]
fn every_name_in_the_source_tree_is_in_the_table() {
    let files = source_files();
    assert!(
        files.len() > 100,
        "found only {} source files under {:?}",
        files.len(),
        repo_root()
    );
    let mut missing = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for f in &files {
        let rel = f.strip_prefix(repo_root()).unwrap_or(f);
        if TYPO_TESTS.iter().any(|t| rel == Path::new(t)) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for (_, name) in names_in(&text) {
            seen.insert(name.to_owned());
            if Var::from_name(name).is_none() {
                missing.push(format!("{name} ({})", rel.display()));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "HLOBRIDGE_* names used in the source tree but missing from proto/config/src/table.rs \
         (add them there, then regenerate docs/configuration.md):\n  {}",
        missing.join("\n  ")
    );
    // The table has no entry nothing uses.
    let unused: Vec<&str> = Var::ALL
        .iter()
        .map(|v| v.name())
        .filter(|n| !seen.contains(*n))
        .collect();
    assert!(
        unused.is_empty(),
        "in the table but used nowhere: {unused:?}"
    );
}

/// Library code (`src/`) neither reads nor sets an `HLOBRIDGE_*` variable
/// directly; tests and benches do not read one directly (they may set one
/// for the code under test).
#[test]
fn rust_code_reads_hlobridge_variables_through_this_crate() {
    let mut direct = Vec::new();
    for f in source_files() {
        if f.extension() != Some(std::ffi::OsStr::new("rs")) {
            continue;
        }
        let in_src = f.components().any(|c| c.as_os_str() == "src");
        let calls: &[&str] = if in_src {
            &[
                "env::var(",
                "env::var_os(",
                "env::set_var(",
                "env::remove_var(",
                "from_env(",
            ]
        } else {
            &["env::var(", "env::var_os(", "from_env("]
        };
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        for (i, name) in names_in(&text) {
            if i == 0 || text.as_bytes()[i - 1] != b'"' {
                continue;
            }
            let before = text[..i - 1].trim_end();
            if calls.iter().any(|call| before.ends_with(call)) {
                let line = text[..i].matches('\n').count() + 1;
                let rel = f
                    .strip_prefix(repo_root())
                    .unwrap_or(&f)
                    .display()
                    .to_string();
                direct.push(format!("{rel}:{line}: {name}"));
            }
        }
    }
    assert!(
        direct.is_empty(),
        "read these through hlobridge_config (get, path, is_off, level, flag, parse):\n  {}",
        direct.join("\n  ")
    );
}

#[test]
fn names_in_finds_whole_names() {
    let t = "HLOBRIDGE_A=1 $HLOBRIDGE_B_C `HLOBRIDGE_CUDA_*` XHLOBRIDGE_D HLOBRIDGE_ HLOBRIDGE-ONLY \"HLOBRIDGE_E\"";
    let got: Vec<&str> = names_in(t).into_iter().map(|(_, n)| n).collect();
    assert_eq!(got, ["HLOBRIDGE_A", "HLOBRIDGE_B_C", "HLOBRIDGE_E"]);
}
