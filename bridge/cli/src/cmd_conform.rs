//! `hlobridge conform DIR [--jobs N] [--filter SUBSTR] [--plugin P]
//! [--differential [--known-failures LIST]]`: run a StableHLO test suite
//! (modules that assert their results with `check.expect_*`) through a PJRT
//! plugin and compare on the host.
//!
//! For every `.mlir` file under DIR (recursively, sorted by path; files
//! split with `// -----` lines are one case per part), each case runs
//! through hlobridge's path ([`crate::conform_case::run_hlobridge`]) and,
//! with `--differential`, also through the raw path
//! ([`crate::conform_case::run_raw`]: the file's own text, checks turned
//! into outputs textually), on one client shared by all worker threads. A
//! file passes when every check of every part holds; any error is reported
//! against the file and the run goes on. In a differential run, a failure
//! only counts against hlobridge when the raw plugin does not fail the same
//! way (the same failing checks, or the same failing stage), and the
//! optional known-failures list ([`crate::known_failures`]) is checked
//! against the raw results.

use crate::conform_case::{self, Case, CaseResult, Ctx, Sig};
use crate::error::{CliError, Result};
use crate::known_failures::{KnownFailures, ListCheck};
use crate::runtime::{self, HostArray};
use clap::Args;
use pjrt_client::{Client, ClientOptions};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How values are compared (a macro so `--help` can embed it).
macro_rules! comparison_rules {
    () => {
        "eq: exact (integers bitwise; floats equal as numbers, NaN == NaN, \
-0.0 == 0.0); close: ULP distance within [min_ulp_difference, max_ulp_difference] from the \
check's attributes (default 0..=3; NaN vs NaN is 0; finite vs non-finite never close); \
almost_eq: |actual - expected| <= tolerance * max(1, |expected|) (tolerance attribute, default \
1e-3; NaN == NaN, equal infinities); complex numbers compare part by part; integer and boolean \
outputs always compare exactly"
    };
}

/// How values are compared; printed by `--help` and in the summary.
pub const COMPARISON: &str = comparison_rules!();

/// Arguments of `hlobridge conform`.
#[derive(Args)]
#[command(after_long_help = CONFORM_HELP)]
pub struct ConformArgs {
    /// Directory of test modules (searched recursively), or one file.
    pub dir: PathBuf,
    /// Worker threads (default: available cores).
    #[arg(long, short = 'j', value_name = "N")]
    pub jobs: Option<usize>,
    /// Only files whose path relative to DIR contains SUBSTR.
    #[arg(long, value_name = "SUBSTR")]
    pub filter: Option<String>,
    /// Skip files whose path relative to DIR contains SUBSTR (repeatable).
    #[arg(long, value_name = "SUBSTR")]
    pub exclude: Vec<String>,
    /// PJRT plugin shared library (default: discovery, as for `run`).
    #[arg(long, value_name = "P")]
    pub plugin: Option<PathBuf>,
    /// Also run every file's own text straight through the plugin (checks
    /// turned into outputs textually; no parse, print or lowering) and
    /// judge hlobridge against it.
    #[arg(long)]
    pub differential: bool,
    /// With --differential: TOML list of files XLA itself fails, checked
    /// against the raw results.
    #[arg(long, value_name = "LIST", requires = "differential")]
    pub known_failures: Option<PathBuf>,
    /// Override an XLA compiler option on top of the plugin's defaults, on
    /// both paths (repeatable; as for `run`).
    #[arg(long = "xla-option", value_name = "NAME=VALUE")]
    pub xla_options: Vec<String>,
    /// Exit with status 0 even when files fail.
    #[arg(long)]
    pub allow_failures: bool,
    /// Hand modules to the compiler in MLIR's generic op form.
    #[arg(long)]
    pub generic: bool,
    /// Also print a line for every passing file.
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

const CONFORM_HELP: &str = concat!(
    "\
Output: one block per failing (FAIL) or skipped (SKIP) file, in path order:
  FAIL <path>: <reason>            (parse error / unsupported check / compile error / run error)
  FAIL <path>: <n> of <m> checks failed
    <check> #<k> (line <l>): <first mismatch: index, actual, expected> ...
then a summary by subdirectory, the comparison rules, the wall time, and as the last line
exactly `N passed, N failed` (`, N skipped` appended when files were skipped): hlobridge's counts.
A file is skipped when its entry function takes inputs (it is compiled only) or has no checks.
Exit status: 0 when nothing failed (or with --allow-failures), 1 otherwise, 2 on usage errors.

--differential also runs each file raw: the plugin compiles the file's own text, in which only the
check ops are blanked and their operands appended to @main's results (no parse, print or host
lowering). Each hlobridge failure gets a line `raw plugin: fails the same way` (same failing checks,
or the same failing stage) or `raw plugin: passes` / `raw plugin: fails differently: ...`
(HLOBRIDGE-ONLY: counted against hlobridge); files only the raw plugin fails are printed as
`RAW-FAIL <path>: ...`. Before the last line come `raw plugin: N passed, N failed[, N skipped]`,
`differential: N hlobridge-only failure(s), N same on both paths, N raw-only failure(s); outputs
bitwise identical in N of M file(s)` and, with --known-failures LIST, a line on the list (entries
failing as listed, CPU-dependent entries passing here, STALE entries: listed and not CPU-dependent
but passing raw, unlisted raw failures). A differential run exits with 1 when there is a
hlobridge-only failure or a stale entry (unless --allow-failures), not for failures XLA shares.

Comparison: ",
    comparison_rules!()
);

