//! Dynamic manifests (format 2): written and read back, older (format 1)
//! static artifacts still read, the shape check names the input, the dim
//! and the constraint, and a corrupted dynamic manifest -- edited fields,
//! flipped bytes, truncations -- is always a named error, never a panic.

use hlobridge_artifact::writer::{demo_artifact, demo_dynamic_artifact};
use hlobridge_artifact::{read_artifact, ArtifactError, Dim, Manifest, FORMAT, FORMAT_DYNAMIC};
use std::path::PathBuf;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hb-artifact-dyn-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn dynamic_and_static_artifacts_read_back_with_their_formats() {
    let dir = tmp("formats");
    demo_dynamic_artifact(&dir, Some(8)).unwrap();
    let v = read_artifact(&dir).unwrap();
    assert_eq!(v.manifest.format, FORMAT_DYNAMIC);
    assert!(v.manifest.is_dynamic());
    assert_eq!(
        v.manifest.batch_symbol().unwrap().constraint(),
        "2 <= batch <= 8"
    );
    assert_eq!(v.modules.len(), 1);
    demo_artifact(&dir, &[1, 4]).unwrap();
    let v = read_artifact(&dir).unwrap();
    assert_eq!(v.manifest.format, FORMAT);
    assert!(!v.manifest.is_dynamic());
    assert!(!v.manifest_text.contains("dims") && !v.manifest_text.contains("dynamic"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bucket_and_shape_check_of_a_dynamic_manifest() {
    let dir = tmp("check");
    demo_dynamic_artifact(&dir, Some(8)).unwrap();
    let m = read_artifact(&dir).unwrap().manifest;
    // Exact sizes in range; below min padded up to it (rows independent).
    assert_eq!(m.bucket_for(5), Ok(5));
    assert_eq!(m.bucket_for(1), Ok(2));
    assert!(m.bucket_for(9).unwrap_err().contains("2 <= batch <= 8"));
    assert!(m.bucket_for(0).unwrap_err().contains("batch >= 1"));
    assert_eq!(m.check_shapes(&[("x", &[5, 3])]).unwrap()["batch"], 5);
    let v = m.check_shapes(&[("x", &[5, 4])]).unwrap_err();
    assert_eq!((v.input.as_str(), v.dim), ("x", Some(1)));
    assert!(v.constraint.contains("size == 3"), "{v}");
    let v = m.check_shapes(&[("x", &[5])]).unwrap_err();
    assert_eq!(v.dim, None);
    assert!(v.to_string().contains("rank 2"), "{v}");
    let v = m.check_shapes(&[("x", &[9, 3])]).unwrap_err();
    assert_eq!(
        v.to_string(),
        "input x dim 0 is 9: violates 2 <= batch <= 8"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each edit of a valid dynamic manifest, re-serialized (the hash is not
/// updated, so the parse must refuse it first, by name).
#[test]
fn edited_dynamic_manifests_are_refused_by_name() {
    let dir = tmp("edits");
    demo_dynamic_artifact(&dir, None).unwrap();
    let text = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let good: serde_json::Value = serde_json::from_str(&text).unwrap();
    type Edit = fn(&mut serde_json::Value);
    let edits: Vec<(&str, Edit)> = vec![
        ("format 1", |m| m["format"] = FORMAT.into()),
        ("min 0", |m| m["dynamic"]["symbols"][0]["min"] = 0.into()),
        ("max < min", |m| {
            m["dynamic"]["symbols"][0]["max"] = 1.into()
        }),
        ("no symbols", |m| {
            m["dynamic"]["symbols"] = serde_json::json!([])
        }),
        ("symbols not a list", |m| {
            m["dynamic"]["symbols"] = "batch".into()
        }),
        ("a symbol twice", |m| {
            let s = m["dynamic"]["symbols"][0].clone();
            m["dynamic"]["symbols"].as_array_mut().unwrap().push(s);
        }),
        ("unknown symbol", |m| {
            m["params"][1]["dims"] = serde_json::json!(["nope", 3])
        }),
        ("rank", |m| {
            m["params"][1]["dims"] = serde_json::json!(["batch"])
        }),
        ("fixed differs", |m| {
            m["params"][1]["dims"] = serde_json::json!(["batch", 4])
        }),
        ("float dim", |m| {
            m["params"][1]["dims"] = serde_json::json!([1.5, 3])
        }),
        ("weight with a symbol", |m| {
            m["params"][0]["dims"] = serde_json::json!(["batch"])
        }),
        ("batch dim not the symbol", |m| {
            m["params"][1]["dims"] = serde_json::json!([2, 3])
        }),
        ("module with a batch", |m| {
            m["modules"][0]["batch"] = 4.into()
        }),
        ("two modules", |m| {
            let f = m["modules"][0].clone();
            m["modules"].as_array_mut().unwrap().push(f);
        }),
        ("dims without dynamic", |m| {
            m.as_object_mut().unwrap().remove("dynamic");
        }),
        ("output rank", |m| {
            m["outputs"][1]["dims"] = serde_json::json!([])
        }),
    ];
    for (what, edit) in edits {
        let mut m = good.clone();
        edit(&mut m);
        std::fs::write(
            dir.join("manifest.json"),
            serde_json::to_string_pretty(&m).unwrap(),
        )
        .unwrap();
        match read_artifact(&dir) {
            Err(ArtifactError::Manifest(_)) | Err(ArtifactError::Version(_)) => {}
            other => panic!("{what}: expected a manifest or version error, got {other:?}"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Flipped bytes and truncations anywhere in the manifest: always an
/// error, never a panic (the reader's robustness, extended to format 2).
#[test]
fn corrupted_dynamic_manifest_bytes_never_panic() {
    let dir = tmp("bytes");
    demo_dynamic_artifact(&dir, Some(16)).unwrap();
    let text = std::fs::read(dir.join("manifest.json")).unwrap();
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for k in 0..600 {
        let mut t = text.clone();
        match k % 3 {
            0 => {
                let i = next() as usize % t.len();
                t[i] ^= 1 << (next() % 8);
            }
            1 => {
                let i = next() as usize % t.len();
                let set = b"{}[]\",:0-9e \x00\xff";
                t[i] = set[next() as usize % set.len()];
            }
            _ => t.truncate(next() as usize % t.len()),
        }
        if t == text {
            continue;
        }
        std::fs::write(dir.join("manifest.json"), &t).unwrap();
        assert!(read_artifact(&dir).is_err(), "mutation {k} was accepted");
        if let Ok(s) = std::str::from_utf8(&t) {
            // The parse alone (no hash) never panics either.
            let _ = Manifest::parse(s);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dims_serialize_as_numbers_and_names() {
    let d: Vec<Dim> = serde_json::from_str(r#"["batch", 3]"#).unwrap();
    assert_eq!(d, vec![Dim::Symbol("batch".into()), Dim::Fixed(3)]);
    assert_eq!(serde_json::to_string(&d).unwrap(), r#"["batch",3]"#);
}
