//! A dynamic artifact (ONE module with `?` dims, format 2) on the CPU
//! plugin: several batch sizes run at their exact size through one
//! refinement + compile each (cached), sizes below the batch symbol's `min`
//! are padded up to it, and shapes that break the constraints are named
//! errors naming the dimension and the constraint; a static artifact still
//! loads beside it.

use hlobridge_deploy::writer::{demo_artifact, demo_dynamic_artifact};
use hlobridge_deploy::{DeployError, Model, Prepared, TensorRef};
use pjrt_client::ElementType;

mod common;
use common::{bytes, check, values};

fn tmp(name: &str) -> tempfile::TempDir {
    common::tmp("deploy-dyn", name)
}

fn run(model: &Model, x: &[f32], b: i64) -> Result<Vec<hlobridge_deploy::Tensor>, DeployError> {
    common::run(model, x, b).map(|o| o.into_iter().map(|(_, t)| t).collect())
}

#[test]
fn one_module_serves_every_batch_size_at_its_exact_size() {
    let dir = tmp("sizes");
    demo_dynamic_artifact(dir.path(), None).unwrap();
    let text = std::fs::read_to_string(dir.path().join("manifest.json")).unwrap();
    assert!(text.contains("hlobridge-artifact/2"), "{text}");
    let model = Model::load(dir.path()).unwrap();
    assert!(model.is_dynamic());
    assert!(model.batch_sizes().is_empty());
    // Load compiled the example's shape (batch 2).
    assert_eq!(model.shape_stats().unwrap().refinements, 1);
    let sizes = [3i64, 2, 7, 16, 3, 33, 7];
    for (k, &b) in sizes.iter().enumerate() {
        let x = values(100 + k as u64, b as usize * 3);
        check(&run(&model, &x, b).unwrap(), &x, b);
    }
    // One refinement per new size (2 at load, then 3, 7, 16, 33).
    assert_eq!(model.shape_stats().unwrap().refinements, 5);
    // Batch 1 is below the symbol's min (2): padded to 2, sliced back.
    let x = values(7, 3);
    check(&run(&model, &x, 1).unwrap(), &x, 1);
    assert_eq!(model.shape_stats().unwrap().refinements, 5);
}

#[test]
fn merged_requests_run_as_one_exact_batch() {
    let dir = tmp("merge");
    demo_dynamic_artifact(dir.path(), Some(8)).unwrap();
    let model = Model::load(dir.path()).unwrap();
    assert_eq!(model.max_batch(), Some(8));
    let xs: Vec<(i64, Vec<f32>)> = [(1i64, 11u64), (2, 12), (2, 13)]
        .iter()
        .map(|&(b, seed)| (b, values(seed, b as usize * 3)))
        .collect();
    let datas: Vec<Vec<u8>> = xs.iter().map(|(_, x)| bytes(x)).collect();
    let shapes: Vec<[i64; 2]> = xs.iter().map(|(b, _)| [*b, 3]).collect();
    let reqs: Vec<Prepared<'_>> = datas
        .iter()
        .zip(&shapes)
        .map(|(d, s)| {
            model
                .prepare(&[(
                    "x",
                    TensorRef {
                        dtype: ElementType::F32,
                        shape: s,
                        data: d,
                    },
                )])
                .unwrap()
        })
        .collect();
    let outs = model.run_batch(&reqs).unwrap();
    for ((b, x), o) in xs.iter().zip(&outs) {
        check(o, x, *b);
    }
    // The 5 rows ran as batch 5 (no bucket to pad to).
    assert!(model.shape_stats().is_some());
}

#[test]
fn shapes_that_break_the_constraints_name_the_dim_and_the_constraint() {
    let dir = tmp("bad");
    demo_dynamic_artifact(dir.path(), Some(8)).unwrap();
    let model = Model::load(dir.path()).unwrap();
    let x = values(1, 9 * 3);
    match run(&model, &x, 9) {
        Err(DeployError::ShapeConstraint {
            dim, constraint, ..
        }) => {
            assert_eq!(dim, "input x dim 0");
            assert_eq!(constraint, "2 <= batch <= 8");
        }
        other => panic!("{other:?}"),
    }
    // The fixed dim.
    let x4 = values(2, 2 * 4);
    let xb = bytes(&x4);
    let e = model
        .run(&[(
            "x",
            TensorRef {
                dtype: ElementType::F32,
                shape: &[2, 4],
                data: &xb,
            },
        )])
        .unwrap_err();
    match &e {
        DeployError::ShapeConstraint {
            dim, constraint, ..
        } => {
            assert_eq!(dim, "input x dim 1");
            assert!(constraint.contains("size == 3"), "{constraint}");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("input x dim 1"), "{e}");
    // The model keeps serving.
    let x = values(3, 4 * 3);
    check(&run(&model, &x, 4).unwrap(), &x, 4);
}

#[test]
fn a_module_assertion_the_manifest_does_not_state_is_named_by_the_refinement() {
    // A hand-edited manifest that claims batch >= 1 while the module
    // asserts batch >= 2: the refinement's assertion names it.
    let dir = tmp("assert");
    demo_dynamic_artifact(dir.path(), None).unwrap();
    let rows_dep = {
        let man = dir.path().join("manifest.json");
        let t = std::fs::read_to_string(&man).unwrap();
        assert!(t.contains("\"min\": 2"), "{t}");
        t.replace("\"rows_independent\": true", "\"rows_independent\": false")
    };
    // Rewrite through the writer so the hash stays valid.
    let m = hlobridge_deploy::Manifest::parse(&rows_dep).unwrap();
    let mut m2 = m.clone();
    m2.dynamic.as_mut().unwrap().symbols[0].min = 1;
    let module = std::fs::read_to_string(dir.path().join("module.mlir")).unwrap();
    let w = std::fs::read(dir.path().join("weights.safetensors")).unwrap();
    let st = hlobridge_deploy::safetensors::parse(&w).unwrap();
    let e = &st["w"];
    hlobridge_deploy::writer::write_artifact(
        dir.path(),
        &m2,
        &[("module.mlir", &module)],
        &[("w", e.dtype, &e.shape, &w[e.range.clone()])],
    )
    .unwrap();
    let model = Model::load(dir.path()).unwrap();
    let x = values(4, 3);
    match run(&model, &x, 1) {
        Err(DeployError::ShapeConstraint {
            dim, constraint, ..
        }) => {
            assert_eq!(dim, "batch");
            assert!(constraint.contains(">= 2"), "{constraint}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn static_artifacts_keep_format_1_and_their_buckets() {
    let dir = tmp("static");
    demo_artifact(dir.path(), &[2, 4]).unwrap();
    let text = std::fs::read_to_string(dir.path().join("manifest.json")).unwrap();
    assert!(text.contains("hlobridge-artifact/1"), "{text}");
    let model = Model::load(dir.path()).unwrap();
    assert!(!model.is_dynamic());
    assert_eq!(model.batch_sizes(), vec![2, 4]);
    let x = values(5, 3 * 3);
    check(&run(&model, &x, 3).unwrap(), &x, 3);
}
