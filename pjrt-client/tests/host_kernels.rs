//! The `hlobridge_gemm_*` host kernels, called from StableHLO custom calls
//! on the CPU plugin: every transposition, batches, f64, a bad-shape call
//! that must come back as an error (not an abort), and agreement with the
//! plugin's own `dot_general` on the same inputs.

mod common;
use common::*;
use pjrt_client::{CompileOptions, Program};

fn dims_text(d: &[usize], t: &str) -> String {
    let mut s = String::from("tensor<");
    for x in d {
        s.push_str(&format!("{x}x"));
    }
    s.push_str(t);
    s.push('>');
    s
}

/// `out = lhs · rhs` through the custom call, and the same product through
/// `stablehlo.dot_general`, as two results of one program.
#[allow(clippy::too_many_arguments)]
fn module(
    target: &str,
    ta: bool,
    tb: bool,
    batch: &[usize],
    m: usize,
    k: usize,
    n: usize,
    ty: &str,
) -> (String, Vec<usize>, Vec<usize>) {
    let mut a: Vec<usize> = batch.to_vec();
    a.extend(if ta { [k, m] } else { [m, k] });
    let mut b: Vec<usize> = batch.to_vec();
    b.extend(if tb { [n, k] } else { [k, n] });
    let mut c: Vec<usize> = batch.to_vec();
    c.extend([m, n]);
    let nb = batch.len();
    let bd: Vec<String> = (0..nb).map(|i| i.to_string()).collect();
    let lc = if ta { nb } else { nb + 1 };
    let rc = if tb { nb + 1 } else { nb };
    let batching = if nb > 0 {
        format!("batching_dims = [{0}] x [{0}], ", bd.join(", "))
    } else {
        String::new()
    };
    let (at, bt, ct) = (dims_text(&a, ty), dims_text(&b, ty), dims_text(&c, ty));
    let text = format!(
        "func.func public @main(%a: {at}, %b: {bt}) -> ({ct}, {ct}) {{\n  \
         %0 = stablehlo.custom_call @{target}(%a, %b) {{api_version = 4 : i32}} : ({at}, {bt}) -> {ct}\n  \
         %1 = stablehlo.dot_general %a, %b, {batching}contracting_dims = [{lc}] x [{rc}], precision = [HIGHEST, HIGHEST] : ({at}, {bt}) -> {ct}\n  \
         return %0, %1 : {ct}, {ct}\n}}"
    );
    (text, a, b)
}

#[test]
fn cpu_client_registers_the_gemm_kernels() {
    let c = client(1);
    assert!(c.host_kernels().gemm, "{:?}", c.host_kernels());
}

#[test]
fn gemm_matches_the_plugin_dot_for_every_transposition_f32() {
    let c = client(1);
    let targets = [
        ("hlobridge_gemm_nn", false, false),
        ("hlobridge_gemm_tn", true, false),
        ("hlobridge_gemm_nt", false, true),
        ("hlobridge_gemm_tt", true, true),
    ];
    for (seed, &(t, ta, tb)) in targets.iter().enumerate() {
        for batch in [&[][..], &[3][..], &[2, 2][..]] {
            let (m, k, n) = (33, 17, 29);
            let (text, ad, bd) = module(t, ta, tb, batch, m, k, n, "f32");
            let exe = c
                .compile(&Program::mlir_text(&text), &CompileOptions::default())
                .unwrap();
            let a = random_f32(ad.iter().product(), seed as u64 * 7 + 1);
            let b = random_f32(bd.iter().product(), seed as u64 * 7 + 2);
            let ad64: Vec<i64> = ad.iter().map(|&x| x as i64).collect();
            let bd64: Vec<i64> = bd.iter().map(|&x| x as i64).collect();
            let ba = c.buffer_from_host(&a, &ad64, None).unwrap();
            let bb = c.buffer_from_host(&b, &bd64, None).unwrap();
            let out = exe.execute(&[&ba, &bb]).unwrap();
            let got = out[0].to_host::<f32>().unwrap();
            let want = out[1].to_host::<f32>().unwrap();
            // f32 sums of 17 products of values in [-3, 3): both sides round
            // differently; 1e-4 relative to the magnitude (≤ 17·9) is loose
            // enough for that and far below any indexing error.
            assert_close(&got, &want, 2e-3);
        }
    }
}

