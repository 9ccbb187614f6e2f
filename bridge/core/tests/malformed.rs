//! Every malformed fixture in `tests/fixtures/malformed/` must fail to
//! parse (never panic) with an error that names file:line:col and shows a
//! caret; the rendered errors are insta snapshots.

use std::path::PathBuf;

fn fixtures() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/malformed");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "mlir"))
        .collect();
    files.sort();
    files
}

#[test]
fn malformed_inputs_give_located_errors() {
    let files = fixtures();
    assert!(
        files.len() >= 50,
        "expected at least 50 fixtures, found {}",
        files.len()
    );
    for path in files {
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        let shown = format!("malformed/{stem}.mlir");
        let err = match hlobridge::parse_module_named(&shown, &text) {
            Ok(_) => panic!("{shown}: parsed, but it is malformed"),
            Err(e) => e,
        };
        let rendered = err.to_string();
        assert!(
            rendered.starts_with(&format!("{shown}:{}:{}: error: ", err.line, err.col)),
            "{rendered}"
        );
        assert!(
            rendered.lines().count() >= 3,
            "no source line / caret: {rendered}"
        );
        insta::assert_snapshot!(stem, rendered);
    }
}
