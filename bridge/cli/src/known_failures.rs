//! The list of files XLA itself fails (`conform --known-failures FILE`): a
//! TOML file of `[[failure]]` entries, each with the file's path (relative
//! to the suite directory, or just its name), the reason, and whether the
//! failure depends on the CPU (`cpu_dependent = true`: XLA:CPU's numerics
//! follow the machine's vector ISA, so the raw plugin may pass or fail).
//!
//! The list is checked against the raw plugin's results of a differential
//! run, so it stays true: an entry that is not CPU-dependent and now passes
//! on the raw path is *stale* (an error), and raw failures nobody listed
//! are reported.

use crate::error::{CliError, Result};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::Path;

/// One listed failure.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KnownFailure {
    /// Path relative to the suite directory, or a bare file name.
    pub file: String,
    /// Why XLA fails it.
    pub reason: String,
    /// The raw plugin may pass or fail it depending on the CPU.
    #[serde(default)]
    pub cpu_dependent: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListFile {
    #[serde(default)]
    failure: Vec<KnownFailure>,
}

/// A parsed list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KnownFailures {
    /// The entries, in file order.
    pub entries: Vec<KnownFailure>,
}

impl KnownFailures {
    /// Reads and parses a list file.
    pub(crate) fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| CliError::io(path.display(), e))?;
        Self::parse(&text).map_err(|e| CliError::Parse(format!("{}: {e}", path.display())))
    }

    /// Parses list text; entries need a non-empty `file` and `reason`, and
    /// a file may be listed once.
    pub(crate) fn parse(text: &str) -> Result<Self> {
        let f: ListFile = toml::from_str(text).map_err(|e| CliError::Parse(e.to_string()))?;
        let mut seen = BTreeSet::new();
        for e in &f.failure {
            if e.file.trim().is_empty() {
                return Err(CliError::Parse(
                    "a [[failure]] entry has an empty `file`".into(),
                ));
            }
            if e.reason.trim().is_empty() {
                return Err(CliError::Parse(format!("{}: empty `reason`", e.file)));
            }
            if !seen.insert(e.file.as_str()) {
                return Err(CliError::Parse(format!("{}: listed twice", e.file)));
            }
        }
        Ok(KnownFailures { entries: f.failure })
    }

    /// The entry for the file at `rel` (relative to the suite directory):
    /// the same path, or the same file name for a bare-name entry.
    pub(crate) fn find(&self, rel: &str) -> Option<&KnownFailure> {
        self.entries.iter().find(|e| {
            e.file == rel || (!e.file.contains('/') && rel.rsplit('/').next() == Some(&e.file))
        })
    }

    /// Checks the list against raw results `(rel, raw_failed)` of the files
    /// of one run.
    pub(crate) fn check<'a>(&self, raw: impl IntoIterator<Item = (&'a str, bool)>) -> ListCheck {
        let mut c = ListCheck::default();
        let mut hit = BTreeSet::new();
        for (rel, failed) in raw {
            match self.find(rel) {
                Some(e) => {
                    hit.insert(e.file.as_str());
                    match (failed, e.cpu_dependent) {
                        (true, _) => c.failing_as_listed.push(rel.to_string()),
                        (false, true) => c.cpu_dependent_passing.push(rel.to_string()),
                        (false, false) => c.stale.push((rel.to_string(), e.reason.clone())),
                    }
                }
                None if failed => c.unlisted.push(rel.to_string()),
                None => {}
            }
        }
        c.not_in_run = self
            .entries
            .iter()
            .filter(|e| !hit.contains(e.file.as_str()))
            .map(|e| e.file.clone())
            .collect();
        c
    }
}

/// The outcome of [`KnownFailures::check`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ListCheck {
    /// Listed files the raw plugin fails.
    pub failing_as_listed: Vec<String>,
    /// Listed CPU-dependent files the raw plugin passes on this machine.
    pub cpu_dependent_passing: Vec<String>,
    /// Listed files (not CPU-dependent) the raw plugin now passes, with the
    /// listed reason: the list is out of date.
    pub stale: Vec<(String, String)>,
    /// Raw failures nobody listed.
    pub unlisted: Vec<String>,
    /// Listed files that were not part of the run.
    pub not_in_run: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = r#"
# comment
[[failure]]
file = "gather_a.mlir"
reason = "out-of-bounds gather"

[[failure]]
file = "sub/tri.mlir"
reason = "5 ULP off"
cpu_dependent = true
"#;

    #[test]
    fn parses_and_finds() {
        let k = KnownFailures::parse(LIST).unwrap();
        assert_eq!(k.entries.len(), 2);
        assert!(k.entries[1].cpu_dependent && !k.entries[0].cpu_dependent);
        assert_eq!(
            k.find("gather_a.mlir").unwrap().reason,
            "out-of-bounds gather"
        );
        assert!(
            k.find("x/gather_a.mlir").is_some(),
            "bare names match in any directory"
        );
        assert!(k.find("sub/tri.mlir").is_some());
        assert!(k.find("other/tri.mlir").is_none(), "paths match exactly");
        assert!(k.find("gather_b.mlir").is_none());
    }

    #[test]
    fn rejects_bad_lists() {
        let e = |t: &str| KnownFailures::parse(t).unwrap_err().to_string();
        assert!(e("[[failure]]\nfile = \"a\"\n").contains("reason"));
        assert!(e("[[failure]]\nfile = \"\"\nreason = \"r\"\n").contains("empty `file`"));
        assert!(e("[[failure]]\nfile = \"a\"\nreason = \"r\"\n[[failure]]\nfile = \"a\"\nreason = \"s\"\n")
            .contains("listed twice"));
        assert!(
            e("[[failure]]\nfile = \"a\"\nreason = \"r\"\ncpu = true\n").contains("unknown field")
        );
        assert!(KnownFailures::parse("").unwrap().entries.is_empty());
    }

    #[test]
    fn a_listed_file_that_passes_raw_is_stale_unless_cpu_dependent() {
        let k = KnownFailures::parse(LIST).unwrap();
        let c = k.check([
            ("gather_a.mlir", false),
            ("sub/tri.mlir", false),
            ("new.mlir", true),
            ("fine.mlir", false),
        ]);
        assert_eq!(
            c.stale,
            vec![(
                "gather_a.mlir".to_string(),
                "out-of-bounds gather".to_string()
            )]
        );
        assert_eq!(c.cpu_dependent_passing, vec!["sub/tri.mlir"]);
        assert_eq!(c.unlisted, vec!["new.mlir"]);
        assert!(c.failing_as_listed.is_empty() && c.not_in_run.is_empty());

        let c = k.check([("gather_a.mlir", true)]);
        assert_eq!(c.failing_as_listed, vec!["gather_a.mlir"]);
        assert!(c.stale.is_empty());
        assert_eq!(c.not_in_run, vec!["sub/tri.mlir"]);
    }
}