/// Outcome of one file on one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Status {
    Pass,
    Fail,
    Skip,
}

/// One path's result for a file.
struct Side {
    status: Status,
    /// Reasons (fail/skip) or notes, one per line.
    lines: Vec<String>,
    checks: usize,
    /// One signature per part.
    sigs: Vec<Sig>,
    /// Outputs of every part that ran (`None` for a part that did not).
    outputs: Vec<Option<Vec<Vec<HostArray>>>>,
}

/// How the two paths compare on a failing file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Not a differential run, or hlobridge did not fail.
    None,
    /// hlobridge fails and the raw plugin fails the same way.
    Same,
    /// hlobridge fails and the raw plugin does not fail the same way.
    HlobridgeOnly,
}

struct FileResult {
    rel: String,
    hb: Side,
    raw: Option<Side>,
    verdict: Verdict,
    /// Whether both paths ran every part and returned bitwise the same
    /// outputs (differential runs).
    bitwise: Option<bool>,
}

/// Run `conform`.
pub fn run(a: ConformArgs) -> Result<ExitCode> {
    let start = Instant::now();
    let known = a
        .known_failures
        .as_deref()
        .map(KnownFailures::load)
        .transpose()?;
    let xla_options = a
        .xla_options
        .iter()
        .map(|s| runtime::parse_xla_option(s))
        .collect::<Result<Vec<_>>>()?;
    let mut files = Vec::new();
    collect_mlir(&a.dir, &mut files).map_err(|e| CliError::io(a.dir.display(), e))?;
    files.sort();
    let root = if a.dir.is_dir() {
        a.dir.clone()
    } else {
        a.dir.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    let rel = |p: &Path| {
        p.strip_prefix(&root)
            .unwrap_or(p)
            .to_string_lossy()
            .replace('\\', "/")
    };
    files.retain(|p| {
        let r = rel(p);
        a.filter.as_ref().is_none_or(|f| r.contains(f.as_str()))
            && !a.exclude.iter().any(|x| r.contains(x.as_str()))
    });
    if files.is_empty() {
        return Err(CliError::Input(format!(
            "no .mlir files under {} match the filters",
            a.dir.display()
        )));
    }

    let (plugin, plugin_path) = runtime::load_plugin(a.plugin.as_deref())?;
    hlobridge_compile::snapshot_environment();
    let client = Client::new(&plugin, &ClientOptions::new().cpu_device_count(1))
        .map_err(|e| CliError::Plugin(format!("creating PJRT client: {e}")))?;
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, files.len());
    println!(
        "conform: {} file(s) under {}; plugin {} ({} {}); {jobs} job(s){}",
        files.len(),
        a.dir.display(),
        plugin_path.display(),
        client.platform_name(),
        client.platform_version(),
        if a.differential {
            "; differential (hlobridge vs raw plugin)"
        } else {
            ""
        }
    );
    let ctx = Ctx {
        client: &client,
        generic: a.generic,
        xla_options: &xla_options,
    };

    // Workers take files in order; results are printed in path order as
    // soon as every earlier file is done.
    let next = AtomicUsize::new(0);
    let slots: Mutex<(usize, Vec<Option<FileResult>>)> =
        Mutex::new((0, (0..files.len()).map(|_| None).collect()));
    let done: Mutex<Vec<FileResult>> = Mutex::new(Vec::with_capacity(files.len()));
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(path) = files.get(i) else { break };
                let r = run_file(&ctx, path, rel(path), a.differential);
                let mut g = slots.lock().unwrap_or_else(|e| e.into_inner());
                g.1[i] = Some(r);
                let mut out = std::io::stdout().lock();
                while g.0 < g.1.len() {
                    let k = g.0;
                    let Some(r) = g.1[k].take() else { break };
                    print_result(&mut out, &r, a.verbose, known.as_ref());
                    done.lock().unwrap_or_else(|e| e.into_inner()).push(r);
                    g.0 += 1;
                }
                let _ = out.flush();
            });
        }
    });
    let mut results = done.into_inner().unwrap_or_else(|e| e.into_inner());
    for r in &mut results {
        // Outputs were only kept for the bitwise comparison.
        r.hb.outputs.clear();
        if let Some(raw) = &mut r.raw {
            raw.outputs.clear();
        }
    }
    let list = known.as_ref().map(|k| {
        k.check(results.iter().filter_map(|r| {
            r.raw
                .as_ref()
                .map(|raw| (r.rel.as_str(), raw.status == Status::Fail))
        }))
    });
    if let Some(l) = &list {
        for (rel, reason) in &l.stale {
            println!(
                "STALE {rel}: listed in {} ({reason}) but passes on the raw plugin",
                a.known_failures
                    .as_deref()
                    .unwrap_or(Path::new(""))
                    .display()
            );
        }
    }
    let (hb_failed, hb_only) = summarize(&results, start.elapsed(), jobs, list.as_ref());
    let bad = if a.differential {
        hb_only + list.as_ref().map_or(0, |l| l.stale.len())
    } else {
        hb_failed
    };
    Ok(if bad > 0 && !a.allow_failures {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn collect_mlir(path: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if path.is_file() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    for e in std::fs::read_dir(path)? {
        let p = e?.path();
        if p.is_dir() {
            collect_mlir(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "mlir") {
            out.push(p);
        }
    }
    Ok(())
}

fn print_result(
    out: &mut impl Write,
    r: &FileResult,
    verbose: bool,
    known: Option<&KnownFailures>,
) {
    let raw_failed = r.raw.as_ref().is_some_and(|s| s.status == Status::Fail);
    let tag = match r.hb.status {
        Status::Pass if raw_failed => "RAW-FAIL",
        Status::Pass if !verbose => return,
        Status::Pass => "PASS",
        Status::Fail => "FAIL",
        Status::Skip => "SKIP",
    };
    if tag == "RAW-FAIL" {
        let raw = r.raw.as_ref().expect("raw side");
        let mut lines = raw.lines.iter();
        let first = lines.next().map_or("", String::as_str);
        let _ = writeln!(
            out,
            "RAW-FAIL {}: hlobridge passes; raw plugin: {first}{}",
            r.rel,
            known_note(known, &r.rel)
        );
        for l in lines {
            let _ = writeln!(out, "    {l}");
        }
        return;
    }
    let mut lines = r.hb.lines.iter();
    match lines.next() {
        Some(first) => {
            let _ = writeln!(out, "{tag} {}: {first}", r.rel);
        }
        None => {
            let _ = writeln!(out, "{tag} {} ({} checks)", r.rel, r.hb.checks);
        }
    }
    for l in lines {
        let _ = writeln!(out, "    {l}");
    }
    if r.hb.status == Status::Fail {
        if let Some(raw) = &r.raw {
            let note = match (r.verdict, raw.status) {
                (Verdict::Same, _) => format!(
                    "raw plugin: fails the same way{}",
                    known_note(known, &r.rel)
                ),
                (_, Status::Fail) => format!(
                    "raw plugin: fails differently: {} (HLOBRIDGE-ONLY)",
                    raw.lines.first().map_or("", String::as_str)
                ),
                (_, Status::Pass) => "raw plugin: passes (HLOBRIDGE-ONLY)".to_string(),
                (_, Status::Skip) => "raw plugin: skipped (HLOBRIDGE-ONLY)".to_string(),
            };
            let _ = writeln!(out, "    {note}");
        }
    }
}

/// ` (known XLA failure: reason)` when the list has the file.
fn known_note(known: Option<&KnownFailures>, rel: &str) -> String {
    match known.and_then(|k| k.find(rel)) {
        Some(e) => format!(
            " (known XLA failure{}: {})",
            if e.cpu_dependent {
                ", CPU-dependent"
            } else {
                ""
            },
            e.reason
        ),
        None => String::new(),
    }
}

fn counts(c: &[usize; 3]) -> String {
    let mut s = format!("{} passed, {} failed", c[0], c[1]);
    if c[2] > 0 {
        s.push_str(&format!(", {} skipped", c[2]));
    }
    s
}

/// Prints the summary; returns hlobridge's failed files and (differential
/// runs) its hlobridge-only failures.
fn summarize(
    results: &[FileResult],
    elapsed: Duration,
    jobs: usize,
    list: Option<&ListCheck>,
) -> (usize, usize) {
    let mut by_dir: BTreeMap<String, [usize; 3]> = BTreeMap::new();
    let mut total = [0usize; 3];
    let mut raw_total = [0usize; 3];
    let (mut same, mut hb_only, mut raw_only, mut identical, mut both_ran) = (0, 0, 0, 0, 0);
    let differential = results.iter().any(|r| r.raw.is_some());
    for r in results {
        let dir = r
            .rel
            .rsplit_once('/')
            .map_or(".".to_string(), |(d, _)| d.to_string());
        let k = r.hb.status as usize;
        by_dir.entry(dir).or_default()[k] += 1;
        total[k] += 1;
        if let Some(raw) = &r.raw {
            raw_total[raw.status as usize] += 1;
            match r.verdict {
                Verdict::Same => same += 1,
                Verdict::HlobridgeOnly => hb_only += 1,
                Verdict::None if raw.status == Status::Fail => raw_only += 1,
                Verdict::None => {}
            }
        }
        if let Some(b) = r.bitwise {
            both_ran += 1;
            identical += usize::from(b);
        }
    }
    println!();
    println!("by directory:");
    let w = by_dir.keys().map(|k| k.len()).max().unwrap_or(1);
    for (dir, c) in &by_dir {
        println!("  {dir:<w$}  {}", counts(c));
    }
    println!("comparison: {COMPARISON}");
    println!(
        "time: {:.1} s ({} file(s), {jobs} job(s))",
        elapsed.as_secs_f64(),
        results.len()
    );
    if differential {
        println!("raw plugin: {}", counts(&raw_total));
        println!(
            "differential: {hb_only} hlobridge-only failure(s), {same} same on both paths, {raw_only} raw-only failure(s); outputs bitwise identical in {identical} of {both_ran} file(s)"
        );
    }
    if let Some(l) = list {
        println!(
            "known XLA failures: {} failing as listed, {} CPU-dependent passing here, {} stale, {} not in this run; {} unlisted raw failure(s){}",
            l.failing_as_listed.len(),
            l.cpu_dependent_passing.len(),
            l.stale.len(),
            l.not_in_run.len(),
            l.unlisted.len(),
            if l.unlisted.is_empty() {
                String::new()
            } else {
                format!(": {}", l.unlisted.join(", "))
            }
        );
    }
    println!("{}", counts(&total));
    (total[1], hb_only)
}

fn run_file(ctx: &Ctx, path: &Path, rel: String, differential: bool) -> FileResult {
    let text = match std::fs::read(path) {
        Ok(b) => String::from_utf8(b).map_err(|_| "not UTF-8 text".to_string()),
        Err(e) => Err(format!("read error: {e}")),
    };
    let text = match text {
        Ok(t) => t,
        Err(msg) => {
            let side = || Side {
                status: Status::Fail,
                lines: vec![msg.clone()],
                checks: 0,
                sigs: vec![Sig::Error("read")],
                outputs: Vec::new(),
            };
            return FileResult {
                rel,
                hb: side(),
                raw: differential.then(side),
                verdict: if differential {
                    Verdict::Same
                } else {
                    Verdict::None
                },
                bitwise: None,
            };
        }
    };
    let parts = split_parts(&text);
    let hb = run_side(&parts, |src, first| {
        conform_case::run_hlobridge(ctx, &rel, src, first)
    });
    let raw =
        differential.then(|| run_side(&parts, |src, first| conform_case::run_raw(ctx, src, first)));
    let verdict = verdict(&hb, raw.as_ref());
    let bitwise = raw.as_ref().and_then(|raw| {
        let all = |s: &Side| s.outputs.iter().all(Option::is_some);
        (all(&hb) && all(raw) && !hb.outputs.is_empty()).then(|| hb.outputs == raw.outputs)
    });
    FileResult {
        rel,
        hb,
        raw,
        verdict,
        bitwise,
    }
}

/// How the paths compare on a file (see [`Verdict`]).
fn verdict(hb: &Side, raw: Option<&Side>) -> Verdict {
    match raw {
        Some(raw) if hb.status == Status::Fail => {
            let same = raw.status == Status::Fail
                && raw.sigs.len() == hb.sigs.len()
                && raw.sigs.iter().zip(&hb.sigs).all(|(r, h)| r.same_as(h));
            if same {
                Verdict::Same
            } else {
                Verdict::HlobridgeOnly
            }
        }
        _ => Verdict::None,
    }
}

/// Runs every part of a file through one path.
fn run_side(parts: &[(u32, &str)], run: impl Fn(&str, u32) -> CaseResult) -> Side {
    let mut side = Side {
        status: Status::Pass,
        lines: Vec::new(),
        checks: 0,
        sigs: Vec::new(),
        outputs: Vec::new(),
    };
    let many = parts.len() > 1;
    let (mut passed, mut skipped) = (0, 0);
    for &(first_line, part) in parts {
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(part, first_line)))
                .unwrap_or_else(|p| {
                    let msg = p
                        .downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| p.downcast_ref::<&str>().copied())
                        .unwrap_or("unknown panic");
                    CaseResult {
                        case: Case::Fail(vec![format!("internal error (panic): {msg}")]),
                        sig: Sig::Error("internal"),
                        outputs: None,
                    }
                });
        let prefix = |l: String| {
            if many {
                format!("[part at line {first_line}] {l}")
            } else {
                l
            }
        };
        side.sigs.push(outcome.sig);
        side.outputs.push(outcome.outputs);
        match outcome.case {
            Case::Pass(n) => {
                passed += 1;
                side.checks += n;
            }
            Case::Skip(why) => {
                skipped += 1;
                side.lines.push(prefix(why));
            }
            Case::Fail(lines) => {
                side.status = Status::Fail;
                side.lines.extend(lines.into_iter().map(prefix));
            }
        }
    }
    if side.status != Status::Fail {
        if passed == 0 && skipped > 0 {
            side.status = Status::Skip;
        } else {
            // Parts that passed carry no message; notes of skipped parts
            // of a passing file are not worth a line.
            side.lines.clear();
        }
    } else {
        // Failures first.
        side.lines.sort_by_key(|l| l.contains("skipped"));
    }
    side
}

