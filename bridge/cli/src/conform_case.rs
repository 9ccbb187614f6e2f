//! One conformance case (a module, or one `// -----` part of a file) run
//! through one of the two paths of `hlobridge conform`:
//!
//! * [`run_hlobridge`]: hlobridge's full path, as `hlobridge run` takes it:
//!   parse → [`hlobridge::conform::rewrite_checks`] → print → compile
//!   through the compile service, host lowering on ([`hlobridge_compile`]) → run;
//! * [`run_raw`]: the file's own text with only its checks turned into
//!   outputs by [`hlobridge::conform::raw::rewrite_checks_text`] (no parse,
//!   no print, no lowering) → compile → run.
//!
//! Both end in the same comparator ([`crate::compare::compare`]) and report
//! a [`Sig`]nature of how the case ended, so a differential run can tell
//! whether both paths failed the same way.

use crate::compare::compare;
use crate::runtime::{self, HostArray};
use hlobridge::conform::Check;
use hlobridge_compile::{CompilePolicy, HostLoweringMode};
use pjrt_client::{Client, CompileOptions, XlaOption};

/// How a case ended, for comparing the two paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sig {
    /// Every check held.
    Pass,
    /// Not run (entry takes inputs) or nothing to compare.
    Skip,
    /// These checks (ordinals) failed.
    Checks(Vec<usize>),
    /// Stopped at this stage (`parse`, `unsupported`, `compile`, `run`,
    /// `internal`).
    Error(&'static str),
}

impl Sig {
    /// Whether two paths ended the same way: the same failing checks, or
    /// the same failing stage, where hlobridge's parser and the plugin's
    /// compiler (which parses the text first) rejecting a module count as
    /// the same.
    pub(crate) fn same_as(&self, other: &Sig) -> bool {
        let class = |s: &Sig| match s {
            Sig::Error("parse") => Sig::Error("compile"),
            other => other.clone(),
        };
        class(self) == class(other)
    }
}

/// Outcome of one case, for the report.
pub(crate) enum Case {
    /// All checks held (count).
    Pass(usize),
    Skip(String),
    Fail(Vec<String>),
}

/// A case's outcome, signature and (when it ran) its outputs.
pub(crate) struct CaseResult {
    pub case: Case,
    pub sig: Sig,
    /// `outputs[output][device]`, when the program ran.
    pub outputs: Option<Vec<Vec<HostArray>>>,
}

impl CaseResult {
    fn error(stage: &'static str, lines: Vec<String>) -> Self {
        CaseResult {
            case: Case::Fail(lines),
            sig: Sig::Error(stage),
            outputs: None,
        }
    }
}

/// What every case of a run shares.
pub(crate) struct Ctx<'a> {
    pub client: &'a Client,
    /// Hand hlobridge's printed modules to the compiler in generic form.
    pub generic: bool,
    /// `--xla-option` overrides (both paths).
    pub xla_options: &'a [(String, XlaOption)],
}

/// hlobridge's path; see the module docs.
pub(crate) fn run_hlobridge(ctx: &Ctx, name: &str, src: &str, first_line: u32) -> CaseResult {
    let mut m = match hlobridge::parse_module_named(name, src) {
        Ok(m) => m,
        Err(mut e) => {
            e.line += first_line - 1;
            let text = e.to_string();
            let lines = text
                .lines()
                .enumerate()
                .map(|(i, l)| {
                    if i == 0 {
                        format!("parse error: {l}")
                    } else {
                        l.to_string()
                    }
                })
                .collect();
            return CaseResult::error("parse", lines);
        }
    };
    let mut rw = match hlobridge::conform::rewrite_checks(&mut m) {
        Ok(r) => r,
        Err(e) => return CaseResult::error("unsupported", vec![format!("unsupported: {e}")]),
    };
    hlobridge::conform::attach_source_lines(&mut rw.checks, src, first_line);
    let nparams = hlobridge::conform::entry_params(&m).map_or(0, |p| p.len());
    let program = hlobridge::print_module(
        &m,
        &hlobridge::PrintOptions {
            generic: ctx.generic,
            debug_info: true,
        },
    );
    let options = runtime::compile_options(&m);
    finish(
        ctx,
        &program,
        options,
        HostLoweringMode::Auto,
        nparams,
        &rw.checks,
    )
}

