//! A reader that closes stdout early (`hlobridge inspect --json m | head`)
//! ends the output quietly: exit status 0, no panic message.

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn fixture() -> PathBuf {
    let body: String = (0..2000)
        .map(|i| format!("    %{} = stablehlo.add %arg0, %arg0 : tensor<4xf32>\n", i))
        .collect();
    let text = format!(
        "func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {{\n{body}    return %arg0 : tensor<4xf32>\n}}\n"
    );
    let dir = std::env::temp_dir().join(format!("hlobridge-broken-pipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("m.mlir");
    std::fs::write(&f, text).unwrap();
    f
}

#[test]
fn closed_stdout_is_not_a_crash() {
    let f = fixture();
    for args in [vec!["inspect", "--json"], vec!["inspect"], vec!["fmt"]] {
        // The read end is closed before the child writes anything, so every
        // write fails with EPIPE whatever the timing.
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_hlobridge"))
            .args(&args)
            .arg(&f)
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()
            .expect("spawn hlobridge");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?}\n{err}", out.status);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
