//! Many executes with flat memory, and concurrent execution from threads.

mod common;
use common::*;
use pjrt_client::{CompileOptions, Program};

fn resident_bytes() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").expect("read /proc/self/statm");
    let pages: usize = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn ten_thousand_executes_flat_rss() {
    let c = client(1);
    let exe = c
        .compile(
            &Program::mlir_text(&sine_exp_module(16)),
            &CompileOptions::default(),
        )
        .unwrap();
    let x = c.buffer_from_host(&random_f32(16, 1), &[16], None).unwrap();
    let y = c.buffer_from_host(&random_f32(16, 2), &[16], None).unwrap();
    let run = |n: usize| {
        for _ in 0..n {
            let out = exe.execute(&[&x, &y]).unwrap();
            assert_eq!(out.len(), 1);
        }
        exe.execute(&[&x, &y]).unwrap()[0].ready().unwrap();
    };
    run(1000);
    let before = resident_bytes();
    run(10_000);
    let after = resident_bytes();
    let growth = after.saturating_sub(before);
    eprintln!("RSS before {before} after {after} growth {growth}");
    assert!(
        growth < 4 << 20,
        "RSS grew by {growth} bytes over 10k executes"
    );
}

#[test]
fn eight_threads_execute_concurrently() {
    let c = client(2);
    let exe = c
        .compile(
            &Program::mlir_text(&sine_exp_module(128)),
            &CompileOptions::default(),
        )
        .unwrap();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let c = c.clone();
            let exe = exe.clone();
            s.spawn(move || {
                let x = random_f32(128, 100 + t);
                let y = random_f32(128, 200 + t);
                let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a.sin() * b.exp()).collect();
                let bx = c.buffer_from_host(&x, &[128], None).unwrap();
                let by = c.buffer_from_host(&y, &[128], None).unwrap();
                for _ in 0..200 {
                    let out = exe.execute(&[&bx, &by]).unwrap();
                    assert_close(&out[0].to_host::<f32>().unwrap(), &want, 1e-5);
                }
            });
        }
    });
}

#[test]
fn handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<pjrt_client::Plugin>();
    assert_send_sync::<pjrt_client::Client>();
    assert_send_sync::<pjrt_client::Device>();
    assert_send_sync::<pjrt_client::Memory>();
    assert_send_sync::<pjrt_client::Buffer>();
    assert_send_sync::<pjrt_client::LoadedExecutable>();
    assert_send_sync::<pjrt_client::Executable>();
    assert_send_sync::<pjrt_client::Event>();
}

#[test]
fn children_keep_client_alive() {
    let c = client(1);
    let exe = c
        .compile(
            &Program::mlir_text(&sine_module(4)),
            &CompileOptions::default(),
        )
        .unwrap();
    let b = c.buffer_from_host(&[0.5f32; 4], &[4], None).unwrap();
    drop(c);
    let out = exe.execute(&[&b]).unwrap();
    drop(exe);
    drop(b);
    assert_close(&out[0].to_host::<f32>().unwrap(), &[0.5f32.sin(); 4], 1e-6);
    let dev = out[0].device().unwrap();
    assert!(dev.to_string_lossy().contains('0'));
    assert!(!dev.default_memory().unwrap().kind().unwrap().is_empty());
}