/// The raw path; see the module docs.
pub(crate) fn run_raw(ctx: &Ctx, src: &str, first_line: u32) -> CaseResult {
    let options = runtime::compile_options_for(
        text_int_attr(src, "mhlo.num_partitions").unwrap_or(1),
        text_int_attr(src, "mhlo.num_replicas").unwrap_or(1),
        src.contains("sdy.mesh"),
    );
    let off = HostLoweringMode::Off;
    match hlobridge::conform::raw::rewrite_checks_text(src, first_line) {
        Ok(rw) => finish(ctx, &rw.text, options, off, rw.entry_params, &rw.checks),
        // No entry the text rewrite can find, and no checks to move: the
        // plugin gets the text as it is (and says what it makes of it).
        Err(hlobridge::conform::ConformError::NoEntry(_)) if !src.contains("check.") => {
            finish(ctx, src, options, off, 0, &[])
        }
        Err(e) => CaseResult::error("unsupported", vec![format!("unsupported: {e}")]),
    }
}

/// Compile (through the compile service: CPU semantics, the overrides and,
/// on hlobridge's path, the host lowering; no caches), run and compare
/// (shared by both paths).
fn finish(
    ctx: &Ctx,
    program: &str,
    options: CompileOptions,
    host_lowering: HostLoweringMode,
    nparams: usize,
    checks: &[Check],
) -> CaseResult {
    let policy = CompilePolicy {
        host_lowering,
        ..CompilePolicy::uncached()
    }
    .with_xla_overrides(ctx.xla_options.to_vec());
    let exe = match hlobridge_compile::compile(ctx.client, program, options, &policy) {
        Ok(f) => f.compiled.exe.clone(),
        Err(e) => {
            let e = crate::error::CliError::from(e);
            return CaseResult::error("compile", vec![one_line(&e.to_string())]);
        }
    };
    if nparams > 0 {
        return CaseResult {
            case: Case::Skip(format!(
                "skipped: entry takes {nparams} input(s); compiled only"
            )),
            sig: Sig::Skip,
            outputs: None,
        };
    }
    let outputs = match runtime::execute(ctx.client, &exe, &[], None) {
        Ok(o) => o,
        Err(e) => return CaseResult::error("run", vec![one_line(&e.to_string())]),
    };
    if checks.is_empty() {
        return CaseResult {
            case: Case::Skip("skipped: no checks (compiled and ran)".into()),
            sig: Sig::Skip,
            outputs: Some(outputs),
        };
    }
    let mut failures = Vec::new();
    let mut failed = Vec::new();
    for c in checks {
        let (Some(act), Some(exp)) = (
            outputs.get(c.actual_output).and_then(|o| o.first()),
            outputs.get(c.expected_output).and_then(|o| o.first()),
        ) else {
            failures.push(format!("{}: output missing", c.label()));
            failed.push(c.ordinal);
            continue;
        };
        if let Err(e) = compare(c.kind, act, exp) {
            failures.push(format!("{}: {e}", c.label()));
            failed.push(c.ordinal);
        }
    }
    if failures.is_empty() {
        return CaseResult {
            case: Case::Pass(checks.len()),
            sig: Sig::Pass,
            outputs: Some(outputs),
        };
    }
    failed.dedup();
    let mut lines = vec![format!(
        "{} of {} checks failed",
        failures.len(),
        checks.len()
    )];
    lines.extend(failures);
    CaseResult {
        case: Case::Fail(lines),
        sig: Sig::Checks(failed),
        outputs: Some(outputs),
    }
}

/// `NAME = N` of a module attribute, read from the text (the raw path does
/// not parse).
fn text_int_attr(src: &str, name: &str) -> Option<i64> {
    let at = src.find(name)? + name.len();
    let rest = src[at..].trim_start().strip_prefix('=')?.trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// A multi-line message as one line, cut at 600 bytes.
pub(crate) fn one_line(s: &str) -> String {
    let s = s.trim();
    let mut out: String = s.lines().map(str::trim).collect::<Vec<_>>().join(" | ");
    if out.len() > 600 {
        let mut cut = 600;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str(" ...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures() {
        assert!(Sig::Error("parse").same_as(&Sig::Error("compile")));
        assert!(!Sig::Error("unsupported").same_as(&Sig::Error("compile")));
        assert!(Sig::Checks(vec![0, 2]).same_as(&Sig::Checks(vec![0, 2])));
        assert!(!Sig::Checks(vec![0]).same_as(&Sig::Checks(vec![0, 2])));
        assert!(!Sig::Checks(vec![0]).same_as(&Sig::Error("run")));
    }

    #[test]
    fn module_attrs_from_text() {
        let t =
            "module @m attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {";
        assert_eq!(text_int_attr(t, "mhlo.num_partitions"), Some(4));
        assert_eq!(text_int_attr(t, "mhlo.num_replicas"), Some(1));
        assert_eq!(text_int_attr("module {", "mhlo.num_partitions"), None);
    }
}