#[test]
fn gemm_f64_is_exact_to_rounding() {
    let c = client(1);
    let (text, ad, bd) = module("hlobridge_gemm_tn", true, false, &[2], 40, 50, 30, "f64");
    let exe = c
        .compile(&Program::mlir_text(&text), &CompileOptions::default())
        .unwrap();
    let a: Vec<f64> = random_f32(ad.iter().product(), 11)
        .into_iter()
        .map(f64::from)
        .collect();
    let b: Vec<f64> = random_f32(bd.iter().product(), 12)
        .into_iter()
        .map(f64::from)
        .collect();
    let ad64: Vec<i64> = ad.iter().map(|&x| x as i64).collect();
    let bd64: Vec<i64> = bd.iter().map(|&x| x as i64).collect();
    let out = exe
        .execute(&[
            &c.buffer_from_host(&a, &ad64, None).unwrap(),
            &c.buffer_from_host(&b, &bd64, None).unwrap(),
        ])
        .unwrap();
    let (got, want) = (
        out[0].to_host::<f64>().unwrap(),
        out[1].to_host::<f64>().unwrap(),
    );
    for (x, y) in got.iter().zip(&want) {
        assert!((x - y).abs() <= 1e-10 * (1.0 + y.abs()), "{x} vs {y}");
    }
}

#[test]
fn a_call_whose_shapes_do_not_multiply_fails_with_a_message() {
    let c = client(1);
    // Declares a 4x6 result for a 4x3 · 3x5 product: the kernel refuses it.
    let text = "func.func public @main(%a: tensor<4x3xf32>, %b: tensor<3x5xf32>) -> tensor<4x6xf32> {\n  \
        %0 = stablehlo.custom_call @hlobridge_gemm_nn(%a, %b) {api_version = 4 : i32} : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x6xf32>\n  \
        return %0 : tensor<4x6xf32>\n}";
    let exe = c
        .compile(&Program::mlir_text(text), &CompileOptions::default())
        .unwrap();
    let a = c
        .buffer_from_host(&random_f32(12, 1), &[4, 3], None)
        .unwrap();
    let b = c
        .buffer_from_host(&random_f32(15, 2), &[3, 5], None)
        .unwrap();
    let err = exe
        .execute(&[&a, &b])
        .and_then(|o| o[0].to_host::<f32>())
        .unwrap_err();
    assert!(err.to_string().contains("do not multiply"), "{err}");
    // The process and the client keep working.
    let ok = c.buffer_from_host(&[1.0f32], &[1], None).unwrap();
    assert_eq!(ok.to_host::<f32>().unwrap(), vec![1.0]);
}

/// The same refusal, but only after two chained 512³ products (tens of
/// milliseconds on a CPU): the caller has long stopped polling and sleeps in
/// the donation wait, so the failure reaches it through the event's
/// `OnReady` callback. The error must still come back with its message.
#[test]
fn a_failure_late_in_a_long_program_reaches_a_sleeping_caller() {
    let c = client(1);
    let t = "tensor<512x512xf32>";
    let text = format!(
        "func.func public @main(%a: {t}, %b: {t}) -> tensor<512x7xf32> {{\n  \
         %0 = stablehlo.custom_call @hlobridge_gemm_nn(%a, %b) {{api_version = 4 : i32}} : ({t}, {t}) -> {t}\n  \
         %1 = stablehlo.custom_call @hlobridge_gemm_nn(%0, %b) {{api_version = 4 : i32}} : ({t}, {t}) -> {t}\n  \
         %2 = stablehlo.custom_call @hlobridge_gemm_nn(%1, %b) {{api_version = 4 : i32}} : ({t}, {t}) -> tensor<512x7xf32>\n  \
         return %2 : tensor<512x7xf32>\n}}"
    );
    let exe = c
        .compile(&Program::mlir_text(&text), &CompileOptions::default())
        .unwrap();
    let a = c
        .buffer_from_host(&random_f32(512 * 512, 5), &[512, 512], None)
        .unwrap();
    let b = c
        .buffer_from_host(&random_f32(512 * 512, 6), &[512, 512], None)
        .unwrap();
    for _ in 0..3 {
        let err = exe
            .execute(&[&a, &b])
            .and_then(|o| o[0].to_host::<f32>())
            .unwrap_err();
        assert!(err.to_string().contains("do not multiply"), "{err}");
    }
    let ok = c.buffer_from_host(&[2.0f32], &[1], None).unwrap();
    assert_eq!(ok.to_host::<f32>().unwrap(), vec![2.0]);
}

