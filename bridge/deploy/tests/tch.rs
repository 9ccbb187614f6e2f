//! The `tch` feature: the demo artifact run on `tch::Tensor`s (contiguous and
//! not) against the same arithmetic in libtorch.
#![cfg(feature = "tch")]

use hlobridge_deploy::writer::demo_artifact;
use hlobridge_deploy::Model;
use tch::{Device, Kind, Tensor};

#[test]
fn run_tch_matches_libtorch() {
    let dir = std::env::temp_dir().join(format!("hb-deploy-tch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    demo_artifact(&dir, &[1, 4]).unwrap();
    let model = Model::load(&dir).unwrap();
    let w = Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
    for x in [
        Tensor::randn([3, 3], (Kind::Float, Device::Cpu)),
        Tensor::randn([3, 3], (Kind::Float, Device::Cpu)).transpose(0, 1), // not contiguous
    ] {
        let outs = model.run_tch(&[("x", &x)]).unwrap();
        let y = &x * &w;
        let s = y.sum_dim_intlist(&[1i64][..], false, Kind::Float);
        assert_eq!(outs[0].0, "y");
        assert!(outs[0].1.allclose(&y, 0.0, 1e-6, false));
        assert!(outs[1].1.allclose(&s, 0.0, 1e-5, false));
    }
    let bad = Tensor::randn([2, 3], (Kind::Double, Device::Cpu));
    assert!(model.run_tch(&[("x", &bad)]).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
