//! The compile service's caches through the CPU plugin: the second compile
//! of the same text comes from the disk cache and keeps CPU semantics (NaN
//! propagates); the memory cache hands one executable to every caller;
//! `XLA_FLAGS` is part of the key, so a fast-math compile is never served to
//! a process without the flag (each such compile runs in a child process:
//! the plugin reads `XLA_FLAGS` once per process).

use hlobridge_compile::{compile, CompilePolicy, DiskCacheMode, Fetched};
use pjrt_client::{Client, ClientOptions, CompileOptions, ElementType, LoadedExecutable, Plugin};
use std::path::Path;
use std::process::Command;

const MAX: &str = "func.func @main(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xf32> {
  %0 = stablehlo.maximum %a, %b : tensor<2xf32>
  return %0 : tensor<2xf32>
}
";

/// `isnan(x) + 10 * isinf(x)`.
const NAN_INF: &str = "func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %nan = stablehlo.compare NE, %x, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %a = stablehlo.abs %x : tensor<4xf32>
  %inf = stablehlo.constant dense<0x7F800000> : tensor<4xf32>
  %isinf = stablehlo.compare EQ, %a, %inf : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %n = stablehlo.convert %nan : (tensor<4xi1>) -> tensor<4xf32>
  %i = stablehlo.convert %isinf : (tensor<4xi1>) -> tensor<4xf32>
  %ten = stablehlo.constant dense<10.0> : tensor<4xf32>
  %i10 = stablehlo.multiply %i, %ten : tensor<4xf32>
  %r = stablehlo.add %n, %i10 : tensor<4xf32>
  return %r : tensor<4xf32>
}
";

/// The fast-math flags that turn `isnan`/`isinf` into constants.
const FAST_MATH: &str = "--xla_cpu_enable_fast_math=true --xla_cpu_fast_math_honor_nans=false --xla_cpu_fast_math_honor_infs=false";

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn run(client: &Client, exe: &LoadedExecutable, args: &[&[f32]]) -> Vec<f32> {
    let bufs: Vec<_> = args
        .iter()
        .map(|a| {
            client
                .buffer_from_host_bytes(&bytes(a), ElementType::F32, &[a.len() as i64], None)
                .unwrap()
        })
        .collect();
    let refs: Vec<_> = bufs.iter().collect();
    exe.execute(&refs).unwrap()[0].to_host::<f32>().unwrap()
}

fn client() -> Client {
    let plugin = Plugin::discover().expect("the CPU plugin (make setup installs it)");
    Client::new(&plugin, &ClientOptions::new()).unwrap()
}

fn disk(client: &Client, text: &str, dir: &Path) -> Fetched {
    let policy = CompilePolicy {
        disk_cache: DiskCacheMode::At(dir.to_path_buf()),
        ..CompilePolicy::default()
    };
    compile(client, text, CompileOptions::default(), &policy).unwrap()
}

fn fresh_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("hb-compile-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn second_compile_is_a_disk_hit_and_nan_propagates() {
    let dir = fresh_dir("disk");
    let client = client();
    let first = disk(&client, MAX, &dir);
    let second = disk(&client, MAX, &dir);
    assert!(!first.compiled.from_disk && !first.from_memory);
    assert!(second.compiled.from_disk && !second.from_memory);
    assert_eq!(first.compiled.fingerprint, second.compiled.fingerprint);
    for f in [&first, &second] {
        let got = run(
            &client,
            &f.compiled.exe,
            &[&[f32::NAN, 1.0], &[1.0, f32::NAN]],
        );
        assert!(got.iter().all(|x| x.is_nan()), "{got:?}");
        assert_eq!(
            run(&client, &f.compiled.exe, &[&[1.0, -2.0], &[0.5, 3.0]]),
            vec![1.0, 3.0]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn memory_cache_shares_one_executable_per_client() {
    let client = client();
    let policy = CompilePolicy {
        disk_cache: DiskCacheMode::Off,
        ..CompilePolicy::in_process()
    };
    let text = MAX.replace("maximum", "minimum");
    let a = compile(&client, &text, CompileOptions::default(), &policy).unwrap();
    let b = compile(&client, &text, CompileOptions::default(), &policy).unwrap();
    assert!(!a.from_memory && b.from_memory);
    assert!(std::sync::Arc::ptr_eq(&a.compiled, &b.compiled));
    // Another client is another key.
    let other = Client::new(client.plugin(), &ClientOptions::new()).unwrap();
    let c = compile(&other, &text, CompileOptions::default(), &policy).unwrap();
    assert!(!c.from_memory);
}

/// Child half of `xla_flags_are_part_of_the_key`: compiles and runs
/// [`NAN_INF`] through the disk cache and prints the result and whether it
/// was a disk hit.
#[test]
#[ignore = "run by xla_flags_are_part_of_the_key in a child process"]
fn child_nan_inf() {
    let client = client();
    let f = compile(
        &client,
        NAN_INF,
        CompileOptions::default(),
        &CompilePolicy::default(),
    )
    .unwrap();
    let got = run(
        &client,
        &f.compiled.exe,
        &[&[1.0, f32::NAN, f32::INFINITY, 2.0]],
    );
    println!("RESULT {got:?} from_disk={}", f.compiled.from_disk);
}

fn child(dir: &Path, xla_flags: Option<&str>) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_nan_inf", "--ignored", "--nocapture"])
        .env("HLOBRIDGE_CACHE_DIR", dir)
        .env_remove("HLOBRIDGE_CACHE")
        .env_remove("XLA_FLAGS");
    if let Some(f) = xla_flags {
        cmd.env("XLA_FLAGS", f);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT ").map(str::to_string))
        .unwrap_or_else(|| panic!("no RESULT line in {stdout}"))
}

#[test]
fn xla_flags_are_part_of_the_key() {
    let dir = fresh_dir("flags");
    let fast = child(&dir, Some(FAST_MATH));
    // The flags do change the code: fast math without NaN/Inf folds both
    // tests to false.
    assert_eq!(fast, "[0.0, 0.0, 0.0, 0.0] from_disk=false");
    let plain = child(&dir, None);
    assert_eq!(plain, "[0.0, 1.0, 10.0, 0.0] from_disk=false");
    // The same environment again is a disk hit.
    assert_eq!(child(&dir, None), "[0.0, 1.0, 10.0, 0.0] from_disk=true");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 64x64x64 product: above the host GEMM's size threshold.
const GEMM: &str = "func.func @main(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}
";

#[test]
fn a_disk_hit_names_the_same_host_kernels() {
    let dir = fresh_dir("kernels");
    let client = client();
    if !client.host_kernels().gemm {
        eprintln!(
            "skipping: host kernels off ({:?})",
            client.host_kernels().reason
        );
        return;
    }
    let first = disk(&client, GEMM, &dir);
    let second = disk(&client, GEMM, &dir);
    assert!(!first.compiled.from_disk && second.compiled.from_disk);
    assert_eq!(first.compiled.host, second.compiled.host);
    if !first.compiled.host.lowering.is_empty() {
        // HLOBRIDGE_HOST_GEMM not off: the product is a host GEMM call.
        assert_eq!(first.compiled.host.kernels_line(), "hlobridge_gemm_nn=1");
        assert_eq!(first.compiled.host.gemm_rewritten, 1);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
