//! The host GEMM against a float64 reference: every layout, every element
//! type, both kernels, odd and batched shapes, single-threaded and split.
//! Inputs are fresh random numbers each run; failures print the seed.

use super::*;

#[test]
fn shapes_are_checked() {
    let s = gemm_shape(&[4, 3], &[3, 5], &[4, 5], false, false).unwrap();
    assert_eq!((s.batch, s.m, s.k, s.n), (1, 4, 3, 5));
    let s = gemm_shape(&[2, 3, 4], &[2, 5, 3], &[2, 4, 5], true, true).unwrap();
    assert_eq!((s.batch, s.m, s.k, s.n), (2, 4, 3, 5));
    assert!(gemm_shape(&[4, 3], &[4, 5], &[4, 5], false, false).is_err());
    assert!(gemm_shape(&[2, 4, 3], &[3, 3, 5], &[2, 4, 5], false, false).is_err());
    assert!(gemm_shape(&[4], &[4], &[], false, false).is_err());
    assert!(gemm_shape(&[4, 3], &[3, 5], &[4, 6], false, false).is_err());
}

/// A seed that differs from run to run.
fn fresh_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t ^ (std::process::id() as u64).rotate_left(32)) | 1
}

/// Uniform numbers in [-1, 1) (xorshift).
fn random(n: usize, seed: &mut u64) -> Vec<f64> {
    (0..n)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            (*seed >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

/// `batch` products in f64, and per element the sum of |a|·|b| (the scale
/// of the rounding error).
fn reference(a: &[f64], b: &[f64], s: GemmShape, ta: bool, tb: bool) -> (Vec<f64>, Vec<f64>) {
    let GemmShape { batch, m, n, k } = s;
    let mut c = vec![0.0; batch * m * n];
    let mut mag = vec![0.0; batch * m * n];
    for e in 0..batch {
        let (a, b) = (&a[e * m * k..], &b[e * k * n..]);
        for i in 0..m {
            for j in 0..n {
                let (mut acc, mut abs) = (0.0, 0.0);
                for p in 0..k {
                    let x = if ta { a[p * m + i] } else { a[i * k + p] };
                    let y = if tb { b[j * k + p] } else { b[p * n + j] };
                    acc += x * y;
                    abs += (x * y).abs();
                }
                c[e * m * n + i * n + j] = acc;
                mag[e * m * n + i * n + j] = abs;
            }
        }
    }
    (c, mag)
}

/// An element type under test: storage, conversion, and error bounds.
trait Elem: Copy + Default + 'static {
    const DTYPE: XLA_FFI_DataType;
    /// Unit roundoff of the accumulation (f32 for the 16-bit types).
    const ACC_EPS: f64;
    /// Unit roundoff of the stored result.
    const OUT_EPS: f64;
    /// Half the spacing of the stored type's subnormals: the absolute error
    /// of rounding a result below its smallest normal (f16's 2⁻²⁵ matters:
    /// a product of 1e-5 is subnormal there).
    const OUT_TINY: f64;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    /// Runs the product through the kernel's typed entry point.
    ///
    /// # Safety
    /// The views must match `s`.
    unsafe fn run(
        kernel: Kernel,
        a: &BufferView<'_>,
        b: &BufferView<'_>,
        c: &BufferView<'_>,
        s: GemmShape,
        ta: bool,
        tb: bool,
    ) -> Result<(), String>;
}

macro_rules! elem {
    ($t:ty, $dt:expr, $acc:expr, $out:expr, $tiny:expr, $from:expr, $to:expr, $run:ident) => {
        impl Elem for $t {
            const DTYPE: XLA_FFI_DataType = $dt;
            const ACC_EPS: f64 = $acc;
            const OUT_EPS: f64 = $out;
            const OUT_TINY: f64 = $tiny;
            fn from_f64(x: f64) -> Self {
                $from(x)
            }
            fn to_f64(self) -> f64 {
                $to(self)
            }
            unsafe fn run(
                kernel: Kernel,
                a: &BufferView<'_>,
                b: &BufferView<'_>,
                c: &BufferView<'_>,
                s: GemmShape,
                ta: bool,
                tb: bool,
            ) -> Result<(), String> {
                // SAFETY: forwarded from the caller.
                unsafe { $run::<$t>(kernel, a, b, c, s, ta, tb) }
            }
        }
    };
}
const F32_EPS: f64 = f32::EPSILON as f64 / 2.0;
elem!(
    f32,
    XLA_FFI_DataType_F32,
    F32_EPS,
    F32_EPS,
    f32::MIN_POSITIVE as f64 * F32_EPS,
    |x| x as f32,
    |x: f32| x as f64,
    gemm_typed
);
elem!(
    f64,
    XLA_FFI_DataType_F64,
    f64::EPSILON / 2.0,
    f64::EPSILON / 2.0,
    f64::MIN_POSITIVE,
    |x| x,
    |x| x,
    gemm_typed
);
elem!(
    half::bf16,
    XLA_FFI_DataType_BF16,
    F32_EPS,
    1.0 / 256.0,
    1.0 / (1u128 << 127) as f64 / (1u64 << 7) as f64,
    half::bf16::from_f64,
    half::bf16::to_f64,
    gemm_widened
);
elem!(
    half::f16,
    XLA_FFI_DataType_F16,
    F32_EPS,
    1.0 / 2048.0,
    1.0 / (1u64 << 25) as f64,
    half::f16::from_f64,
    half::f16::to_f64,
    gemm_widened
);

/// Runs one product of `s` in layout `(ta, tb)` with `kernel` on random
/// inputs and checks every element against the f64 product of the same
/// (rounded) inputs: `|c - ref| <= OUT_EPS·|ref| + 2·k·ACC_EPS·Σ|a·b| +
/// OUT_TINY`.
fn check<T: Elem>(kernel: Kernel, s: GemmShape, ta: bool, tb: bool, seed: u64) {
    let GemmShape { batch, m, n, k } = s;
    let mut st = seed;
    let a: Vec<T> = random(batch * m * k, &mut st)
        .into_iter()
        .map(T::from_f64)
        .collect();
    let b: Vec<T> = random(batch * k * n, &mut st)
        .into_iter()
        .map(T::from_f64)
        .collect();
    let mut c = vec![T::from_f64(f64::NAN); batch * m * n];
    let dims = |r: usize, q: usize| -> &'static [i64] {
        Box::leak(vec![batch as i64, r as i64, q as i64].into_boxed_slice())
    };
    let ad = if ta { dims(k, m) } else { dims(m, k) };
    let bd = if tb { dims(n, k) } else { dims(k, n) };
    let cd = dims(m, n);
    assert_eq!(gemm_shape(ad, bd, cd, ta, tb).unwrap(), s);
    let view = |p: *mut T, dims| BufferView {
        dtype: T::DTYPE,
        data: p.cast(),
        dims,
    };
    // SAFETY: the vectors hold exactly the elements of their dims.
    unsafe {
        T::run(
            kernel,
            &view(a.as_ptr() as *mut T, ad),
            &view(b.as_ptr() as *mut T, bd),
            &view(c.as_mut_ptr(), cd),
            s,
            ta,
            tb,
        )
    }
    .unwrap();
    let wide = |v: &[T]| v.iter().map(|x| x.to_f64()).collect::<Vec<_>>();
    let (want, mag) = reference(&wide(&a), &wide(&b), s, ta, tb);
    for (idx, ((got, want), mag)) in c.iter().zip(&want).zip(&mag).enumerate() {
        let got = got.to_f64();
        let tol = T::OUT_EPS * want.abs() + 2.0 * k as f64 * T::ACC_EPS * mag + T::OUT_TINY;
        assert!(
            (got - want).abs() <= tol,
            "{} {kernel:?} {s:?} ta={ta} tb={tb} seed={seed:#x}: element {idx}: {got} vs {want} (tol {tol:e})",
            std::any::type_name::<T>()
        );
    }
}

