//! The runtime crate end to end on the CPU plugin: load a tiny artifact,
//! run it (exact and padded batches), refuse tampered files, wrong versions
//! and bad inputs with named errors, and survive malformed safetensors.

use hlobridge_deploy::writer::demo_artifact;
use hlobridge_deploy::{safetensors, ArtifactError, DeployError, Model, TensorRef};
use pjrt_client::ElementType;

mod common;
use common::{bytes, run_and_check, Lcg};

fn tmp(name: &str) -> tempfile::TempDir {
    common::tmp("deploy", name)
}

#[test]
fn runs_exact_and_padded_batches() {
    let dir = tmp("run");
    demo_artifact(dir.path(), &[1, 4]).unwrap();
    let model = Model::load(dir.path()).unwrap();
    assert_eq!(model.batch_sizes(), vec![1, 4]);
    let mut g = Lcg(7);
    for b in [1i64, 2, 3, 4] {
        run_and_check(&model, &g.f32s(b as usize * 3), b);
    }
}

#[test]
fn runs_without_batch_dim() {
    let dir = tmp("nobatch");
    demo_artifact(dir.path(), &[]).unwrap();
    let model = Model::load(dir.path()).unwrap();
    let mut g = Lcg(3);
    run_and_check(&model, &g.f32s(6), 2);
    let x = bytes(&g.f32s(3));
    let e = model.run(&[(
        "x",
        TensorRef {
            dtype: ElementType::F32,
            shape: &[1, 3],
            data: &x,
        },
    )]);
    assert!(matches!(e, Err(DeployError::BadInput(_))), "{e:?}");
}

#[test]
fn bad_inputs_are_named_errors() {
    let dir = tmp("bad");
    demo_artifact(dir.path(), &[2]).unwrap();
    let model = Model::load(dir.path()).unwrap();
    let x = bytes(&[0.5; 6]);
    let good = TensorRef {
        dtype: ElementType::F32,
        shape: &[2, 3],
        data: &x,
    };
    let cases: Vec<Vec<(&str, TensorRef)>> = vec![
        vec![],
        vec![("x", good), ("secret-value", good)],
        vec![(
            "x",
            TensorRef {
                dtype: ElementType::F64,
                ..good
            },
        )],
        vec![(
            "x",
            TensorRef {
                shape: &[2, 4],
                ..good
            },
        )],
        vec![(
            "x",
            TensorRef {
                shape: &[3, 3],
                ..good
            },
        )],
        vec![(
            "x",
            TensorRef {
                data: &x[..20],
                ..good
            },
        )],
        vec![("x", good), ("x", good)],
    ];
    for c in cases {
        match model.run(&c) {
            Err(DeployError::BadInput(msg)) => assert!(!msg.contains("secret-value"), "{msg}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(model.run(&[("x", good)]).is_ok());
}

#[test]
fn tampered_or_foreign_artifacts_are_refused() {
    let dir = tmp("tamper");
    demo_artifact(dir.path(), &[2]).unwrap();
    let wpath = dir.path().join("weights.safetensors");
    let mut w = std::fs::read(&wpath).unwrap();
    let n = w.len();
    w[n - 1] ^= 1;
    std::fs::write(&wpath, &w).unwrap();
    assert!(matches!(
        Model::load(dir.path()),
        Err(DeployError::Artifact(ArtifactError::HashMismatch { .. }))
    ));

    demo_artifact(dir.path(), &[2]).unwrap();
    let mpath = dir.path().join("module.b2.mlir");
    let t = std::fs::read_to_string(&mpath).unwrap();
    std::fs::write(&mpath, t.replace("multiply", "subtract")).unwrap();
    assert!(matches!(
        Model::load(dir.path()),
        Err(DeployError::Artifact(ArtifactError::HashMismatch { .. }))
    ));

    demo_artifact(dir.path(), &[2]).unwrap();
    let man = dir.path().join("manifest.json");
    let t = std::fs::read_to_string(&man).unwrap();
    std::fs::write(&man, t.replace(env!("CARGO_PKG_VERSION"), "99.0.0")).unwrap();
    assert!(matches!(
        Model::load(dir.path()),
        Err(DeployError::Artifact(ArtifactError::Version(_)))
    ));
    std::fs::write(
        &man,
        t.replace("hlobridge-artifact/1", "hlobridge-artifact/9"),
    )
    .unwrap();
    assert!(matches!(
        Model::load(dir.path()),
        Err(DeployError::Artifact(ArtifactError::Version(_)))
    ));
    std::fs::write(&man, t.replace("\"weights.safetensors\"", "\"../x\"")).unwrap();
    assert!(matches!(
        Model::load(dir.path()),
        Err(DeployError::Artifact(ArtifactError::Manifest(_)))
    ));
    std::fs::write(&man, "{not json").unwrap();
    assert!(matches!(
        Model::load(dir.path()),
        Err(DeployError::Artifact(ArtifactError::Manifest(_)))
    ));
    std::fs::remove_file(&man).unwrap();
    assert!(matches!(
        Model::load(dir.path()),
        Err(DeployError::Artifact(ArtifactError::Io { .. }))
    ));
}

#[test]
fn safetensors_round_trip() {
    let a = bytes(&[1.0, 2.0]);
    let b = [1u8, 0, 1];
    let f = safetensors::write(&[
        ("a", ElementType::F32, &[2], &a),
        ("b", ElementType::Pred, &[3], &b),
    ])
    .unwrap();
    let p = safetensors::parse(&f).unwrap();
    assert_eq!(&f[p["a"].range.clone()], &a[..]);
    assert_eq!(&f[p["b"].range.clone()], &b[..]);
    assert_eq!(p["b"].shape, vec![3]);
}

#[test]
fn malformed_safetensors_never_panic() {
    let a = bytes(&[1.0, 2.0, 3.0, 4.0]);
    let good = safetensors::write(&[
        ("a", ElementType::F32, &[2, 2], &a),
        ("b", ElementType::S64, &[1], &[7u8; 8]),
    ])
    .unwrap();
    let hdr = |h: &str, data: usize| {
        let mut v = (h.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(h.as_bytes());
        v.extend(std::iter::repeat_n(0u8, data));
        v
    };
    let fixed: Vec<Vec<u8>> = vec![
        vec![],
        vec![1, 2, 3],
        u64::MAX.to_le_bytes().to_vec(),
        200u64.to_le_bytes().to_vec(),
        hdr("[]", 0),
        hdr("{\"a\": 3}", 0),
        hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4),
        hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", 4),
        hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 99]}}", 4),
        hdr("{\"a\": {\"dtype\": \"X9\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4),
        hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4),
        hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [4611686018427387904, 4], \"data_offsets\": [0, 4]}}", 4),
        hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, \"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 8),
        hdr("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 5),
        hdr("{\"__metadata__\": 1}", 0),
    ];
    for f in &fixed {
        assert!(
            matches!(safetensors::parse(f), Err(ArtifactError::Safetensors(_))),
            "{f:?}"
        );
    }
    let mut g = Lcg(11);
    for i in 0..20_000 {
        let mut f = good.clone();
        match i % 3 {
            0 => f.truncate((g.next() as usize) % f.len()),
            1 => {
                for _ in 0..1 + g.next() % 4 {
                    let k = (g.next() as usize) % f.len();
                    f[k] = g.next() as u8;
                }
            }
            _ => {
                let k = (g.next() as usize) % f.len();
                f.insert(k, g.next() as u8);
            }
        }
        // Must return (Ok or a named error), never panic.
        let _ = safetensors::parse(&f);
    }
}

