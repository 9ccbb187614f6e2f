//! `hlobridge conform DIR [--jobs N] [--filter SUBSTR] [--plugin P]`: run a
//! StableHLO test suite (modules that assert their results with
//! `check.expect_*`) through a PJRT plugin and compare on the host.
//!
//! For every `.mlir` file under DIR (recursively, sorted by path; files
//! split with `// -----` lines are one case per part): parse → rewrite the
//! checks into outputs ([`hlobridge::conform`]) → print → compile → run
//! (one client shared by all worker threads) → compare. A file passes when
//! every check of every part holds; any error is reported against the file
//! and the run goes on.

use crate::cmd_run;
use crate::compare::compare;
use clap::Args;
use pjrt_client::{Client, ClientOptions, Program};
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
exactly `N passed, N failed` (`, N skipped` appended when files were skipped).
A file is skipped when its entry function takes inputs (it is compiled only) or has no checks.
Exit status: 0 when nothing failed (or with --allow-failures), 1 otherwise, 2 on usage errors.

Comparison: ",
    comparison_rules!()
);

/// Outcome of one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Status {
    Pass,
    Fail,
    Skip,
}

struct FileResult {
    rel: String,
    status: Status,
    /// Reasons (fail/skip) or notes, one per line.
    lines: Vec<String>,
    checks: usize,
}

/// Run `conform`.
pub fn run(a: ConformArgs) -> Result<ExitCode, String> {
    let start = Instant::now();
    let mut files = Vec::new();
    collect_mlir(&a.dir, &mut files).map_err(|e| format!("{}: {e}", a.dir.display()))?;
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
        return Err(format!(
            "no .mlir files under {} match the filters",
            a.dir.display()
        ));
    }

    let (plugin, plugin_path) = cmd_run::load_plugin(a.plugin.as_deref())?;
    let client = Client::new(&plugin, &ClientOptions::new().cpu_device_count(1))
        .map_err(|e| format!("creating PJRT client: {e}"))?;
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, files.len());
    println!(
        "conform: {} file(s) under {}; plugin {} ({} {}); {jobs} job(s)",
        files.len(),
        a.dir.display(),
        plugin_path.display(),
        client.platform_name(),
        client.platform_version()
    );

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
                let r = run_file(&client, path, rel(path), a.generic);
                let mut g = slots.lock().unwrap_or_else(|e| e.into_inner());
                g.1[i] = Some(r);
                let mut out = std::io::stdout().lock();
                while g.0 < g.1.len() {
                    let k = g.0;
                    let Some(r) = g.1[k].take() else { break };
                    print_result(&mut out, &r, a.verbose);
                    done.lock().unwrap_or_else(|e| e.into_inner()).push(r);
                    g.0 += 1;
                }
                let _ = out.flush();
            });
        }
    });
    let results = done.into_inner().unwrap_or_else(|e| e.into_inner());
    let failed = summarize(&results, start.elapsed(), jobs);
    Ok(if failed > 0 && !a.allow_failures {
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

fn print_result(out: &mut impl Write, r: &FileResult, verbose: bool) {
    let tag = match r.status {
        Status::Pass if !verbose => return,
        Status::Pass => "PASS",
        Status::Fail => "FAIL",
        Status::Skip => "SKIP",
    };
    let mut lines = r.lines.iter();
    match lines.next() {
        Some(first) => {
            let _ = writeln!(out, "{tag} {}: {first}", r.rel);
        }
        None => {
            let _ = writeln!(out, "{tag} {} ({} checks)", r.rel, r.checks);
        }
    }
    for l in lines {
        let _ = writeln!(out, "    {l}");
    }
}

/// Prints the summary; returns the number of failed files.
fn summarize(results: &[FileResult], elapsed: Duration, jobs: usize) -> usize {
    let mut by_dir: BTreeMap<String, [usize; 3]> = BTreeMap::new();
    let mut total = [0usize; 3];
    for r in results {
        let dir = r
            .rel
            .rsplit_once('/')
            .map_or(".".to_string(), |(d, _)| d.to_string());
        let k = r.status as usize;
        by_dir.entry(dir).or_default()[k] += 1;
        total[k] += 1;
    }
    let counts = |c: &[usize; 3]| {
        let mut s = format!("{} passed, {} failed", c[0], c[1]);
        if c[2] > 0 {
            s.push_str(&format!(", {} skipped", c[2]));
        }
        s
    };
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
    println!("{}", counts(&total));
    total[1]
}

fn run_file(client: &Client, path: &Path, rel: String, generic: bool) -> FileResult {
    let mut r = FileResult {
        rel,
        status: Status::Pass,
        lines: Vec::new(),
        checks: 0,
    };
    let text = match std::fs::read(path) {
        Ok(b) => match String::from_utf8(b) {
            Ok(t) => t,
            Err(_) => return fail(r, "not UTF-8 text".into()),
        },
        Err(e) => return fail(r, format!("read error: {e}")),
    };
    let parts = split_parts(&text);
    let many = parts.len() > 1;
    let (mut passed, mut skipped) = (0, 0);
    for (first_line, part) in parts {
        let name = r.rel.clone();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_case(client, &name, part, first_line, generic)
        }))
        .unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("unknown panic");
            Case::Fail(vec![format!("internal error (panic): {msg}")])
        });
        let prefix = |l: String| {
            if many {
                format!("[part at line {first_line}] {l}")
            } else {
                l
            }
        };
        match outcome {
            Case::Pass(n) => {
                passed += 1;
                r.checks += n;
            }
            Case::Skip(why) => {
                skipped += 1;
                r.lines.push(prefix(why));
            }
            Case::Fail(lines) => {
                r.status = Status::Fail;
                r.lines.extend(lines.into_iter().map(prefix));
            }
        }
    }
    if r.status != Status::Fail {
        if passed == 0 && skipped > 0 {
            r.status = Status::Skip;
        } else {
            // Parts that passed carry no message; notes of skipped parts
            // of a passing file are not worth a line.
            r.lines.clear();
        }
    } else {
        // Failures first.
        r.lines.sort_by_key(|l| l.contains("skipped"));
    }
    r
}