/// bf16 / f16 bit patterns of `x` (round to nearest even; test inputs are finite).
fn to_half_bits(x: &[f32], bf16: bool) -> Vec<u8> {
    x.iter()
        .flat_map(|&v| {
            let bits = if bf16 {
                half::bf16::from_f32(v).to_bits()
            } else {
                half::f16::from_f32(v).to_bits()
            };
            bits.to_le_bytes()
        })
        .collect()
}

fn from_half_bits(b: &[u8], bf16: bool) -> Vec<f32> {
    b.chunks_exact(2)
        .map(|c| {
            let bits = u16::from_le_bytes([c[0], c[1]]);
            if bf16 {
                half::bf16::from_bits(bits).to_f32()
            } else {
                half::f16::from_bits(bits).to_f32()
            }
        })
        .collect()
}

#[test]
fn half_precision_products_match_the_plugin_dot() {
    let c = client(1);
    for (ty, bf16) in [("bf16", true), ("f16", false)] {
        let et = if bf16 {
            pjrt_client::ElementType::Bf16
        } else {
            pjrt_client::ElementType::F16
        };
        let (text, ad, bd) = module("hlobridge_gemm_nt", false, true, &[2], 24, 40, 16, ty);
        let exe = c
            .compile(&Program::mlir_text(&text), &CompileOptions::default())
            .unwrap();
        let a: Vec<f32> = random_f32(ad.iter().product(), 21)
            .iter()
            .map(|v| v / 3.0)
            .collect();
        let b: Vec<f32> = random_f32(bd.iter().product(), 22)
            .iter()
            .map(|v| v / 3.0)
            .collect();
        let ad64: Vec<i64> = ad.iter().map(|&x| x as i64).collect();
        let bd64: Vec<i64> = bd.iter().map(|&x| x as i64).collect();
        let ba = c
            .buffer_from_host_bytes(&to_half_bits(&a, bf16), et, &ad64, None)
            .unwrap();
        let bb = c
            .buffer_from_host_bytes(&to_half_bits(&b, bf16), et, &bd64, None)
            .unwrap();
        let out = exe.execute(&[&ba, &bb]).unwrap();
        let got = from_half_bits(&out[0].to_host_bytes().unwrap(), bf16);
        let want = from_half_bits(&out[1].to_host_bytes().unwrap(), bf16);
        // Both widen to f32 and round once; summation order can move the
        // rounding by one unit in the last place: 2^-7 (bf16) relative.
        for (x, y) in got.iter().zip(&want) {
            assert!((x - y).abs() <= 1e-2 * (1.0 + y.abs()), "{ty}: {x} vs {y}");
        }
    }
}

