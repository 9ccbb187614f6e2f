//! What the command line tells the user: `--help`'s summary line names
//! every subcommand, `compile -o` confirms what it wrote, and libtpu's
//! load-time stderr noise is a debug event, not terminal output.

use std::path::PathBuf;
use std::process::{Command, Output};

fn hlobridge(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hlobridge"));
    c.args(args).env_remove("HLOBRIDGE_LOG");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run hlobridge")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hlobridge_cli_msg_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

const ADD: &str = "func.func @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.add %arg0, %arg0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}
";

#[test]
fn help_summary_line_names_every_subcommand() {
    let out = hlobridge(&["--help"], &[]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    let summary = help.lines().next().unwrap();
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 8, "{help}");
    for c in &commands {
        assert!(summary.contains(c), "summary line {summary:?} omits `{c}`");
    }
}

#[test]
fn compile_output_without_report_confirms_path_bytes_and_target() {
    let m = tmp("add.mlir");
    std::fs::write(&m, ADD).unwrap();
    let exe = tmp("add.cpu.exe");
    let out = hlobridge(
        &[
            "compile",
            m.to_str().unwrap(),
            "--target",
            "cpu",
            "-o",
            exe.to_str().unwrap(),
        ],
        &[],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let bytes = std::fs::metadata(&exe).unwrap().len();
    assert!(bytes > 0);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("wrote "))
        .unwrap_or_else(|| panic!("no confirmation line: {stdout:?}"));
    assert!(line.contains(exe.to_str().unwrap()), "{line}");
    assert!(line.contains(&format!("{bytes} bytes")), "{line}");
    assert!(line.ends_with("for cpu)"), "{line}");
    // --json carries the path in the report instead (stdout stays JSON).
    let out = hlobridge(
        &[
            "compile",
            m.to_str().unwrap(),
            "--target",
            "cpu",
            "-o",
            exe.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON report");
    assert_eq!(r["output"], exe.to_str().unwrap());
    assert_eq!(r["serialized_bytes"], bytes);
}

#[test]
fn libtpu_load_noise_is_a_debug_event_not_terminal_output() {
    if pjrt_client::accel::find_libtpu().is_none() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        let opted_out = hlobridge_config::get(hlobridge_config::Var::Accel).as_deref() == Some("0");
        assert!(
            !ci || opted_out,
            "libtpu not installed; CI=true requires it"
        );
        eprintln!("skipping: libtpu not installed (scripts/setup.sh installs it into .venv/accel)");
        return;
    }
    let m = tmp("add_tpu.mlir");
    std::fs::write(&m, ADD).unwrap();
    let exe = tmp("add.tpu.exe");
    let args = [
        "compile",
        m.to_str().unwrap(),
        "--target",
        "tpu:v5e",
        "-o",
        exe.to_str().unwrap(),
    ];
    let out = hlobridge(&args, &[]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for noise in [
        "E0000",
        "unexpected worker hostname",
        "WARNING: could not determine",
    ] {
        assert!(
            !stderr.contains(noise),
            "libtpu noise on the terminal: {stderr}"
        );
    }
    assert!(text(&out.stdout).contains("executable for tpu:v5e"));
    // At debug level for the `plugin_stderr` target the lines are kept.
    let out = hlobridge(&args, &[("HLOBRIDGE_LOG", "plugin_stderr=debug")]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("plugin_stderr") && l.contains("hostname")),
        "{stderr}"
    );
}