fn fail(mut r: FileResult, msg: String) -> FileResult {
    r.status = Status::Fail;
    r.lines.push(msg);
    r
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

enum Case {
    /// All checks held (count).
    Pass(usize),
    Skip(String),
    Fail(Vec<String>),
}

fn run_case(client: &Client, name: &str, src: &str, first_line: u32, generic: bool) -> Case {
    let mut m = match hlobridge::parse_module_named(name, src) {
        Ok(m) => m,
        Err(mut e) => {
            e.line += first_line - 1;
            let text = e.to_string();
            return Case::Fail(
                text.lines()
                    .enumerate()
                    .map(|(i, l)| {
                        if i == 0 {
                            format!("parse error: {l}")
                        } else {
                            l.to_string()
                        }
                    })
                    .collect(),
            );
        }
    };
    let mut rw = match hlobridge::conform::rewrite_checks(&mut m) {
        Ok(r) => r,
        Err(e) => return Case::Fail(vec![format!("unsupported: {e}")]),
    };
    hlobridge::conform::attach_source_lines(&mut rw.checks, src, first_line);
    if client.host_kernels().gemm {
        if let Some(policy) = hlobridge::lower::HostLowering::from_env().gemm {
            hlobridge::lower::rewrite_host_gemm(&mut m, &policy);
        }
    }
    let nparams = hlobridge::conform::entry_params(&m).map_or(0, |p| p.len());
    let program = hlobridge::print_module(
        &m,
        &hlobridge::PrintOptions {
            generic,
            debug_info: true,
        },
    );
    let exe = match client.compile(&Program::mlir_text(&program), &cmd_run::compile_options(&m)) {
        Ok(e) => e,
        Err(e) => return Case::Fail(vec![format!("compile error: {}", one_line(&e.to_string()))]),
    };
    if nparams > 0 {
        return Case::Skip(format!(
            "skipped: entry takes {nparams} input(s); compiled only"
        ));
    }
    let outputs = match cmd_run::execute(client, &exe, &[], None) {
        Ok(o) => o,
        Err(e) => return Case::Fail(vec![one_line(&e)]),
    };
    if rw.checks.is_empty() {
        return Case::Skip("skipped: no checks (compiled and ran)".into());
    }
    let mut failures = Vec::new();
    for c in &rw.checks {
        let (Some(act), Some(exp)) = (
            outputs.get(c.actual_output).and_then(|o| o.first()),
            outputs.get(c.expected_output).and_then(|o| o.first()),
        ) else {
            failures.push(format!("{}: output missing", c.label()));
            continue;
        };
        if let Err(e) = compare(c.kind, act, exp) {
            failures.push(format!("{}: {e}", c.label()));
        }
    }
    if failures.is_empty() {
        return Case::Pass(rw.checks.len());
    }
    let mut lines = vec![format!(
        "{} of {} checks failed",
        failures.len(),
        rw.checks.len()
    )];
    lines.extend(failures);
    Case::Fail(lines)
}

fn one_line(s: &str) -> String {
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
    fn parts() {
        let t = "// RUN: x\n\nmodule {\n}\n\n// -----\n\nmodule {\n}\n";
        let p = split_parts(t);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].0, 1);
        assert_eq!(p[1].0, 7);
        assert_eq!(split_parts("module {}\n").len(), 1);
    }
}