/// Split `// -----` separated parts: (1-based first line, text).
fn split_parts(text: &str) -> Vec<(u32, &str)> {
    let mut parts = Vec::new();
    let (mut start, mut start_line, mut line_no, mut off) = (0usize, 1u32, 1u32, 0usize);
    for line in text.split_inclusive('\n') {
        if line.trim() == "// -----" {
            parts.push((start_line, &text[start..off]));
            start = off + line.len();
            start_line = line_no + 1;
        }
        off += line.len();
        line_no += 1;
    }
    parts.push((start_line, &text[start..]));
    parts.retain(|(_, t)| {
        t.lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with("//"))
    });
    if parts.is_empty() {
        parts.push((1, text));
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts() {
        let t = "// RUN: x\n\nmodule {\n}\n\n// -----\n\nmodule {\n}\n";
        let p = split_parts(t);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].0, 1);
        assert_eq!(p[1].0, 7);
        assert_eq!(split_parts("module {}\n").len(), 1);
    }

    fn side(status: Status, sigs: Vec<Sig>) -> Side {
        Side {
            status,
            lines: Vec::new(),
            checks: 0,
            sigs,
            outputs: Vec::new(),
        }
    }

    #[test]
    fn verdicts() {
        let fail = |s: Vec<Sig>| side(Status::Fail, s);
        let hb = fail(vec![Sig::Pass, Sig::Checks(vec![1])]);
        assert_eq!(verdict(&hb, None), Verdict::None);
        let same = fail(vec![Sig::Pass, Sig::Checks(vec![1])]);
        assert_eq!(verdict(&hb, Some(&same)), Verdict::Same);
        let other_check = fail(vec![Sig::Pass, Sig::Checks(vec![0])]);
        assert_eq!(verdict(&hb, Some(&other_check)), Verdict::HlobridgeOnly);
        let passes = side(Status::Pass, vec![Sig::Pass, Sig::Pass]);
        assert_eq!(verdict(&hb, Some(&passes)), Verdict::HlobridgeOnly);
        let other_part = fail(vec![Sig::Checks(vec![1]), Sig::Pass]);
        assert_eq!(verdict(&hb, Some(&other_part)), Verdict::HlobridgeOnly);
        // hlobridge passing is never a verdict against it.
        assert_eq!(verdict(&passes, Some(&same)), Verdict::None);
        // A parse error and the plugin's compile error are the same refusal.
        let parse = fail(vec![Sig::Error("parse")]);
        assert_eq!(
            verdict(&parse, Some(&fail(vec![Sig::Error("compile")]))),
            Verdict::Same
        );
        assert_eq!(
            verdict(&parse, Some(&fail(vec![Sig::Error("unsupported")]))),
            Verdict::HlobridgeOnly
        );
    }
}