/// Odd sizes (1, 7, 129, 513), batched ones, and calls large enough to
/// split over threads (by rows when unbatched, by entries when batched).
const SHAPES: &[(usize, usize, usize, usize)] = &[
    // (batch, m, k, n)
    (1, 1, 1, 1),
    (1, 1, 7, 129),
    (1, 7, 1, 7),
    (1, 129, 7, 1),
    (1, 7, 513, 13),
    (1, 129, 129, 129),
    (1, 513, 129, 257),
    (3, 7, 129, 33),
    (2, 513, 7, 129),
    (5, 129, 129, 257),
    (2, 0, 7, 5),
    (1, 7, 0, 5),
];

fn check_all<T: Elem>() {
    let _board = crate::host_kernels::donation::test_serial();
    let seed = fresh_seed();
    for (si, &(batch, m, k, n)) in SHAPES.iter().enumerate() {
        let s = GemmShape { batch, m, n, k };
        for &(_, ta, tb) in &TARGETS {
            for kernel in Kernel::ALL {
                check::<T>(kernel, s, ta, tb, seed.wrapping_add(si as u64));
            }
        }
    }
}

#[test]
fn f32_matches_f64_reference() {
    check_all::<f32>();
}

#[test]
fn f64_matches_f64_reference() {
    check_all::<f64>();
}

#[test]
fn bf16_matches_f64_reference() {
    check_all::<half::bf16>();
}

#[test]
fn f16_matches_f64_reference() {
    check_all::<half::f16>();
}

#[test]
fn large_calls_split_and_small_ones_do_not() {
    let one = |batch, m, n, k| threads_for(GemmShape { batch, m, n, k });
    assert_eq!(one(1, 128, 128, 128), 1);
    assert_eq!(one(96, 8, 8, 8), 1);
    let cores = cores();
    for t in [
        one(1, 1024, 768, 768),
        one(96, 128, 128, 64),
        one(1, 64, 4096, 4096),
    ] {
        assert!((1..=cores).contains(&t), "{t} threads on {cores} cores");
    }
    // Each thread keeps at least 32 rows of a single matrix.
    assert!(one(1, 40, 4096, 4096) == 1);
}

#[test]
fn kernel_defaults_to_the_gemm_crate() {
    // The test environment does not set HLOBRIDGE_GEMM_KERNEL.
    if hlobridge_config::get(hlobridge_config::Var::GemmKernel).is_none() {
        assert_eq!(Kernel::from_env(), Kernel::Gemm);
    }
}
