//! `docs/configuration.md`, rendered from the table.

use crate::table::Var;
use std::fmt::Write as _;

/// The text of `docs/configuration.md`: every variable with its default,
/// meaning and readers, by section in table order.
pub fn render_markdown() -> String {
    let mut out = String::new();
    out.push_str(
        "# Configuration\n\
         \n\
         <!-- Generated from proto/config/src/table.rs; do not edit by hand.\n\
         \x20    Regenerate: cargo run -q -p hlobridge-config --example config_doc > docs/configuration.md -->\n\
         \n\
         Every `HLOBRIDGE_*` environment variable hlobridge reads, with its default and meaning.\n\
         The table lives in one place, `proto/config/src/table.rs` (crate `hlobridge-config`);\n\
         the Rust crates read every variable through it, and Python sees the same table as\n\
         `hlobridge._native.config_variables()`. An empty value counts as unset. A variable that\n\
         starts with `HLOBRIDGE_` but is not listed here gets a warning at startup (the CLI,\n\
         `hlobridge serve`, the Python package) naming the nearest known one.\n\
         \n\
         *Read by*: `rust` (the library crates, the CLI and the Python extension's Rust half),\n\
         `python` (the Python package), `scripts` (scripts, benches, examples, the Makefile),\n\
         `tests` (the test suites and their tools).\n",
    );
    let mut section = "";
    for &v in Var::ALL {
        let info = v.info();
        if info.section != section {
            section = info.section;
            let _ = write!(
                out,
                "\n## {section}\n\n| Variable | Default | Meaning | Read by |\n|---|---|---|---|\n"
            );
        }
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            info.name,
            cell(info.default),
            cell(info.meaning),
            info.read_by_str()
        );
    }
    out
}

/// A table cell: `|` escaped.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}
