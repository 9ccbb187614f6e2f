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

use crate::cmd_run::{self, HostArray};
use clap::Args;
use hlobridge::conform::CheckKind;
use pjrt_client::{Client, ClientOptions, ElementType, Program};
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
    let outputs = match cmd_run::execute(client, &exe, &[]) {
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

// ----- host comparison -----

/// How one element of a dtype decodes.
#[derive(Clone, Copy)]
enum Elem {
    Bool,
    Int {
        signed: bool,
        bits: u32,
    },
    /// A float of `exp` exponent and `man` mantissa bits (plus a sign bit).
    Float(FloatFmt),
    Complex(FloatFmt),
}

/// Binary float layout and special-value convention.
#[derive(Clone, Copy)]
struct FloatFmt {
    exp: u32,
    man: u32,
    bias: i32,
    special: Special,
}

#[derive(Clone, Copy, PartialEq)]
enum Special {
    /// All-ones exponent: infinity (zero mantissa) or NaN.
    Ieee,
    /// No infinities; all-ones exponent and mantissa is NaN (`*FN`).
    Fn,
    /// No infinities, no -0; the negative-zero pattern is NaN (`*FNUZ`).
    Fnuz,
    /// No infinities or NaNs (`f4E2M1FN`).
    Finite,
    /// `f8E8M0FNU`: unsigned powers of two; 0xFF is NaN.
    E8M0,
}

const fn ff(exp: u32, man: u32, bias: i32, special: Special) -> FloatFmt {
    FloatFmt {
        exp,
        man,
        bias,
        special,
    }
}

fn elem_of(t: ElementType) -> Option<Elem> {
    use ElementType::*;
    use Special::*;
    Some(match t {
        Pred => Elem::Bool,
        S2 | S4 | S8 | S16 | S32 | S64 => Elem::Int {
            signed: true,
            bits: t.bit_width() as u32,
        },
        U2 | U4 | U8 | U16 | U32 | U64 => Elem::Int {
            signed: false,
            bits: t.bit_width() as u32,
        },
        F16 => Elem::Float(ff(5, 10, 15, Ieee)),
        Bf16 => Elem::Float(ff(8, 7, 127, Ieee)),
        F32 => Elem::Float(ff(8, 23, 127, Ieee)),
        F64 => Elem::Float(ff(11, 52, 1023, Ieee)),
        F8E5M2 => Elem::Float(ff(5, 2, 15, Ieee)),
        F8E4M3 => Elem::Float(ff(4, 3, 7, Ieee)),
        F8E4M3FN => Elem::Float(ff(4, 3, 7, Fn)),
        F8E5M2FNUZ => Elem::Float(ff(5, 2, 16, Fnuz)),
        F8E4M3FNUZ => Elem::Float(ff(4, 3, 8, Fnuz)),
        F8E4M3B11FNUZ => Elem::Float(ff(4, 3, 11, Fnuz)),
        F8E3M4 => Elem::Float(ff(3, 4, 3, Ieee)),
        F8E8M0FNU => Elem::Float(ff(8, 0, 127, E8M0)),
        F4E2M1FN => Elem::Float(ff(2, 1, 1, Finite)),
        C64 => Elem::Complex(ff(8, 23, 127, Ieee)),
        C128 => Elem::Complex(ff(11, 52, 1023, Ieee)),
        Invalid | Token => return None,
    })
}

fn le_bits(b: &[u8]) -> u64 {
    let mut v = 0u64;
    for (i, &x) in b.iter().take(8).enumerate() {
        v |= (x as u64) << (8 * i);
    }
    v
}

impl FloatFmt {
    fn sign_bit(self) -> u32 {
        self.exp + self.man
    }

    /// Decode bits to f64 (exact for every format up to f64).
    fn decode(self, bits: u64) -> f64 {
        if self.exp == 11 && self.man == 52 {
            return f64::from_bits(bits);
        }
        if self.exp == 8 && self.man == 23 {
            return f32::from_bits(bits as u32) as f64;
        }
        let emax = (1u64 << self.exp) - 1;
        let mmask = (1u64 << self.man) - 1;
        if self.special == Special::E8M0 {
            let e = bits & 0xff;
            return if e == 0xff {
                f64::NAN
            } else {
                (2f64).powi(e as i32 - 127)
            };
        }
        let neg = (bits >> self.sign_bit()) & 1 == 1;
        let e = (bits >> self.man) & emax;
        let m = bits & mmask;
        let sign = if neg { -1.0 } else { 1.0 };
        match self.special {
            Special::Ieee if e == emax => {
                return if m == 0 {
                    sign * f64::INFINITY
                } else {
                    f64::NAN
                };
            }
            Special::Fn if e == emax && m == mmask => return f64::NAN,
            Special::Fnuz if neg && e == 0 && m == 0 => return f64::NAN,
            _ => {}
        }
        let scale = (1u64 << self.man) as f64;
        let v = if e == 0 {
            m as f64 / scale * (2f64).powi(1 - self.bias)
        } else {
            (1.0 + m as f64 / scale) * (2f64).powi(e as i32 - self.bias)
        };
        sign * v
    }

    /// ULP distance as the StableHLO interpreter defines it.
    fn ulp(self, a: u64, b: u64) -> u64 {
        if a == b {
            return 0;
        }
        let (fa, fb) = (self.decode(a), self.decode(b));
        if fa.is_finite() && fb.is_finite() {
            let sb = self.sign_bit();
            let mask = (1u64 << sb) - 1;
            let signed = self.special != Special::E8M0;
            let (ma, mb) = if signed { (a & mask, b & mask) } else { (a, b) };
            let (na, nb) = if signed {
                ((a >> sb) & 1, (b >> sb) & 1)
            } else {
                (0, 0)
            };
            return if na != nb {
                ma.saturating_add(mb)
            } else {
                ma.abs_diff(mb)
            };
        }
        if fa.is_nan() && fb.is_nan() {
            0
        } else {
            u64::MAX
        }
    }
}

/// Compare one float component; `Err(detail)` when it does not hold.
fn cmp_float(kind: CheckKind, f: FloatFmt, a: u64, b: u64) -> Result<(), String> {
    let (x, y) = (f.decode(a), f.decode(b));
    match kind {
        CheckKind::Eq => {
            if x == y || (x.is_nan() && y.is_nan()) {
                Ok(())
            } else {
                Err(String::new())
            }
        }
        CheckKind::Close {
            min_ulp_difference,
            max_ulp_difference,
        } => {
            let d = f.ulp(a, b);
            if d >= min_ulp_difference && d <= max_ulp_difference {
                Ok(())
            } else if d == u64::MAX {
                Err("ULP distance: infinite".into())
            } else {
                Err(format!("ULP distance {d}"))
            }
        }
        CheckKind::AlmostEq { tolerance } => {
            let ok = (x.is_nan() && y.is_nan())
                || x == y
                || (x - y).abs() <= tolerance * y.abs().max(1.0);
            if ok {
                Ok(())
            } else {
                Err(format!("|diff| {:e}", (x - y).abs()))
            }
        }
    }
}

fn fmt_float(f: FloatFmt, bits: u64) -> String {
    let v = f.decode(bits);
    if f.exp == 11 {
        format!("{v:?}")
    } else {
        format!("{:?}", v as f32)
    }
}

/// Compare two host arrays under `kind`.
fn compare(kind: CheckKind, act: &HostArray, exp: &HostArray) -> Result<(), String> {
    let (at, adims, abytes) = act;
    let (et, edims, ebytes) = exp;
    if at != et || adims != edims {
        return Err(format!(
            "type mismatch: actual {} vs expected {}",
            cmd_run::type_string(*at, adims),
            cmd_run::type_string(*et, edims)
        ));
    }
    let elem = elem_of(*at).ok_or_else(|| format!("cannot compare {at} values"))?;
    let size = at.host_byte_size();
    if abytes.len() != ebytes.len() || size == 0 {
        return Err("output sizes differ".into());
    }
    let n = abytes.len() / size;
    let mut bad = 0usize;
    let mut first: Option<String> = None;
    for i in 0..n {
        let (x, y) = (
            &abytes[i * size..(i + 1) * size],
            &ebytes[i * size..(i + 1) * size],
        );
        let res: Result<(), (String, String, String)> = match elem {
            Elem::Bool => {
                let (p, q) = (x[0] != 0, y[0] != 0);
                if p == q {
                    Ok(())
                } else {
                    Err((p.to_string(), q.to_string(), String::new()))
                }
            }
            Elem::Int { signed, bits } => {
                let (p, q) = (
                    int_value(le_bits(x), signed, bits),
                    int_value(le_bits(y), signed, bits),
                );
                if p == q {
                    Ok(())
                } else {
                    Err((p.to_string(), q.to_string(), String::new()))
                }
            }
            Elem::Float(f) => {
                let (p, q) = (le_bits(x), le_bits(y));
                cmp_float(kind, f, p, q).map_err(|d| (fmt_float(f, p), fmt_float(f, q), d))
            }
            Elem::Complex(f) => {
                let h = size / 2;
                let (pr, pi, qr, qi) = (
                    le_bits(&x[..h]),
                    le_bits(&x[h..]),
                    le_bits(&y[..h]),
                    le_bits(&y[h..]),
                );
                let re = cmp_float(kind, f, pr, qr);
                let im = cmp_float(kind, f, pi, qi);
                match (re, im) {
                    (Ok(()), Ok(())) => Ok(()),
                    (r, i) => Err((
                        format!("({}, {})", fmt_float(f, pr), fmt_float(f, pi)),
                        format!("({}, {})", fmt_float(f, qr), fmt_float(f, qi)),
                        [r.err(), i.err()]
                            .into_iter()
                            .flatten()
                            .filter(|s| !s.is_empty())
                            .collect::<Vec<_>>()
                            .join(", "),
                    )),
                }
            }
        };
        if let Err((p, q, detail)) = res {
            bad += 1;
            if first.is_none() {
                let d = if detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({detail})")
                };
                first = Some(format!(
                    "index {:?}: actual {p} vs expected {q}{d}",
                    unflatten(i, adims)
                ));
            }
        }
    }
    match first {
        None => Ok(()),
        Some(f) => Err(format!(
            "{bad} of {n} elements differ ({kind}); first at {f}"
        )),
    }
}

