//! The CLI warns at startup about an unknown `HLOBRIDGE_*` variable, naming
//! the nearest known one (the table is `hlobridge-config`), and carries on.

use std::io::Write;
use std::process::{Command, Stdio};

fn fmt_with_env(name: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hlobridge"))
        .arg("fmt")
        .arg("-")
        .env(name, "1")
        .env_remove("HLOBRIDGE_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hlobridge");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"func.func @main() {\n  return\n}\n")
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn unknown_variable_warns_with_the_nearest_name() {
    let out = fmt_with_env("HLOBRIDGE_CACHE_DIRR");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "HLOBRIDGE_CACHE_DIRR is not a known variable; did you mean HLOBRIDGE_CACHE_DIR?"
        ),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("func.func @main"));
}

#[test]
fn known_variable_does_not_warn() {
    let out = fmt_with_env("HLOBRIDGE_CACHE");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("not a known variable"), "{err}");
}
