//! The MKL `sgemm_`/`dgemm_` that PyTorch's CPU library carries, for the
//! host GEMM kernel's [`Kernel::Mkl`](super::Kernel::Mkl).
//!
//! `libtorch_cpu.so` links Intel MKL statically and exports its Fortran
//! BLAS entry points (`sgemm_`, `dgemm_`: column-major, LP64, every
//! argument by pointer) and `MKL_Set_Num_Threads_Local`. These are the
//! routines eager torch's `mm`/`addmm` run on the CPU. The library is only
//! *looked up* here, never loaded: [`Mkl::get`] finds it when the process
//! has already loaded it (`import torch`), and is `None` otherwise (the Rust
//! CLI, a server without libtorch), where the caller keeps its own kernel.
//!
//! A call runs single-threaded (`MKL_Set_Num_Threads_Local(1)` around it)
//! unless the caller asked for MKL's own threads ([`with_own_threads`]): the
//! host kernel does so for the products it would otherwise split over the
//! cores itself, since MKL's OpenMP team shares the packed right operand
//! and ran 1.05–1.1× faster than two single-threaded halves
//! (docs/host_gemm.md). Those threads are torch's OpenMP pool, with
//! `torch.set_num_threads`' count.
//!
//! Before first use the routines multiply small integer matrices in every
//! transpose combination and must return the exact products; anything else
//! (a different integer width, a missing symbol) leaves MKL unused, and says
//! why in the log (`warn` for a failed check, `info` when the library is
//! simply not loaded).

use std::cell::Cell;
use std::ffi::{c_char, c_int};
use std::sync::OnceLock;

thread_local! {
    /// The `MKL_Set_Num_Threads_Local` value for this thread's calls: 1, or
    /// 0 (MKL's global setting) inside [`with_own_threads`].
    static THREADS: Cell<c_int> = const { Cell::new(1) };
}

/// Runs `f` with this thread's MKL products on MKL's own threads.
pub fn with_own_threads<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(c_int);
    impl Drop for Restore {
        fn drop(&mut self) {
            THREADS.with(|t| t.set(self.0));
        }
    }
    let _restore = Restore(THREADS.with(|t| t.replace(0)));
    f()
}

type Gemm<T> = unsafe extern "C" fn(
    transa: *const c_char,
    transb: *const c_char,
    m: *const c_int,
    n: *const c_int,
    k: *const c_int,
    alpha: *const T,
    a: *const T,
    lda: *const c_int,
    b: *const T,
    ldb: *const c_int,
    beta: *const T,
    c: *mut T,
    ldc: *const c_int,
);
type SetThreadsLocal = unsafe extern "C" fn(c_int) -> c_int;

/// The resolved routines (the library stays loaded while the process runs:
/// it was loaded before us and our handle keeps its count up).
pub struct Mkl {
    _lib: libloading::Library,
    sgemm: Gemm<f32>,
    dgemm: Gemm<f64>,
    set_threads_local: SetThreadsLocal,
}

/// Why [`Mkl::get`] found no MKL.
enum Missing {
    /// No library of [`LIBRARIES`] is loaded in the process.
    NotLoaded(String),
    /// One is, but a symbol is missing or the self-check failed.
    Refused(String),
}

/// The library names tried, in order (the soname PyTorch's wheels use).
const LIBRARIES: [&str; 1] = ["libtorch_cpu.so"];

