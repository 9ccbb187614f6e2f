//! End-to-end tests of `hlobridge conform` and `hlobridge run` against the
//! CPU PJRT plugin (found by discovery, e.g. in the repository's `.venv`).
//!
//! * the whole static StableHLO testdata suite (2,325 modules), run
//!   differentially: hlobridge must pass every file the raw plugin passes on
//!   this machine and fail the others the same way, and the known XLA
//!   failures list (`known_xla_failures.toml`) must stay true; plus a fast
//!   differential sample of 20 files, from the shared corpus (skipped with a
//!   message if the corpus is missing);
//! * failure reporting on small inline modules, and the differential
//!   verdicts and the known-failures list on a tiny fake suite;
//! * `run`: `.npy` inputs and outputs checked against numpy (the venv's
//!   python; skipped with a message if missing), binding by name and index,
//!   and input errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Static modules in the suite.
const STATIC_TOTAL: usize = 2325;
/// A floor on the raw plugin's passes, only to catch a broken plugin or a
/// broken raw path (the real assertion is differential: XLA:CPU's own
/// numerics depend on the CPU, 2,318 or 2,319 pass on the machines seen).
const RAW_SANITY_FLOOR: usize = 2300;

/// The known XLA failures list.
fn known_list() -> PathBuf {
    manifest().join("tests/known_xla_failures.toml")
}

/// File names in the known failures list (kept out of the fast sample).
fn known_failing() -> Vec<String> {
    std::fs::read_to_string(known_list())
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("file = \""))
        .map(|l| l.trim_end_matches('"').to_string())
        .collect()
}

fn manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn corpus() -> Option<PathBuf> {
    let p = manifest().join("../../../shared/corpus/stablehlo-testdata");
    if p.is_dir() {
        Some(p)
    } else {
        eprintln!("skipping: StableHLO testdata not found at {}", p.display());
        None
    }
}

fn python() -> Option<PathBuf> {
    let p = manifest().join("../../.venv/bin/python");
    let ok = p.exists()
        && Command::new(&p)
            .args(["-c", "import numpy, ml_dtypes"])
            .status()
            .is_ok_and(|s| s.success());
    if ok {
        Some(p)
    } else {
        eprintln!(
            "skipping: no python with numpy and ml_dtypes at {}",
            p.display()
        );
        None
    }
}

fn hlobridge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hlobridge"))
        .args(args)
        .current_dir(manifest())
        .output()
        .expect("spawn hlobridge")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A fresh scratch directory under the target dir.
fn scratch(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "hlobridge-conformance-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `(passed, failed, skipped)` from the final line, which must have the
/// documented exact form.
fn final_counts(stdout: &str) -> (usize, usize, usize) {
    let last = stdout.lines().last().unwrap_or_default();
    let nums: Vec<usize> = last
        .split(", ")
        .map(|p| {
            let (n, word) = p.split_once(' ').expect("N word");
            assert!(
                ["passed", "failed", "skipped"].contains(&word),
                "final line: {last}"
            );
            n.parse().expect("count")
        })
        .collect();
    assert!(nums.len() == 2 || nums.len() == 3, "final line: {last}");
    (nums[0], nums[1], nums.get(2).copied().unwrap_or(0))
}

/// The `raw plugin: ...` counts of a differential run.
fn raw_counts(stdout: &str) -> (usize, usize, usize) {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("raw plugin: "))
        .unwrap_or_else(|| panic!("no raw plugin line:\n{stdout}"));
    final_counts(line)
}

