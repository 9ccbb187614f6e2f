//! `hlobridge viz`: a plan rendered to HTML, SVG (built-in layout) and DOT
//! names every segment and handle; bad input fails with the file's name.

use std::path::PathBuf;
use std::process::Command;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/stitch")
}

fn viz(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hlobridge"))
        .arg("viz")
        .args(args)
        .output()
        .expect("run hlobridge")
}

#[test]
fn plan_to_every_format() {
    let dir = std::env::temp_dir().join(format!("hlobridge-viz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = fixtures().join("chain.toml");
    for ext in ["html", "svg", "dot"] {
        let out = dir.join(format!("graph.{ext}"));
        let r = viz(&[
            plan.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--layout",
            "builtin",
        ]);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let text = std::fs::read_to_string(&out).unwrap();
        for name in [
            "torch_pre",
            "jax_act",
            "torch_post",
            "x",
            "w",
            "h",
            "a",
            "y",
            "unused_cos",
        ] {
            let quoted = [
                format!(">{name}<"),
                format!(">{name}:"),
                format!("\"{name}\\n"),
            ];
            assert!(
                quoted.iter().any(|q| text.contains(q.as_str())),
                "{ext}: {name} not named"
            );
        }
        assert!(text.contains("donated"), "{ext}: donation not marked");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn module_to_dot_on_stdout() {
    let r = viz(&[fixtures().join("jax_mid.mlir").to_str().unwrap()]);
    assert!(r.status.success());
    let dot = String::from_utf8(r.stdout).unwrap();
    assert!(
        dot.contains(r#""fn:main" -> "fn:helper" [label="call"]"#),
        "{dot}"
    );
}

#[test]
fn bad_input_names_the_file() {
    let r = viz(&["/nonexistent/plan.toml", "-o", "/tmp/x.svg"]);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("/nonexistent/plan.toml"));
    let bad = std::env::temp_dir().join(format!("hlobridge-viz-bad-{}.mlir", std::process::id()));
    std::fs::write(&bad, "module { func.func @main( }").unwrap();
    let r = viz(&[bad.to_str().unwrap()]);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains(bad.to_str().unwrap()));
    let _ = std::fs::remove_file(&bad);
    let r = viz(&[
        fixtures().join("chain.toml").to_str().unwrap(),
        "-o",
        "/tmp/x.png",
    ]);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("unknown output format"));
}
