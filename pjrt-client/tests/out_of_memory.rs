//! Allocation failures give named errors (the size in bytes), never an
//! abort, and the process keeps working: a program output the plugin cannot
//! allocate, a program temporary, a host→device copy, and the host vector
//! of a device→host copy.
//!
//! Each case runs in a child process (this test binary, running one
//! `#[ignore]`d test) under `ulimit -v`: the limit is the parent's address
//! space after creating a client plus [`HEADROOM`], so it does not depend
//! on the machine's memory or core count.

mod common;
use common::*;
use pjrt_client::{CompileOptions, ElementType, ErrorCode, Program};

const GIB: u64 = 1 << 30;
/// Address space the child may use beyond the parent's baseline.
const HEADROOM: u64 = 3 * GIB / 2;

/// `VmSize` of this process, in bytes.
fn vm_size() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmSize:"))
        .expect("VmSize");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmSize value");
    kib * 1024
}

/// The named error must report `bytes`, and the client must still run a
/// small program.
fn assert_oom(err: pjrt_client::Error, bytes: u64, c: &pjrt_client::Client) {
    assert_eq!(err.out_of_memory_bytes(), Some(bytes), "{err}");
    assert!(err.to_string().contains(&bytes.to_string()), "{err}");
    let exe = c
        .compile(
            &Program::mlir_text(&sine_module(4)),
            &CompileOptions::default(),
        )
        .unwrap();
    let x = c.buffer_from_host(&[0.0f32; 4], &[4], None).unwrap();
    assert_eq!(
        exe.execute(&[&x]).unwrap()[0].to_host::<f32>().unwrap(),
        vec![0.0; 4]
    );
    println!("alive after: {err}");
}

fn broadcast_module(bytes: u64) -> String {
    let n = bytes / 4;
    format!(
        "func.func public @main(%a: tensor<f32>) -> tensor<{n}xf32> {{\n  \
         %0 = stablehlo.broadcast_in_dim %a, dims = [] : (tensor<f32>) -> tensor<{n}xf32>\n  \
         return %0 : tensor<{n}xf32>\n}}"
    )
}

#[test]
#[ignore = "run by `allocation_failures_are_named_errors` in a child under ulimit -v"]
fn child_output_too_large() {
    let c = client(1);
    let bytes = 8 * GIB;
    let exe = c
        .compile(
            &Program::mlir_text(&broadcast_module(bytes)),
            &CompileOptions::default(),
        )
        .unwrap();
    let a = c.buffer_from_host(&[1.0f32], &[], None).unwrap();
    let err = exe
        .execute(&[&a])
        .and_then(|o| o[0].ready())
        .expect_err("an 8 GiB output cannot be allocated");
    assert!(
        matches!(
            &err,
            pjrt_client::Error::Pjrt {
                code: ErrorCode::ResourceExhausted,
                ..
            }
        ),
        "{err}"
    );
    assert_oom(err, bytes, &c);
}

#[test]
#[ignore = "run by `allocation_failures_are_named_errors` in a child under ulimit -v"]
fn child_temporary_too_large() {
    let c = client(1);
    // A sorted 8 GiB iota needs an 8 GiB temporary; only a scalar comes out.
    let n = 2 * GIB;
    let text = format!(
        "func.func public @main(%a: tensor<f32>) -> tensor<f32> {{\n  \
         %i = stablehlo.iota dim = 0 : tensor<{n}xf32>\n  \
         %0 = stablehlo.multiply %i, %i : tensor<{n}xf32>\n  \
         %1 = \"stablehlo.sort\"(%0) ({{\n  ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n    \
         %c = stablehlo.compare GT, %x, %y : (tensor<f32>, tensor<f32>) -> tensor<i1>\n    \
         stablehlo.return %c : tensor<i1>\n  }}) {{dimension = 0 : i64}} : (tensor<{n}xf32>) -> tensor<{n}xf32>\n  \
         %2 = stablehlo.reduce(%1 init: %a) applies stablehlo.add across dimensions = [0] : (tensor<{n}xf32>, tensor<f32>) -> tensor<f32>\n  \
         return %2 : tensor<f32>\n}}"
    );
    let exe = c
        .compile(&Program::mlir_text(&text), &CompileOptions::default())
        .unwrap();
    let a = c.buffer_from_host(&[0.0f32], &[], None).unwrap();
    let err = exe
        .execute(&[&a])
        .and_then(|o| o[0].to_host::<f32>())
        .expect_err("an 8 GiB temporary cannot be allocated");
    // The plugin's own size includes its temp-buffer bookkeeping.
    let bytes = err.out_of_memory_bytes().unwrap_or_else(|| panic!("{err}"));
    assert!(bytes >= 8 * GIB, "{err}");
    assert_oom(err, bytes, &c);
}

#[test]
#[ignore = "run by `allocation_failures_are_named_errors` in a child under ulimit -v"]
fn child_host_to_device_too_large() {
    let c = client(1);
    // Fits in the headroom once, not twice.
    let bytes = GIB;
    let host = vec![0u8; bytes as usize];
    let err = c
        .buffer_from_host_bytes(&host, ElementType::U8, &[bytes as i64], None)
        .expect_err("a second 1 GiB copy does not fit");
    drop(host);
    assert_oom(err, bytes, &c);
}

#[test]
#[ignore = "run by `allocation_failures_are_named_errors` in a child under ulimit -v"]
fn child_device_to_host_too_large() {
    let c = client(1);
    let bytes = GIB;
    let exe = c
        .compile(
            &Program::mlir_text(&broadcast_module(bytes)),
            &CompileOptions::default(),
        )
        .unwrap();
    let a = c.buffer_from_host(&[1.0f32], &[], None).unwrap();
    let out = exe.execute(&[&a]).unwrap();
    out[0].ready().unwrap();
    for err in [
        out[0]
            .to_host_bytes()
            .expect_err("a second 1 GiB copy does not fit"),
        out[0]
            .to_host::<f32>()
            .expect_err("a second 1 GiB copy does not fit"),
    ] {
        assert!(
            matches!(
                &err,
                pjrt_client::Error::Pjrt {
                    code: ErrorCode::ResourceExhausted,
                    ..
                }
            ),
            "{err}"
        );
        assert_oom(err, bytes, &c);
    }
}

#[test]
fn allocation_failures_are_named_errors() {
    let c = client(1);
    let base = vm_size();
    drop(c);
    let limit_kib = (base + HEADROOM) / 1024;
    let exe = std::env::current_exe().unwrap();
    for case in [
        "child_output_too_large",
        "child_temporary_too_large",
        "child_host_to_device_too_large",
        "child_device_to_host_too_large",
    ] {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -v {limit_kib} && exec \"$0\" \"$@\""))
            .arg(&exe)
            .args([
                "--ignored",
                "--exact",
                case,
                "--nocapture",
                "--test-threads=1",
            ])
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success() && stdout.contains("alive after:") && stdout.contains("1 passed"),
            "{case} under ulimit -v {limit_kib} KiB (baseline {base} B): {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        );
    }
}