/// Checks the summary of a differential run over files that include no
/// hlobridge-only failure: every hlobridge failure is XLA's own.
fn assert_differentially_clean(out: &str, total: usize) {
    let (passed, failed, skipped) = final_counts(out);
    assert_eq!(passed + failed + skipped, total, "{out}");
    let (rp, rf, rs) = raw_counts(out);
    assert_eq!(rp + rf + rs, total, "{out}");
    assert!(
        out.contains("differential: 0 hlobridge-only failure(s)"),
        "{}",
        out.lines()
            .filter(|l| !l.starts_with("PASS"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(!out.contains("HLOBRIDGE-ONLY"), "{out}");
    // So hlobridge passes every file the raw plugin passes.
    assert!(passed >= rp, "hlobridge {passed} passes, raw plugin {rp}");
    let fails: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(fails.len(), failed, "{out}");
}

#[test]
fn static_suite_is_differentially_clean() {
    let Some(dir) = corpus() else { return };
    let t0 = std::time::Instant::now();
    let list = known_list();
    let o = hlobridge(&[
        "conform",
        dir.to_str().unwrap(),
        "--exclude",
        "dynamic/",
        "--exclude",
        "quantized/",
        "--differential",
        "--known-failures",
        list.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    eprintln!(
        "differential conform on the static suite took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let summary: Vec<&str> = out.lines().filter(|l| !l.starts_with("PASS")).collect();
    let summary = summary.join("\n");
    eprintln!("{summary}");
    // Exit 0: no hlobridge-only failure and no stale known failure.
    assert!(o.status.success(), "{:?}\n{err}\n{summary}", o.status);
    assert_differentially_clean(&out, STATIC_TOTAL);
    let (raw_passed, _, _) = raw_counts(&out);
    assert!(
        raw_passed >= RAW_SANITY_FLOOR,
        "only {raw_passed} files pass on the raw plugin: is the plugin or the raw path broken?\n{summary}"
    );
    assert!(out.contains(" 0 stale"), "{summary}");
    assert!(!out.contains("STALE "), "{summary}");
}

/// Every suite module with a matrix product, run with all eligible
/// products sent to the host GEMM kernels (`HLOBRIDGE_HOST_GEMM=all`):
/// they must all pass, and some products must actually have been rewritten.
#[test]
fn products_pass_through_the_host_gemm_kernels() {
    let Some(dir) = corpus() else { return };
    let work = scratch("gemm");
    let mut linked = 0;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "mlir") {
            continue;
        }
        let t = std::fs::read_to_string(&p).unwrap_or_default();
        if t.contains("stablehlo.dot_general") || t.contains("stablehlo.dot ") {
            std::os::unix::fs::symlink(&p, work.join(p.file_name().unwrap())).unwrap();
            linked += 1;
        }
    }
    assert!(
        linked > 50,
        "only {linked} modules with products in the suite"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_hlobridge"))
        .args(["conform", work.to_str().unwrap()])
        .env("HLOBRIDGE_HOST_GEMM", "all")
        .env("HLOBRIDGE_LOG", "hlobridge::lower=debug")
        .env("NO_COLOR", "1")
        .output()
        .expect("spawn hlobridge");
    let (out, err) = text(&o);
    let (passed, failed, _) = final_counts(&out);
    assert_eq!((passed, failed), (linked, 0), "{out}");
    let rewritten = err
        .lines()
        .filter(|l| l.contains("host GEMM rewrite"))
        .count();
    assert!(
        rewritten >= 15,
        "only {rewritten} modules used the host GEMM kernels:\n{err}"
    );
    let _ = std::fs::remove_dir_all(&work);
}

#[test]
fn sampled_files_pass() {
    let Some(dir) = corpus() else { return };
    let known = known_failing();
    assert!(known.len() >= 7, "{known:?}");
    let mut all: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "mlir")
                && !known
                    .iter()
                    .any(|k| k == p.file_name().unwrap().to_str().unwrap())
        })
        .collect();
    all.sort();
    let step = all.len() / 20;
    let sample = scratch("sample");
    for p in all.iter().step_by(step).take(20) {
        std::fs::copy(p, sample.join(p.file_name().unwrap())).unwrap();
    }
    let t0 = std::time::Instant::now();
    let o = hlobridge(&[
        "conform",
        sample.to_str().unwrap(),
        "--jobs",
        "2",
        "-v",
        "--differential",
    ]);
    eprintln!(
        "differential conform on 20 files took {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}\n{out}");
    assert_eq!(final_counts(&out), (20, 0, 0), "{out}");
    assert_eq!(raw_counts(&out), (20, 0, 0), "{out}");
    assert_differentially_clean(&out, 20);
    assert_eq!(out.lines().filter(|l| l.starts_with("PASS")).count(), 20);
    assert!(out.contains("by directory:"));
    let _ = std::fs::remove_dir_all(sample);
}

const GOOD: &str = r#"module @ok {
  func.func public @main() -> tensor<3xf32> {
    %0 = "stablehlo.constant"() <{value = dense<[1.0, -2.0, 0x7FC00000]> : tensor<3xf32>}> : () -> tensor<3xf32>
    %1 = "stablehlo.abs"(%0) : (tensor<3xf32>) -> tensor<3xf32>
    %2 = "stablehlo.constant"() <{value = dense<[1.0, 2.0, 0x7FC00000]> : tensor<3xf32>}> : () -> tensor<3xf32>
    "stablehlo.custom_call"(%1, %2) <{call_target_name = "check.expect_eq", has_side_effect = true}> : (tensor<3xf32>, tensor<3xf32>) -> ()
    "stablehlo.custom_call"(%1, %2) <{call_target_name = "check.expect_close", has_side_effect = true}> : (tensor<3xf32>, tensor<3xf32>) -> ()
    "func.return"(%1) : (tensor<3xf32>) -> ()
  }
}
"#;

#[test]
fn failures_are_reported_not_fatal() {
    let dir = scratch("report");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("a_good.mlir"), GOOD).unwrap();
    // Wrong expectation at index 1.
    std::fs::write(
        dir.join("b_wrong.mlir"),
        GOOD.replace("[1.0, 2.0, 0x7FC00000]", "[1.0, 2.5, 0x7FC00000]"),
    )
    .unwrap();
    std::fs::write(dir.join("sub/c_garbage.mlir"), "module {\n  %0 = = \n}\n").unwrap();
    std::fs::write(
        dir.join("sub/d_uncompilable.mlir"),
        GOOD.replace("\"stablehlo.abs\"", "\"stablehlo.not_an_op\""),
    )
    .unwrap();
    std::fs::write(
        dir.join("sub/e_inputs.mlir"),
        "func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n  \"func.return\"(%a) : (tensor<2xf32>) -> ()\n}\n",
    )
    .unwrap();
    let o = hlobridge(&["conform", dir.to_str().unwrap(), "--jobs", "2"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}\n{out}");
    assert_eq!(final_counts(&out), (1, 3, 1), "{out}");
    assert!(
        out.contains("FAIL b_wrong.mlir: 2 of 2 checks failed"),
        "{out}"
    );
    assert!(
        out.contains("check.expect_eq #0 (line 6): 1 of 3 elements differ (eq); first at index [1]: actual 2.0 vs expected 2.5"),
        "{out}"
    );
    assert!(
        out.contains("FAIL sub/c_garbage.mlir: parse error: sub/c_garbage.mlir:2:"),
        "{out}"
    );
    assert!(
        out.contains("FAIL sub/d_uncompilable.mlir: compile error:"),
        "{out}"
    );
    assert!(
        out.contains("SKIP sub/e_inputs.mlir: skipped: entry takes 1 input(s)"),
        "{out}"
    );
    assert!(out.contains("  .    1 passed, 1 failed"), "{out}");
    assert!(
        out.contains("  sub  0 passed, 2 failed, 1 skipped"),
        "{out}"
    );
    // Results come in path order.
    let b = out.find("FAIL b_wrong").unwrap();
    let c = out.find("FAIL sub/c_garbage").unwrap();
    assert!(b < c);

    let o = hlobridge(&[
        "conform",
        dir.to_str().unwrap(),
        "--filter",
        "good",
        "--allow-failures",
    ]);
    assert!(o.status.success());
    assert_eq!(final_counts(&text(&o).0), (1, 0, 0));
    let _ = std::fs::remove_dir_all(dir);
}

/// A differential run on a tiny fake suite: failures XLA shares are not
/// held against hlobridge, and the known failures list is checked against
/// the raw plugin (a listed file that passes raw is STALE unless it is
/// marked CPU-dependent).
#[test]
fn differential_verdicts_and_known_failures_list() {
    let dir = scratch("differential");
    let suite = dir.join("suite");
    std::fs::create_dir_all(suite.join("sub")).unwrap();
    std::fs::write(suite.join("a_good.mlir"), GOOD).unwrap();
    std::fs::write(
        suite.join("b_wrong.mlir"),
        GOOD.replace("[1.0, 2.0, 0x7FC00000]", "[1.0, 2.5, 0x7FC00000]"),
    )
    .unwrap();
    std::fs::write(suite.join("sub/c_garbage.mlir"), "module {\n  %0 = = \n}\n").unwrap();
    let list = |cpu_dependent: bool| {
        let p = dir.join(format!("list-{cpu_dependent}.toml"));
        std::fs::write(
            &p,
            format!(
                "[[failure]]\nfile = \"b_wrong.mlir\"\nreason = \"wrong expectation\"\n\n\
                 [[failure]]\nfile = \"a_good.mlir\"\nreason = \"listed by mistake\"\ncpu_dependent = {cpu_dependent}\n\n\
                 [[failure]]\nfile = \"not_here.mlir\"\nreason = \"elsewhere\"\n"
            ),
        )
        .unwrap();
        p
    };
    let conform = |extra: &[&str]| {
        let mut args = vec!["conform", suite.to_str().unwrap(), "--jobs", "2"];
        args.extend_from_slice(extra);
        let o = hlobridge(&args);
        let (out, err) = text(&o);
        (o.status.code(), out, err)
    };

    // A listed file that passes on the raw plugin: stale, exit 1.
    let stale = list(false);
    let (code, out, err) = conform(&[
        "--differential",
        "--known-failures",
        stale.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{err}\n{out}");
    assert!(out.contains("STALE a_good.mlir: listed in"), "{out}");
    assert!(
        out.contains("(listed by mistake) but passes on the raw plugin"),
        "{out}"
    );
    assert!(
        out.contains("    raw plugin: fails the same way (known XLA failure: wrong expectation)"),
        "{out}"
    );
    // hlobridge's parse error and the plugin's parse (compile) error are
    // the same refusal.
    assert!(
        out.contains("FAIL sub/c_garbage.mlir: parse error"),
        "{out}"
    );
    assert!(
        out.contains("    raw plugin: fails the same way\n"),
        "{out}"
    );
    assert!(
        out.contains("differential: 0 hlobridge-only failure(s), 2 same on both paths, 0 raw-only failure(s); outputs bitwise identical in 2 of 2 file(s)"),
        "{out}"
    );
    assert!(out.contains("raw plugin: 1 passed, 2 failed"), "{out}");
    assert!(
        out.contains("known XLA failures: 1 failing as listed, 0 CPU-dependent passing here, 1 stale, 1 not in this run; 1 unlisted raw failure(s): sub/c_garbage.mlir"),
        "{out}"
    );
    assert_eq!(final_counts(&out), (1, 2, 0));

    // The same entry marked CPU-dependent may pass: exit 0.
    let cpu = list(true);
    let (code, out, err) = conform(&["--differential", "--known-failures", cpu.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}\n{out}");
    assert!(
        out.contains("1 CPU-dependent passing here, 0 stale"),
        "{out}"
    );
    assert!(!out.contains("STALE"), "{out}");

    // Without --differential the same failures count against hlobridge.
    let (code, out, _) = conform(&[]);
    assert_eq!(code, Some(1));
    assert!(!out.contains("raw plugin"), "{out}");

    // Usage and list errors are named.
    let (code, _, err) = conform(&["--known-failures", cpu.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--differential"), "{err}");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[[failure]]\nfile = \"x.mlir\"\n").unwrap();
    let (code, _, err) = conform(&["--differential", "--known-failures", bad.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("bad.toml") && err.contains("reason"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

const RUN_MODULE: &str = r#"module @run_test {
  func.func public @main(%x: tensor<2x3xf32>, %n: tensor<3xi32> {jax.arg_info = "counts"}, %h: tensor<4xbf16>) -> (tensor<2x3xf32>, tensor<3xi32>, tensor<4xbf16>) {
    %0 = "stablehlo.sine"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %1 = "stablehlo.add"(%0, %0) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %2 = "stablehlo.multiply"(%n, %n) : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>
    %3 = "stablehlo.abs"(%h) : (tensor<4xbf16>) -> tensor<4xbf16>
    "func.return"(%1, %2, %3) : (tensor<2x3xf32>, tensor<3xi32>, tensor<4xbf16>) -> ()
  }
}
"#;

const PY_INPUTS: &str = r#"
import sys, numpy as np, ml_dtypes
d = sys.argv[1]
rng = np.random.default_rng(7)
np.save(f"{d}/x.npy", rng.standard_normal((2, 3)).astype(np.float32))
np.save(f"{d}/x_fortran.npy", np.asfortranarray(np.load(f"{d}/x.npy")))
np.save(f"{d}/n.npy", np.array([3, -4, 5], dtype=np.int32))
np.save(f"{d}/h.npy", np.array([-1.5, 2.0, -0.0, 3.25], dtype=ml_dtypes.bfloat16))
np.save(f"{d}/bad_shape.npy", np.zeros((3, 2), np.float32))
np.save(f"{d}/bad_dtype.npy", np.zeros((2, 3), np.float64))
"#;

const PY_CHECK: &str = r#"
import sys, numpy as np, ml_dtypes
d, out = sys.argv[1], sys.argv[2]
x = np.load(f"{d}/x.npy"); n = np.load(f"{d}/n.npy"); h = np.load(f"{d}/h.npy").view(ml_dtypes.bfloat16)
y0 = np.load(f"{out}/0.npy"); y1 = np.load(f"{out}/1.npy"); y2 = np.load(f"{out}/2.npy")
assert y0.dtype == np.float32 and y0.shape == (2, 3), (y0.dtype, y0.shape)
assert np.allclose(y0, 2 * np.sin(x), rtol=1e-6, atol=1e-6), (y0, 2 * np.sin(x))
assert y1.dtype == np.int32 and (y1 == n * n).all(), y1
assert y2.dtype.str == "|V2" or y2.dtype.str == "<V2", y2.dtype.str
assert (y2.view(ml_dtypes.bfloat16).astype(np.float32) == np.abs(h.astype(np.float32))).all()
print("ok")
"#;

fn run_setup() -> Option<(PathBuf, PathBuf, PathBuf)> {
    let py = python()?;
    let dir = scratch("run");
    let st = Command::new(&py)
        .args(["-c", PY_INPUTS, dir.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    let module = dir.join("m.mlir");
    std::fs::write(&module, RUN_MODULE).unwrap();
    Some((py, dir, module))
}

fn arg(dir: &Path, key: &str, file: &str) -> String {
    format!("{key}={}", dir.join(file).display())
}

#[test]
fn run_round_trips_npy_against_numpy() {
    let Some((py, dir, module)) = run_setup() else {
        return;
    };
    // Bind by SSA name, by jax.arg_info name and by index; x in Fortran order.
    for (xkey, xfile, nkey, hkey) in [
        ("x", "x.npy", "counts", "2"),
        ("0", "x_fortran.npy", "1", "arg2"),
    ] {
        let out = dir.join(format!("out-{xkey}"));
        let o = hlobridge(&[
            "run",
            module.to_str().unwrap(),
            "--input",
            &arg(&dir, xkey, xfile),
            "--input",
            &arg(&dir, nkey, "n.npy"),
            "-i",
            &arg(&dir, hkey, "h.npy"),
            "--out",
            out.to_str().unwrap(),
        ]);
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{stderr}\n{stdout}");
        for want in [
            "plugin: ",
            "platform: cpu",
            "devices: 1",
            "compile: ",
            "run: ",
            "output 0: tensor<2x3xf32> -> ",
            "output 1: tensor<3xi32>",
            "output 2: tensor<4xbf16>",
        ] {
            assert!(
                stdout.contains(want),
                "missing {want:?} in receipt:\n{stdout}"
            );
        }
        let check = Command::new(&py)
            .args(["-c", PY_CHECK, dir.to_str().unwrap(), out.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
    // JSON receipt.
    let o = hlobridge(&[
        "run",
        module.to_str().unwrap(),
        "--json",
        "-i",
        &arg(&dir, "0", "x.npy"),
        "-i",
        &arg(&dir, "1", "n.npy"),
        "-i",
        &arg(&dir, "2", "h.npy"),
    ]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stdout.starts_with('{') && stdout.contains("\"compile_ms\""),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn run_reports_bad_inputs() {
    let Some((_py, dir, module)) = run_setup() else {
        return;
    };
    let m = module.to_str().unwrap();
    let good = [arg(&dir, "1", "n.npy"), arg(&dir, "2", "h.npy")];
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![arg(&dir, "0", "missing.npy")],
            "missing.npy: No such file",
        ),
        (
            vec![arg(&dir, "x", "bad_shape.npy")],
            "shape [3, 2] does not match parameter 0",
        ),
        (
            vec![arg(&dir, "x", "bad_dtype.npy")],
            "dtype '<f8' does not match the parameter's element type f32",
        ),
        (
            vec![arg(&dir, "nope", "x.npy")],
            "nope: unknown input name; parameters are: arg0/x, arg1/n/counts, arg2/h",
        ),
        (
            vec![arg(&dir, "7", "x.npy")],
            "parameter index out of range",
        ),
        (vec!["x".to_string()], "expected NAME_OR_INDEX=FILE.npy"),
        (vec![arg(&dir, "1", "n.npy")], "parameter 0 is bound twice"),
        (
            vec![],
            "missing input for parameter 0 (arg0 / x: tensor<2x3xf32>)",
        ),
    ];
    for (extra, want) in cases {
        let mut args = vec!["run".to_string(), m.to_string()];
        let mut binds: Vec<String> = extra.clone();
        if want.contains("bound twice") {
            binds = vec![arg(&dir, "x", "x.npy"), arg(&dir, "0", "x.npy")];
        } else if !want.contains("missing input") {
            binds.extend(good.iter().cloned());
        }
        for b in binds {
            args.push("--input".into());
            args.push(b);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = hlobridge(&refs);
        let (stdout, stderr) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{want}: {stdout}{stderr}");
        assert!(stderr.contains(want), "want {want:?}, got:\n{stderr}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn run_multi_device_needs_devices() {
    let dir = scratch("devices");
    let module = dir.join("two.mlir");
    std::fs::write(
        &module,
        r#"module @two attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> tensor<2xi32> {
    %0 = "stablehlo.constant"() <{value = dense<[7, 8]> : tensor<2xi32>}> : () -> tensor<2xi32>
    "func.return"(%0) : (tensor<2xi32>) -> ()
  }
}
"#,
    )
    .unwrap();
    let m = module.to_str().unwrap();
    let o = hlobridge(&["run", m]);
    let (_, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr.contains("the module needs 2 devices"), "{stderr}");
    assert!(stderr.contains("pass --devices 2"), "{stderr}");
    let out = dir.join("out");
    let o = hlobridge(&["run", m, "--devices", "2", "--out", out.to_str().unwrap()]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.contains("devices: 2"), "{stdout}");
    assert!(stdout.contains("output 0: tensor<2xi32> -> "), "{stdout}");
    let bytes = std::fs::read(out.join("0.npy")).unwrap();
    assert!(bytes.ends_with(&[7, 0, 0, 0, 8, 0, 0, 0]));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn run_applies_xla_options() {
    let dir = scratch("xla-option");
    let module = dir.join("c.mlir");
    std::fs::write(
        &module,
        "func.func @main() -> tensor<2xf32> {\n  %0 = stablehlo.constant dense<[1.5, -2.0]> : tensor<2xf32>\n  %1 = stablehlo.exponential %0 : tensor<2xf32>\n  return %1 : tensor<2xf32>\n}\n",
    )
    .unwrap();
    let m = module.to_str().unwrap();
    let o = hlobridge(&["run", m]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stdout.contains("compile options: plugin defaults + xla_cpu_enable_fast_min_max=false\n"),
        "{stdout}"
    );
    let o = hlobridge(&["run", m, "--xla-option", "xla_cpu_enable_fast_math=false"]);
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stdout.contains(
            "compile options: plugin defaults + xla_cpu_enable_fast_min_max=false, \
             xla_cpu_enable_fast_math=false"
        ),
        "{stdout}"
    );
    // The plugin names options it does not know; malformed ones are ours.
    let o = hlobridge(&["run", m, "--xla-option", "xla_no_such_option=1"]);
    let (_, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr.contains("xla_no_such_option"), "{stderr}");
    let o = hlobridge(&["run", m, "--xla-option", "novalue"]);
    let (_, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr.contains("expected NAME=VALUE"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}