#[test]
fn a_result_without_the_batch_rows_is_an_execution_error_not_a_panic() {
    use hlobridge_deploy::writer::demo_row_sum_artifact;
    let dir = tmp("rowsum");
    demo_row_sum_artifact(dir.path(), &[1, 4], None).unwrap();
    let model = Model::load(dir.path()).unwrap();
    let x = bytes(&[1.0; 6]);
    let two = TensorRef {
        dtype: ElementType::F32,
        shape: &[2, 3],
        data: &x,
    };
    // Padded to 4 rows; the result has 1: slicing rows 0..2 would panic.
    match model.run(&[("x", two)]) {
        Err(DeployError::Execution(msg)) => assert!(msg.contains("output t"), "{msg}"),
        other => panic!("{other:?}"),
    }
    // The model still runs what it can.
    let one = TensorRef {
        shape: &[1, 3],
        data: &x[..12],
        ..two
    };
    assert!(model.run(&[("x", one)]).is_ok());
}

#[test]
fn rows_found_dependent_are_neither_padded_nor_batched() {
    use hlobridge_deploy::writer::demo_row_sum_artifact;
    use hlobridge_deploy::Prepared;
    let dir = tmp("dependent");
    demo_row_sum_artifact(dir.path(), &[1, 4], Some(false)).unwrap();
    let model = Model::load(dir.path()).unwrap();
    let x = bytes(&[1.0; 12]);
    let t = |b: i64| TensorRef {
        dtype: ElementType::F32,
        shape: if b == 1 { &[1, 3] } else { &[2, 3] },
        data: &x[..b as usize * 12],
    };
    match model.run(&[("x", t(2))]) {
        Err(DeployError::BadInput(msg)) => assert!(msg.contains("not independent"), "{msg}"),
        other => panic!("{other:?}"),
    }
    let p = |b| Prepared {
        inputs: vec![t(b)],
        batch: Some(b),
    };
    assert!(matches!(
        model.run_batch(&[p(1), p(1)]),
        Err(DeployError::BadInput(_))
    ));
    assert!(model.run(&[("x", t(1))]).is_ok());
}
