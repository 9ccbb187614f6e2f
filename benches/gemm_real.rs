//! Raw f32 GEMM kernels at the real-size models' shapes: `matrixmultiply`
//! (the host kernel's small-product kernel) against the `gemm` crate (its
//! large-product kernel), on one thread and with the result rows split over
//! two threads, the way the host kernel splits them.
//!
//! `cargo bench -p pjrt-client --bench gemm_real` (add `-- --quick` for
//! fewer rounds, `-- --json` for one JSON object per line). Kernels are
//! timed interleaved, round by round, so load drifts hit them alike; the
//! figure is the median over rounds. `benches/gemm_bench.py` times the same
//! shapes end to end against torch eager (docs/host_gemm.md).

use std::hint::black_box;
use std::time::Instant;

use pjrt_client::host_kernels::gemm::{GemmElement, Kernel};

/// `(label, batch, m, k, n, lhs transposed, rhs transposed)`; labels
/// read `[batch x] m x k x n`.
type Case = (&'static str, usize, usize, usize, usize, bool, bool);

const CASES: &[Case] = &[
    ("32^3 nn", 1, 32, 32, 32, false, false),
    ("64^3 nn", 1, 64, 64, 64, false, false),
    ("64^3 nt", 1, 64, 64, 64, false, true),
    ("128^3 nn", 1, 128, 128, 128, false, false),
    ("256^3 nn", 1, 256, 256, 256, false, false),
    ("512x768x768 nn", 1, 512, 768, 768, false, false),
    ("512x768x768 nt", 1, 512, 768, 768, false, true),
    ("1024x768x768 nn", 1, 1024, 768, 768, false, false),
    ("1024x768x768 nt", 1, 1024, 768, 768, false, true),
    ("1024x768x768 tn", 1, 1024, 768, 768, true, false),
    ("1024x768x768 tt", 1, 1024, 768, 768, true, true),
    ("1024x768x3072 nt", 1, 1024, 768, 3072, false, true),
    ("1024x768x3072 nn", 1, 1024, 768, 3072, false, false),
    ("1024x3072x768 nt", 1, 1024, 3072, 768, false, true),
    ("1024x3072x768 tn", 1, 1024, 3072, 768, true, false),
    ("96x128x64x128 nt (q.k^T)", 96, 128, 64, 128, false, true),
    ("96x128x128x64 nn (p.v)", 96, 128, 128, 64, false, false),
];

/// Rows `r0..r0+mr` of one `m×k · k×n` product, through the host kernel's
/// own entry point ([`GemmElement::mul_in`]), so the bench times exactly
/// the calls the kernel makes.
///
/// # Safety
/// The pointers/strides describe valid matrices; `c` does not overlap.
#[allow(clippy::too_many_arguments)]
unsafe fn block(
    kern: Kernel,
    mr: usize,
    k: usize,
    n: usize,
    a: *const f32,
    rsa: isize,
    csa: isize,
    b: *const f32,
    rsb: isize,
    csb: isize,
    c: *mut f32,
) {
    // SAFETY: forwarded from the caller's contract.
    unsafe { f32::mul_in(kern, mr, k, n, a, rsa, csa, b, rsb, csb, c, n as isize, 1) }
}

fn run(kern: Kernel, threads: usize, case: &Case, a: &[f32], b: &[f32], c: &mut [f32]) {
    let &(_, batch, m, k, n, ta, tb) = case;
    let (rsa, csa) = if ta { (1, m as isize) } else { (k as isize, 1) };
    let (rsb, csb) = if tb { (1, k as isize) } else { (n as isize, 1) };
    let (pa, pb, pc) = (
        a.as_ptr() as usize,
        b.as_ptr() as usize,
        c.as_mut_ptr() as usize,
    );
    let one = move |i: usize, r0: usize, mr: usize| {
        // SAFETY: rows r0..r0+mr of entry i lie inside the buffers, and
        // concurrent calls get disjoint rows of C.
        unsafe {
            block(
                kern,
                mr,
                k,
                n,
                (pa as *const f32).add(i * m * k).offset(r0 as isize * rsa),
                rsa,
                csa,
                (pb as *const f32).add(i * k * n),
                rsb,
                csb,
                (pc as *mut f32).add(i * m * n + r0 * n),
            )
        }
    };
    if threads == 1 {
        (0..batch).for_each(|i| one(i, 0, m));
    } else if batch >= threads {
        // Batched: whole entries per thread.
        let per = batch.div_ceil(threads);
        std::thread::scope(|s| {
            for t in 1..threads {
                s.spawn(move || (t * per..((t + 1) * per).min(batch)).for_each(|i| one(i, 0, m)));
            }
            (0..per.min(batch)).for_each(|i| one(i, 0, m));
        });
    } else {
        let rows = m.div_ceil(threads);
        for i in 0..batch {
            std::thread::scope(|s| {
                for r0 in (rows..m).step_by(rows) {
                    s.spawn(move || one(i, r0, rows.min(m - r0)));
                }
                one(i, 0, rows.min(m));
            });
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let json = args.iter().any(|a| a == "--json");
    let filter = args.iter().skip(1).find(|a| !a.starts_with("--")).cloned();
    let rounds = if quick { 5 } else { 11 };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let variants: Vec<(Kernel, usize)> = [Kernel::MatrixMultiply, Kernel::Gemm]
        .into_iter()
        .flat_map(|k| [(k, 1), (k, cores.min(2))])
        .filter(|&(_, t)| t >= 1)
        .collect();
    if !json {
        println!(
            "{:<26} {:>10} {:>10} {:>10} {:>10}   GFLOP/s (median of {rounds} interleaved rounds)",
            "shape (b x m x k x n)", "mm 1T", "mm 2T", "gemm 1T", "gemm 2T"
        );
    }
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    for case in CASES {
        if filter.as_deref().is_some_and(|f| !case.0.contains(f)) {
            continue;
        }
        let &(label, batch, m, k, n, _, _) = case;
        let a: Vec<f32> = (0..batch * m * k).map(|_| rnd()).collect();
        let b: Vec<f32> = (0..batch * k * n).map(|_| rnd()).collect();
        let mut c = vec![0f32; batch * m * n];
        let flops = 2.0 * (batch * m * k * n) as f64;
        // Inner repetitions so one sample lasts a few milliseconds.
        let reps = ((4e7 / flops).ceil() as usize).max(1);
        let mut samples = vec![Vec::new(); variants.len()];
        for round in 0..=rounds {
            for (vi, &(kern, t)) in variants.iter().enumerate() {
                let t0 = Instant::now();
                for _ in 0..reps {
                    run(kern, t, case, black_box(&a), black_box(&b), &mut c);
                }
                let dt = t0.elapsed().as_secs_f64() / reps as f64;
                if round > 0 {
                    samples[vi].push(dt); // round 0 warms up
                }
            }
        }
        let gflops: Vec<f64> = samples
            .iter_mut()
            .map(|s| {
                s.sort_by(f64::total_cmp);
                flops / s[s.len() / 2] / 1e9
            })
            .collect();
        if json {
            let fields: Vec<String> = variants
                .iter()
                .zip(&gflops)
                .map(|((kern, t), g)| format!("\"{kern:?}/{t}\": {g:.2}"))
                .collect();
            println!("{{\"shape\": \"{label}\", {}}}", fields.join(", "));
        } else {
            print!("{label:<26}");
            for g in &gflops {
                print!(" {g:>10.1}");
            }
            println!();
        }
    }
}