fn int_value(bits: u64, signed: bool, width: u32) -> i128 {
    if width >= 64 {
        return if signed {
            bits as i64 as i128
        } else {
            bits as i128
        };
    }
    let v = bits & ((1u64 << width) - 1);
    if signed && (v >> (width - 1)) & 1 == 1 {
        v as i128 - (1i128 << width)
    } else {
        v as i128
    }
}

fn unflatten(mut i: usize, dims: &[i64]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for k in (0..dims.len()).rev() {
        let d = dims[k].max(1) as usize;
        idx[k] = i % d;
        i /= d;
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arr(t: ElementType, vals: &[u64]) -> HostArray {
        let size = t.host_byte_size();
        let mut bytes = Vec::new();
        for &v in vals {
            bytes.extend_from_slice(&v.to_le_bytes()[..size]);
        }
        (t, vec![vals.len() as i64], bytes)
    }

    const CLOSE3: CheckKind = CheckKind::Close {
        min_ulp_difference: 0,
        max_ulp_difference: 3,
    };

    #[test]
    fn float_decoding() {
        let f16 = match elem_of(ElementType::F16) {
            Some(Elem::Float(f)) => f,
            _ => unreachable!(),
        };
        assert_eq!(f16.decode(0x3C00), 1.0);
        assert_eq!(f16.decode(0xC000), -2.0);
        assert_eq!(f16.decode(0x0001), 2f64.powi(-24));
        assert!(f16.decode(0x7E00).is_nan());
        assert_eq!(f16.decode(0x7C00), f64::INFINITY);
        let bf16 = match elem_of(ElementType::Bf16) {
            Some(Elem::Float(f)) => f,
            _ => unreachable!(),
        };
        assert_eq!(bf16.decode(0x3F80), 1.0);
        assert_eq!(bf16.decode(0x4049), 3.140625);
        let e4m3fn = match elem_of(ElementType::F8E4M3FN) {
            Some(Elem::Float(f)) => f,
            _ => unreachable!(),
        };
        assert_eq!(e4m3fn.decode(0x7E), 448.0);
        assert!(e4m3fn.decode(0x7F).is_nan());
        // ULP across zero adds magnitudes; -0 vs 0 is 0.
        assert_eq!(bf16.ulp(0x0001, 0x8001), 2);
        assert_eq!(bf16.ulp(0x0000, 0x8000), 0);
        assert_eq!(bf16.ulp(0x7FC0, 0x7FC1), 0);
        assert_eq!(bf16.ulp(0x7F80, 0x3F80), u64::MAX);
    }

    #[test]
    fn comparisons() {
        let f32s = |v: &[f32]| {
            arr(
                ElementType::F32,
                &v.iter().map(|x| x.to_bits() as u64).collect::<Vec<_>>(),
            )
        };
        let a = f32s(&[1.0, f32::NAN, -0.0]);
        let b = f32s(&[1.0, f32::NAN, 0.0]);
        compare(CheckKind::Eq, &a, &b).unwrap();
        compare(CLOSE3, &a, &b).unwrap();
        let c = f32s(&[1.0 + 4.0 * f32::EPSILON, f32::NAN, 0.0]);
        let e = compare(CLOSE3, &c, &b).unwrap_err();
        assert!(e.contains("1 of 3 elements differ"), "{e}");
        assert!(
            e.contains("index [0]") && e.contains("ULP distance 4"),
            "{e}"
        );
        compare(CheckKind::AlmostEq { tolerance: 1e-3 }, &c, &b).unwrap();
        let big = f32s(&[1000.5]);
        compare(
            CheckKind::AlmostEq { tolerance: 1e-3 },
            &big,
            &f32s(&[1000.0]),
        )
        .unwrap();
        assert!(compare(
            CheckKind::AlmostEq { tolerance: 1e-3 },
            &f32s(&[1.01]),
            &f32s(&[1.0])
        )
        .is_err());
        let i = arr(ElementType::S8, &[0xff, 2]);
        let e = compare(CheckKind::Eq, &i, &arr(ElementType::S8, &[0xfe, 2])).unwrap_err();
        assert!(e.contains("actual -1 vs expected -2"), "{e}");
        let e = compare(CheckKind::Eq, &i, &arr(ElementType::U8, &[0xff, 2])).unwrap_err();
        assert!(e.contains("type mismatch"), "{e}");
        let z = arr(ElementType::C64, &[(2.0f32.to_bits() as u64) << 32]);
        let e = compare(CheckKind::Eq, &z, &arr(ElementType::C64, &[0])).unwrap_err();
        assert!(
            e.contains("actual (0.0, 2.0) vs expected (0.0, 0.0)"),
            "{e}"
        );
    }

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