impl Mkl {
    /// The process's MKL if PyTorch's CPU library is loaded and passes the
    /// self-check; looked up once per process.
    pub fn get() -> Option<&'static Mkl> {
        static MKL: OnceLock<Option<Mkl>> = OnceLock::new();
        MKL.get_or_init(|| match Mkl::find() {
            Ok(m) => Some(m),
            Err(Missing::NotLoaded(why)) => {
                tracing::info!(%why, "MKL not available to the host GEMM kernel");
                None
            }
            Err(Missing::Refused(why)) => {
                tracing::warn!(%why, "MKL refused for the host GEMM kernel");
                None
            }
        })
        .as_ref()
    }

    fn find() -> Result<Mkl, Missing> {
        let mut last = String::from("no library tried");
        for name in LIBRARIES {
            // RTLD_NOLOAD: only a library the process already has.
            let flags = libc_flags();
            // SAFETY: opening an already loaded library runs no
            // initialisers; with RTLD_NOLOAD nothing new is loaded.
            let lib = match unsafe { libloading::os::unix::Library::open(Some(name), flags) } {
                Ok(l) => libloading::Library::from(l),
                Err(e) => {
                    last = format!("{name}: {e}");
                    continue;
                }
            };
            // SAFETY: the symbols are MKL's Fortran BLAS entry points and
            // its thread setter, with the signatures declared above
            // (checked against their results by `self_check`).
            let m = unsafe {
                let sgemm = *lib
                    .get::<Gemm<f32>>(b"sgemm_\0")
                    .map_err(|e| Missing::Refused(format!("{name}: {e}")))?;
                let dgemm = *lib
                    .get::<Gemm<f64>>(b"dgemm_\0")
                    .map_err(|e| Missing::Refused(format!("{name}: {e}")))?;
                let set_threads_local = *lib
                    .get::<SetThreadsLocal>(b"MKL_Set_Num_Threads_Local\0")
                    .map_err(|e| Missing::Refused(format!("{name}: {e}")))?;
                Mkl {
                    _lib: lib,
                    sgemm,
                    dgemm,
                    set_threads_local,
                }
            };
            m.self_check().map_err(Missing::Refused)?;
            return Ok(m);
        }
        Err(Missing::NotLoaded(last))
    }

    /// Small integer products in all four transpose combinations, both
    /// element types, against exact results.
    fn self_check(&self) -> Result<(), String> {
        let (m, k, n) = (3usize, 4usize, 5usize);
        let a: Vec<f64> = (0..m * k).map(|i| (i % 7) as f64 - 3.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i % 5) as f64 - 2.0).collect();
        let mut want = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                want[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        let at: Vec<f64> = (0..k * m).map(|i| a[(i % m) * k + i / m]).collect();
        let bt: Vec<f64> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let (aa, rsa, csa) = if ta { (&at, 1, m) } else { (&a, k, 1) };
            let (bb, rsb, csb) = if tb { (&bt, 1, k) } else { (&b, n, 1) };
            let strides = [rsa as isize, csa as isize, rsb as isize, csb as isize];
            let (ran64, c64) = self.exact_product::<f64>((m, k, n), aa, bb, strides);
            let (ran32, c32) = self.exact_product::<f32>((m, k, n), aa, bb, strides);
            let (ran, exact) = (ran64 && ran32, c64 == want && c32 == want);
            if !ran || !exact {
                return Err(format!(
                    "self-check failed (transposes {ta}, {tb}): got {c64:?} (f64), {c32:?} (f32), want {want:?}"
                ));
            }
        }
        Ok(())
    }

    /// One self-check product in `T`: whether it ran, and its result
    /// widened to f64 (`NaN` where nothing was written).
    fn exact_product<T: MklElement>(
        &self,
        (m, k, n): (usize, usize, usize),
        a: &[f64],
        b: &[f64],
        [rsa, csa, rsb, csb]: [isize; 4],
    ) -> (bool, Vec<f64>) {
        let a: Vec<T> = a.iter().map(|&x| T::from_f64(x)).collect();
        let b: Vec<T> = b.iter().map(|&x| T::from_f64(x)).collect();
        let mut c = vec![T::from_f64(f64::NAN); m * n];
        // SAFETY: the buffers hold the matrices their strides describe.
        let ran = unsafe {
            self.product(
                false,
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
                n as isize,
                1,
            )
        };
        (ran, c.into_iter().map(T::to_f64).collect())
    }

    /// `C = A·B`, or `C += A·B` with `accumulate`, for strided matrices
    /// (`m×k`, `k×n`, `m×n`, strides in elements). Returns `false`, having
    /// done nothing, when the strides are not BLAS's (each matrix needs a
    /// unit stride on one side, and its other stride at least that side's
    /// extent) or a size exceeds `c_int`: the caller then runs its own
    /// kernel.
    ///
    /// # Safety
    /// The pointers and strides must describe valid matrices, `c` must not
    /// overlap `a` or `b`, and with `accumulate` `c` must be initialized.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn product<T: MklElement>(
        &self,
        accumulate: bool,
        m: usize,
        k: usize,
        n: usize,
        a: *const T,
        rsa: isize,
        csa: isize,
        b: *const T,
        rsb: isize,
        csb: isize,
        c: *mut T,
        rsc: isize,
        csc: isize,
    ) -> bool {
        // Column-major BLAS on row-major data: C = A·B is Cᵀ = Bᵀ·Aᵀ, with
        // Cᵀ the column-major n×m matrix of leading dimension rsc. An
        // operand with a unit column stride is its own transpose there
        // ('N', leading dimension its row stride); one with a unit row
        // stride is read transposed ('T', its column stride).
        let Some(ldc) = leading(rsc, csc, n) else {
            return false;
        };
        let (Some((opb, ldb)), Some((opa, lda))) =
            (operand(rsb, csb, n, k), operand(rsa, csa, k, m))
        else {
            return false;
        };
        let (Ok(mi), Ok(ni), Ok(ki)) = (c_int::try_from(m), c_int::try_from(n), c_int::try_from(k))
        else {
            return false;
        };
        if m == 0 || n == 0 {
            return true;
        }
        let alpha = T::ONE;
        let beta = if accumulate { T::ONE } else { T::ZERO };
        // SAFETY: checked above that each matrix is a BLAS matrix of the
        // given leading dimension over the caller's valid buffers; MKL
        // reads `c` only with beta 1 (the caller initialised it then).
        unsafe {
            let before = (self.set_threads_local)(THREADS.with(Cell::get));
            T::gemm(self)(
                &opb, &opa, &ni, &mi, &ki, &alpha, b, &ldb, a, &lda, &beta, c, &ldc,
            );
            (self.set_threads_local)(before);
        }
        true
    }
}