/// Runs `exe` on (`a`, `b`) `reps` times from each of `threads` threads,
/// each with its own random inputs (dims `ad`, `bd`, values scaled by
/// `scale`); every call's first result must equal its second (the custom
/// call against the plugin's own dot in the same program).
fn run_from_threads(
    c: &pjrt_client::Client,
    text: &str,
    (ad, bd): (&[i64], &[i64]),
    scale: f32,
    threads: u64,
    reps: usize,
) {
    let exe = std::sync::Arc::new(
        c.compile(&Program::mlir_text(text), &CompileOptions::default())
            .unwrap(),
    );
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (c, exe, ad, bd) = (c.clone(), exe.clone(), ad.to_vec(), bd.to_vec());
            std::thread::spawn(move || {
                let random = |dims: &[i64], seed: u64| -> Vec<f32> {
                    let n = dims.iter().product::<i64>() as usize;
                    random_f32(n, seed).into_iter().map(|x| x * scale).collect()
                };
                let (a, b) = (random(&ad, 100 + t), random(&bd, 200 + t));
                let ba = c.buffer_from_host(&a, &ad, None).unwrap();
                let bb = c.buffer_from_host(&b, &bd, None).unwrap();
                for _ in 0..reps {
                    let out = exe.execute(&[&ba, &bb]).unwrap();
                    assert_close(
                        &out[0].to_host::<f32>().unwrap(),
                        &out[1].to_host::<f32>().unwrap(),
                        2e-3,
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// Several threads run GEMM programs at once: products are posted for
/// donation, waiting callers help with whichever job is on the board (not
/// necessarily their own), and every result must still equal the plugin's
/// dot in the same program.
#[test]
fn concurrent_programs_with_work_donation_stay_exact() {
    let c = client(1);
    let (text, ad, bd) = module("hlobridge_gemm_nn", false, false, &[], 128, 96, 112, "f32");
    let (ad, bd): (Vec<i64>, Vec<i64>) = (
        ad.iter().map(|&x| x as i64).collect(),
        bd.iter().map(|&x| x as i64).collect(),
    );
    run_from_threads(&c, &text, (&ad, &bd), 1.0, 4, 40);
}

/// Products large enough to be split (≥ 2²⁴ multiply-adds), chained so the
/// second runs after the caller's polling budget: the caller then sleeps in
/// the donation wait and is woken to take half of it (or, with nobody
/// waiting, a scoped thread does). Two threads run it at once; every result
/// must equal the plugin's own dots in the same program, and every call
/// must return (the `OnReady` wake-up is not lost).
#[test]
fn chained_large_products_with_sleeping_callers_stay_exact() {
    let c = client(1);
    let t = "tensor<256x256xf32>";
    let text = format!(
        "func.func public @main(%a: {t}, %b: {t}) -> ({t}, {t}) {{\n  \
         %0 = stablehlo.custom_call @hlobridge_gemm_nn(%a, %b) {{api_version = 4 : i32}} : ({t}, {t}) -> {t}\n  \
         %1 = stablehlo.custom_call @hlobridge_gemm_nt(%0, %b) {{api_version = 4 : i32}} : ({t}, {t}) -> {t}\n  \
         %2 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0], precision = [HIGHEST, HIGHEST] : ({t}, {t}) -> {t}\n  \
         %3 = stablehlo.dot_general %2, %b, contracting_dims = [1] x [1], precision = [HIGHEST, HIGHEST] : ({t}, {t}) -> {t}\n  \
         return %1, %3 : {t}, {t}\n}}"
    );
    // Values in [-3, 3) scaled by 1/16 so the chained sums stay O(1).
    let dims = [256i64, 256];
    run_from_threads(&c, &text, (&dims, &dims), 1.0 / 16.0, 2, 10);
}

/// Threads that run posted GEMM chunks (as a caller waiting for a program
/// would) until dropped. They are ordinary threads: default MXCSR/FPCR.
struct Helpers {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Helpers {
    fn start(n: usize) -> Helpers {
        use pjrt_client::host_kernels::donation;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let _waiting = donation::Waiter::register();
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        if !donation::help() {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        Helpers { stop, threads }
    }
}

impl Drop for Helpers {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            t.join().unwrap();
        }
    }
}

/// `A @ I` with every entry of `A` the f32 subnormal 1e-39, through the
/// custom call and the plugin's dot in one program (two results, so the
/// program runs on an XLA worker, which flushes subnormals). Rows that a
/// helper thread computes must come out exactly as the worker's: every run
/// bit-identical to the plugin's dot of the same run and to the first run,
/// with and without a helper thread that takes chunks.
#[test]
fn subnormal_products_do_not_depend_on_which_thread_ran_them() {
    let c = client(1);
    for n in [192usize, 256, 384] {
        let (text, ad, bd) = module("hlobridge_gemm_nn", false, false, &[], n, n, n, "f32");
        let exe = c
            .compile(&Program::mlir_text(&text), &CompileOptions::default())
            .unwrap();
        let a = vec![1e-39f32; n * n];
        let mut eye = vec![0f32; n * n];
        for i in 0..n {
            eye[i * n + i] = 1.0;
        }
        let ad: Vec<i64> = ad.iter().map(|&x| x as i64).collect();
        let bd: Vec<i64> = bd.iter().map(|&x| x as i64).collect();
        let ba = c.buffer_from_host(&a, &ad, None).unwrap();
        let bb = c.buffer_from_host(&eye, &bd, None).unwrap();
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<u32>>();
        let mut first: Option<Vec<u32>> = None;
        for helpers in [0usize, 1, 0, 2] {
            let _h = Helpers::start(helpers);
            for run in 0..15 {
                let out = exe.execute(&[&ba, &bb]).unwrap();
                let got = bits(out[0].to_host::<f32>().unwrap());
                let dot = bits(out[1].to_host::<f32>().unwrap());
                let kept = got.iter().zip(&dot).filter(|(g, d)| g != d).count();
                assert_eq!(
                    kept, 0,
                    "n={n} helpers={helpers} run {run}: {kept} entries differ from the plugin's dot"
                );
                match &first {
                    None => first = Some(got),
                    Some(f) => assert!(
                        *f == got,
                        "n={n} helpers={helpers} run {run}: differs from run 0"
                    ),
                }
            }
        }
    }
}
