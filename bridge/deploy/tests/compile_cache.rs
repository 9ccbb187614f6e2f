//! `Model::load`'s compile step: the second compile of the same module
//! text comes from the persistent compile cache, and CPU programs keep the
//! NaN semantics of hlobridge's own runtime (`CPU_SEMANTICS`), before and
//! after the cache.

use hlobridge_deploy::compile_cache::{compile, Outcome};
use pjrt_client::{Client, ClientOptions, ElementType, LoadedExecutable, Plugin};

const MAX: &str = "func.func @main(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.maximum %a, %b : tensor<2xf32>
  return %0 : tensor<2xf32>
}
";

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn max_of(client: &Client, exe: &LoadedExecutable, a: &[f32], b: &[f32]) -> Vec<f32> {
    let a = client
        .buffer_from_host_bytes(&bytes(a), ElementType::F32, &[2], None)
        .unwrap();
    let b = client
        .buffer_from_host_bytes(&bytes(b), ElementType::F32, &[2], None)
        .unwrap();
    let out = exe.execute(&[&a, &b]).unwrap();
    out[0].to_host::<f32>().unwrap()
}

#[test]
fn second_compile_is_a_disk_hit_and_nan_propagates() {
    let dir = std::env::temp_dir().join(format!("hb-deploy-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The only test in this binary: nothing else reads the environment.
    std::env::set_var("HLOBRIDGE_CACHE_DIR", &dir);
    std::env::remove_var("HLOBRIDGE_CACHE");
    let plugin = Plugin::discover().expect("the CPU plugin (make setup installs it)");
    let client = Client::new(&plugin, &ClientOptions::new()).unwrap();
    let (first, o1) = compile(&client, MAX).unwrap();
    let (second, o2) = compile(&client, MAX).unwrap();
    assert_eq!(o1, Outcome::Compiled);
    assert_eq!(o2, Outcome::FromDisk);
    for exe in [&first, &second] {
        let got = max_of(&client, exe, &[f32::NAN, 1.0], &[1.0, f32::NAN]);
        assert!(got.iter().all(|x| x.is_nan()), "{got:?}");
        assert_eq!(
            max_of(&client, exe, &[1.0, -2.0], &[0.5, 3.0]),
            vec![1.0, 3.0]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
