//! The host GEMM's MKL kernel (`Kernel::Mkl`: the MKL inside PyTorch's
//! `libtorch_cpu.so`) against a float64 reference, in its own process: the
//! test loads `.venv`'s libtorch first, as `import torch` does, so that the
//! kernel finds it.

use pjrt_client::host_kernels::gemm::{GemmElement, Kernel, Mkl};

fn libtorch() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/lib");
    let found = std::fs::read_dir(&root).ok().and_then(|dirs| {
        dirs.flatten()
            .map(|d| d.path().join("site-packages/torch/lib/libtorch_cpu.so"))
            .find(|p| p.exists())
    });
    found.unwrap_or_else(|| {
        panic!(
            "no libtorch_cpu.so under {} (run `make setup`)",
            root.display()
        )
    })
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

/// `C (+)= A·B` through `Kernel::Mkl` for every transpose combination, a
/// padded result row stride, and accumulation, checked against float64 at
/// `tol·√k` of the operands' scale.
fn check<T: GemmElement + Into<f64> + From<f32>>(m: usize, k: usize, n: usize, tol: f64) {
    let a64 = values(m * k, 1 + (m * k) as u64);
    let b64 = values(k * n, 2 + (k * n) as u64);
    let c0 = values(m * n, 3);
    let cast = |v: &[f64]| -> Vec<T> { v.iter().map(|&x| T::from(x as f32)).collect() };
    for (ta, tb, accumulate) in [
        (false, false, false),
        (true, false, false),
        (false, true, true),
        (true, true, false),
    ] {
        // Storage of A (m×k) and B (k×n), transposed when asked.
        let a_st: Vec<f64> = if ta {
            (0..k * m).map(|i| a64[(i % m) * k + i / m]).collect()
        } else {
            a64.clone()
        };
        let b_st: Vec<f64> = if tb {
            (0..n * k).map(|i| b64[(i % k) * n + i / k]).collect()
        } else {
            b64.clone()
        };
        let (rsa, csa) = if ta { (1, m as isize) } else { (k as isize, 1) };
        let (rsb, csb) = if tb { (1, k as isize) } else { (n as isize, 1) };
        let (a, b) = (cast(&a_st), cast(&b_st));
        let ldc = n + 3;
        let mut c: Vec<T> = vec![T::from(7.0); m * ldc];
        for i in 0..m {
            for j in 0..n {
                c[i * ldc + j] = T::from(c0[i * n + j] as f32);
            }
        }
        // SAFETY: the buffers hold the matrices their strides describe.
        unsafe {
            T::product(
                Kernel::Mkl,
                accumulate,
                m,
                k,
                n,
                a.as_ptr(),
                rsa,
                csa,
                b.as_ptr(),
                rsb,
                csb,
                c.as_mut_ptr(),
                ldc as isize,
                1,
            )
        }
        for i in 0..m {
            for j in 0..n {
                let mut want: f64 = (0..k)
                    .map(|p| (a64[i * k + p] as f32) as f64 * (b64[p * n + j] as f32) as f64)
                    .sum();
                if accumulate {
                    want += (c0[i * n + j] as f32) as f64;
                }
                let got: f64 = c[i * ldc + j].into();
                assert!(
                    (got - want).abs() <= tol * (k as f64).sqrt(),
                    "{m}x{k}x{n} ta={ta} tb={tb} acc={accumulate} [{i},{j}]: {got} vs {want}"
                );
            }
            for j in n..ldc {
                let pad: f64 = c[i * ldc + j].into();
                assert_eq!(pad, 7.0, "padding column {j} of row {i} was written");
            }
        }
    }
}

#[test]
fn mkl_kernel_matches_float64() {
    // `Mkl::get` only finds a library the process has loaded, and caches
    // its answer: this test binary loads libtorch before asking.
    let path = libtorch();
    // SAFETY: loading PyTorch's CPU library runs its initialisers, as
    // `import torch` does; it stays loaded for the process.
    let lib = unsafe { libloading::Library::new(&path) }.expect("load libtorch_cpu.so");
    std::mem::forget(lib);
    assert!(
        Mkl::get().is_some(),
        "MKL not found in {} after loading it",
        path.display()
    );
    for &(m, k, n) in &[(1, 1, 1), (3, 5, 7), (64, 33, 17), (200, 768, 130)] {
        check::<f32>(m, k, n, 1e-6);
        check::<f64>(m, k, n, 1e-13);
    }
}
