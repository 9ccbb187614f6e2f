//! A GEMM host kernel whose row block panics (forced through the test-only
//! hook `gemm::set_panic_at_row_for_tests`, which is process-wide: hence
//! this separate test binary with a single test) must fail the program with
//! the panic's message, never report success with rows left unwritten;
//! whether the block ran on the executing thread, a scoped thread, or a
//! helper that took a donated chunk (0, 1 and 3 helpers).

mod common;
use common::*;
use pjrt_client::host_kernels::{donation, gemm};
use pjrt_client::{CompileOptions, Program};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn helpers(n: usize, stop: &Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let _waiting = donation::Waiter::register();
                while !stop.load(Ordering::Relaxed) {
                    if !donation::help() {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect()
}

#[test]
fn a_panicking_row_block_fails_the_program_with_0_1_and_3_helpers() {
    // The hook's panics are expected: keep them off stderr.
    std::panic::set_hook(Box::new(|_| {}));
    let c = client(1);
    let n = 256usize;
    let t = format!("tensor<{n}x{n}xf32>");
    let text = format!(
        "func.func public @main(%a: {t}, %b: {t}) -> ({t}, {t}) {{\n  \
         %0 = stablehlo.custom_call @hlobridge_gemm_nn(%a, %b) {{api_version = 4 : i32}} : ({t}, {t}) -> {t}\n  \
         %1 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0], precision = [HIGHEST, HIGHEST] : ({t}, {t}) -> {t}\n  \
         return %0, %1 : {t}, {t}\n}}"
    );
    let exe = c
        .compile(&Program::mlir_text(&text), &CompileOptions::default())
        .unwrap();
    let dims = [n as i64, n as i64];
    let a = c
        .buffer_from_host(&random_f32(n * n, 1), &dims, None)
        .unwrap();
    let b = c
        .buffer_from_host(&random_f32(n * n, 2), &dims, None)
        .unwrap();
    for nh in [0usize, 1, 3] {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = helpers(nh, &stop);
        for row in [0, n / 2 + 3, n - 1] {
            gemm::set_panic_at_row_for_tests(Some(row));
            for rep in 0..5 {
                let r = exe.execute(&[&a, &b]).and_then(|o| o[0].to_host::<f32>());
                let Err(err) = r else {
                    panic!("helpers {nh}, row {row}, run {rep}: a panicking block must fail the program, but it succeeded");
                };
                let msg = err.to_string();
                assert!(
                    msg.contains("panicked") && msg.contains("test hook"),
                    "helpers {nh}, row {row}: {msg}"
                );
            }
        }
        gemm::set_panic_at_row_for_tests(None);
        // Without the hook the same program runs and matches the plugin.
        let out = exe.execute(&[&a, &b]).unwrap();
        assert_close(
            &out[0].to_host::<f32>().unwrap(),
            &out[1].to_host::<f32>().unwrap(),
            2e-3,
        );
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
    }
}