/// `RTLD_NOW | RTLD_NOLOAD` (glibc's values, which Linux's `dlfcn.h`
/// fixes: 0x2 and 0x4).
fn libc_flags() -> std::ffi::c_int {
    0x2 | 0x4
}

/// The result's leading dimension: row-major rows (`cs == 1`) whose row
/// stride covers the `n` columns.
fn leading(rs: isize, cs: isize, n: usize) -> Option<c_int> {
    (cs == 1 && rs >= n.max(1) as isize)
        .then(|| c_int::try_from(rs).ok())
        .flatten()
}

/// The BLAS op and leading dimension for a row-major `rows×cols` operand
/// read as its column-major transpose (`cols` × `rows` with op 'N').
fn operand(rs: isize, cs: isize, cols: usize, rows: usize) -> Option<(c_char, c_int)> {
    if cs == 1 && rs >= cols.max(1) as isize {
        Some((b'N' as c_char, c_int::try_from(rs).ok()?))
    } else if rs == 1 && cs >= rows.max(1) as isize {
        Some((b'T' as c_char, c_int::try_from(cs).ok()?))
    } else {
        None
    }
}

/// An element type MKL multiplies.
pub trait MklElement: Copy {
    const ONE: Self;
    const ZERO: Self;
    fn gemm(mkl: &Mkl) -> Gemm<Self>;
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl MklElement for f32 {
    const ONE: f32 = 1.0;
    const ZERO: f32 = 0.0;
    fn gemm(mkl: &Mkl) -> Gemm<f32> {
        mkl.sgemm
    }
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl MklElement for f64 {
    const ONE: f64 = 1.0;
    const ZERO: f64 = 0.0;
    fn gemm(mkl: &Mkl) -> Gemm<f64> {
        mkl.dgemm
    }
    fn from_f64(x: f64) -> f64 {
        x
    }
    fn to_f64(self) -> f64 {
        self
    }
}
