//! `hlobridge_gemm_{n,t}{n,t}`: a host matrix multiply for f32, f64, bf16 and
//! f16 (the last two widened to f32, as XLA:CPU does) that
//! XLA:CPU runs as a typed FFI custom call.
//!
//! The bridge's `host_gemm` rewrite turns a `stablehlo.dot_general` with
//! leading batch dimensions and one contracting dimension per side into
//! such a call. The two letters say whether the left and right operands are
//! stored transposed: the left is `[B..., M, K]` (`n`) or `[B..., K, M]`
//! (`t`), the right `[B..., K, N]` (`n`) or `[B..., N, K]` (`t`); the result
//! is `[B..., M, N]`, all row-major. Transposition is handled with strides,
//! so no operand is copied.
//!
//! Why: on small and medium matrices XLA:CPU's dot hands the work to its
//! Eigen thread pool, and waking pool threads costs more than the product
//! itself (a 128³ product took 170–300 µs in the plugin, 60 µs here on one
//! core). The rewrite leaves products beyond 512³ to XLA: there its
//! threaded dot, with AVX-512 kernels, wins on Intel (docs/host_gemm.md).
//!
//! The products themselves run in a [`Kernel`]: the `gemm` crate by
//! default (1.1–1.4× `matrixmultiply` on AMD Zen 4, on par on Intel), or
//! `matrixmultiply` with `HLOBRIDGE_GEMM_KERNEL=matrixmultiply`. A call
//! runs single-threaded in whichever thread executes the program; only
//! calls of at least 2·2²³ multiply-adds split their work (result rows, or
//! whole batch entries) over the available cores (scoped threads, at most
//! one per core, the calling thread included).

#![allow(non_upper_case_globals)]

use super::frame::{handle, BufferView, Frame};
use super::xla_ffi::*;

/// The registered targets: `(name, lhs transposed, rhs transposed)` (the
/// host-kernel ABI, `hlobridge-host-abi`).
pub use hlobridge_host_abi::gemm::TARGETS;

/// The handler for each entry of [`TARGETS`], in the same order.
pub const HANDLERS: [unsafe extern "C" fn(*mut XLA_FFI_CallFrame) -> *mut XLA_FFI_Error; 4] =
    [gemm_nn, gemm_tn, gemm_nt, gemm_tt];

unsafe extern "C" fn gemm_nn(f: *mut XLA_FFI_CallFrame) -> *mut XLA_FFI_Error {
    // SAFETY: XLA calls handlers with its own call frame.
    unsafe { handle(f, |fr| run(fr, false, false)) }
}
unsafe extern "C" fn gemm_tn(f: *mut XLA_FFI_CallFrame) -> *mut XLA_FFI_Error {
    // SAFETY: as above.
    unsafe { handle(f, |fr| run(fr, true, false)) }
}
unsafe extern "C" fn gemm_nt(f: *mut XLA_FFI_CallFrame) -> *mut XLA_FFI_Error {
    // SAFETY: as above.
    unsafe { handle(f, |fr| run(fr, false, true)) }
}
unsafe extern "C" fn gemm_tt(f: *mut XLA_FFI_CallFrame) -> *mut XLA_FFI_Error {
    // SAFETY: as above.
    unsafe { handle(f, |fr| run(fr, true, true)) }
}

/// The shape of one call: `batch` products of `[m, k] x [k, n]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    /// Product of the batch dimensions.
    pub batch: usize,
    /// Rows of the result.
    pub m: usize,
    /// Columns of the result.
    pub n: usize,
    /// Contracted size.
    pub k: usize,
}

/// Checks the operand and result dims of a call and derives its shape.
pub fn gemm_shape(
    lhs: &[i64],
    rhs: &[i64],
    out: &[i64],
    ta: bool,
    tb: bool,
) -> Result<GemmShape, String> {
    let r = lhs.len();
    if r < 2 || rhs.len() != r || out.len() != r {
        return Err(format!(
            "operand ranks must be equal and at least 2: lhs {lhs:?}, rhs {rhs:?}, result {out:?}"
        ));
    }
    if lhs.iter().chain(rhs).chain(out).any(|&d| d < 0) {
        return Err(format!(
            "negative dimension in lhs {lhs:?}, rhs {rhs:?}, result {out:?}"
        ));
    }
    let nb = r - 2;
    if lhs[..nb] != rhs[..nb] || lhs[..nb] != out[..nb] {
        return Err(format!(
            "batch dimensions differ: lhs {lhs:?}, rhs {rhs:?}, result {out:?}"
        ));
    }
    let (m, k) = if ta {
        (lhs[nb + 1], lhs[nb])
    } else {
        (lhs[nb], lhs[nb + 1])
    };
    let (k2, n) = if tb {
        (rhs[nb + 1], rhs[nb])
    } else {
        (rhs[nb], rhs[nb + 1])
    };
    if k != k2 || out[nb] != m || out[nb + 1] != n {
        return Err(format!(
            "shapes do not multiply: lhs {lhs:?}{}, rhs {rhs:?}{} -> result {out:?}",
            if ta { " (transposed)" } else { "" },
            if tb { " (transposed)" } else { "" }
        ));
    }
    let batch = lhs[..nb]
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize))
        .ok_or("batch size overflows")?;
    Ok(GemmShape {
        batch,
        m: m as usize,
        n: n as usize,
        k: k as usize,
    })
}

fn run(fr: &Frame<'_>, ta: bool, tb: bool) -> Result<(), String> {
    if fr.arity() != (2, 1) {
        return Err(format!(
            "hlobridge_gemm takes 2 operands and 1 result, got {:?}",
            fr.arity()
        ));
    }
    let (a, b, c) = (fr.arg(0)?, fr.arg(1)?, fr.ret(0)?);
    let s = gemm_shape(a.dims, b.dims, c.dims, ta, tb)?;
    if a.dtype != b.dtype || a.dtype != c.dtype {
        return Err(format!(
            "element types differ: {} {} -> {}",
            a.dtype, b.dtype, c.dtype
        ));
    }
    for (what, v) in [("lhs", &a), ("rhs", &b), ("result", &c)] {
        if v.data.is_null() && v.dims.iter().all(|&d| d > 0) {
            return Err(format!("{what} buffer is null"));
        }
    }
    let kernel = Kernel::from_env();
    match a.dtype {
        XLA_FFI_DataType_F32 => {
            // SAFETY: the dims were checked against each other and the
            // buffers are XLA's row-major allocations of those dims.
            unsafe { gemm_typed::<f32>(kernel, &a, &b, &c, s, ta, tb) }
        }
        XLA_FFI_DataType_F64 => {
            // SAFETY: as above.
            unsafe { gemm_typed::<f64>(kernel, &a, &b, &c, s, ta, tb) }
        }
        XLA_FFI_DataType_BF16 => {
            // SAFETY: as above.
            unsafe { gemm_widened::<half::bf16>(kernel, &a, &b, &c, s, ta, tb) }
        }
        XLA_FFI_DataType_F16 => {
            // SAFETY: as above.
            unsafe { gemm_widened::<half::f16>(kernel, &a, &b, &c, s, ta, tb) }
        }
        other => Err(format!(
            "hlobridge_gemm supports f32, f64, bf16 and f16, got XLA_FFI_DataType {other}"
        )),
    }
}

/// The library that runs each product (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// The `gemm` crate, single-threaded (the default).
    Gemm,
    /// The `matrixmultiply` crate.
    MatrixMultiply,
    /// PyTorch's MKL (`mkl::Mkl`), single-threaded, for f32 and f64 when
    /// the process has loaded it; the `gemm` crate otherwise, and for
    /// operands whose strides BLAS cannot express.
    Mkl,
}

impl Kernel {
    /// Every kernel, for tests and benches.
    pub const ALL: [Kernel; 3] = [Kernel::Gemm, Kernel::MatrixMultiply, Kernel::Mkl];

    /// The kernel `HLOBRIDGE_GEMM_KERNEL` names (`gemm`, the default,
    /// `matrixmultiply` or `mkl`); an unknown value is logged and the
    /// default used. Read once per process.
    pub fn from_env() -> Kernel {
        static KERNEL: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        *KERNEL.get_or_init(|| {
            let v = hlobridge_config::get(hlobridge_config::Var::GemmKernel);
            match v.as_deref().map(|v| v.trim().to_ascii_lowercase()) {
                None => Kernel::Gemm,
                Some(v) if v == "gemm" => Kernel::Gemm,
                Some(v) if v == "matrixmultiply" => Kernel::MatrixMultiply,
                Some(v) if v == "mkl" => Kernel::Mkl,
                Some(v) => {
                    tracing::warn!(
                        value = %v,
                        "HLOBRIDGE_GEMM_KERNEL must be `gemm`, `matrixmultiply` or `mkl`; using `gemm`"
                    );
                    Kernel::Gemm
                }
            }
        })
    }
}

/// An element type with a GEMM kernel in each [`Kernel`] library.
pub trait GemmElement: Copy + Default + Send + Sync {
    /// Whether [`Kernel::Mkl`] has an MKL routine for this type.
    const MKL: bool;
    /// `C = A·B` with arbitrary strides (in elements), in the process's
    /// kernel ([`Kernel::from_env`]).
    ///
    /// # Safety
    /// The pointers and strides must describe valid `m×k`, `k×n` and `m×n`
    /// matrices, and `c` must not overlap `a` or `b`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn mul(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            Self::mul_in(
                Kernel::from_env(),
                m,
                k,
                n,
                a,
                rsa,
                csa,
                b,
                rsb,
                csb,
                c,
                rsc,
                csc,
            )
        }
    }

    /// [`GemmElement::mul`] in the given kernel.
    ///
    /// # Safety
    /// As for [`GemmElement::mul`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn mul_in(
        kernel: Kernel,
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            Self::product(
                kernel, false, m, k, n, a, rsa, csa, b, rsb, csb, c, rsc, csc,
            )
        }
    }

    /// `C += A·B` in the process's kernel: the convolution's weight
    /// gradient accumulates its chunks this way.
    ///
    /// # Safety
    /// As for [`GemmElement::mul`]; `c` must also be initialized.
    #[allow(clippy::too_many_arguments)]
    unsafe fn mul_acc(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    ) {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            Self::product(
                Kernel::from_env(),
                true,
                m,
                k,
                n,
                a,
                rsa,
                csa,
                b,
                rsb,
                csb,
                c,
                rsc,
                csc,
            )
        }
    }

    /// `C = A·B`, or `C += A·B` with `accumulate`, in `kernel`.
    ///
    /// # Safety
    /// As for [`GemmElement::mul`]; with `accumulate`, `c` must be
    /// initialized.
    #[allow(clippy::too_many_arguments)]
    unsafe fn product(
        kernel: Kernel,
        accumulate: bool,
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    );
}

macro_rules! gemm_element {
    ($t:ty, $mm:path) => {
        impl GemmElement for $t {
            const MKL: bool = true;
            unsafe fn product(
                kernel: Kernel,
                accumulate: bool,
                m: usize,
                k: usize,
                n: usize,
                a: *const $t,
                rsa: isize,
                csa: isize,
                b: *const $t,
                rsb: isize,
                csb: isize,
                c: *mut $t,
                rsc: isize,
                csc: isize,
            ) {
                if m == 0 || n == 0 || (accumulate && k == 0) {
                    return;
                }
                let beta: $t = if accumulate { 1.0 } else { 0.0 };
                if kernel == Kernel::Mkl && k > 0 {
                    if let Some(mkl) = mkl::Mkl::get() {
                        // SAFETY: forwarded from the caller's contract; it
                        // returns false, touching nothing, for strides BLAS
                        // cannot take, and the crate below runs those.
                        if unsafe {
                            mkl.product(accumulate, m, k, n, a, rsa, csa, b, rsb, csb, c, rsc, csc)
                        } {
                            return;
                        }
                    }
                }
                if kernel == Kernel::MatrixMultiply || k == 0 {
                    // SAFETY: forwarded from the caller's contract
                    // (`matrixmultiply` writes zeros for the empty sum,
                    // and reads `c` only with beta 1).
                    unsafe { $mm(m, k, n, 1.0, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc) }
                } else {
                    // SAFETY: forwarded from the caller's contract. The
                    // crate computes `dst = alpha·dst + beta·lhs·rhs` and
                    // reads `c` only with `read_dst` (accumulating).
                    unsafe {
                        gemm::gemm(
                            m,
                            n,
                            k,
                            c,
                            csc,
                            rsc,
                            accumulate,
                            a,
                            csa,
                            rsa,
                            b,
                            csb,
                            rsb,
                            beta,
                            1.0,
                            false,
                            false,
                            false,
                            gemm::Parallelism::None,
                        )
                    }
                }
            }
        }
    };
}
gemm_element!(f32, matrixmultiply::sgemm);
gemm_element!(f64, matrixmultiply::dgemm);

/// Test hook (see [`set_panic_at_row_for_tests`]): a block of rows that
/// contains this row panics. `usize::MAX`: off.
static PANIC_AT_ROW: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(usize::MAX);

/// For tests only: makes every block of a product (whole matrix or donated
/// row chunk) that contains result row `row` panic, to check that such a
/// panic, on any thread, fails the kernel call instead of reporting success
/// with rows never written. `None` turns it off. Process-wide.
#[doc(hidden)]
pub fn set_panic_at_row_for_tests(row: Option<usize>) {
    PANIC_AT_ROW.store(
        row.unwrap_or(usize::MAX),
        std::sync::atomic::Ordering::SeqCst,
    );
}

/// Runs every product of the batch. Fails (with the panic's message) if
/// any block of rows panicked, on whichever thread ran it.
///
/// # Safety
/// `a`, `b`, `c` must be row-major buffers of the dims `s` was derived from,
/// and `c` must not overlap `a` or `b`.
pub(crate) unsafe fn gemm_typed<T: GemmElement + 'static>(
    kernel: Kernel,
    a: &BufferView<'_>,
    b: &BufferView<'_>,
    c: &BufferView<'_>,
    s: GemmShape,
    ta: bool,
    tb: bool,
) -> Result<(), String> {
    let (m, n, k) = (s.m, s.n, s.k);
    let out = c.data as *mut T;
    if m == 0 || n == 0 || s.batch == 0 {
        return Ok(());
    }
    if k == 0 {
        // SAFETY: the result holds batch*m*n elements.
        unsafe { std::slice::from_raw_parts_mut(out, s.batch * m * n).fill(T::default()) };
        return Ok(());
    }
    let (rsa, csa) = if ta { (1, m as isize) } else { (k as isize, 1) };
    let (rsb, csb) = if tb { (1, k as isize) } else { (n as isize, 1) };
    let (pa, pb, pc) = (a.data as usize, b.data as usize, out as usize);
    // Rows r0..r0+mr of batch entry i: every path below runs the product as
    // such blocks (one per matrix, or row chunks of it).
    let block = move |i: usize, r0: usize, mr: usize| {
        let bad = PANIC_AT_ROW.load(std::sync::atomic::Ordering::Relaxed);
        if bad != usize::MAX && (r0..r0 + mr).contains(&bad) {
            panic!("test hook: rows {r0}..{} of batch entry {i} panic", r0 + mr);
        }
        // SAFETY: `s` was checked against the buffers' dims, so rows
        // r0..r0+mr (r0 + mr <= m) of batch entry i lie inside A and C; the
        // callers below give concurrent blocks disjoint rows of C and wait
        // for all of them before returning.
        unsafe {
            T::mul_in(
                kernel,
                mr,
                k,
                n,
                (pa as *const T).add(i * m * k).offset(r0 as isize * rsa),
                rsa,
                csa,
                (pb as *const T).add(i * k * n),
                rsb,
                csb,
                (pc as *mut T).add(i * m * n + r0 * n),
                n as isize,
                1,
            )
        }
    };
    let threads = threads_for(s);
    let work = s
        .batch
        .saturating_mul(m)
        .saturating_mul(n)
        .saturating_mul(k);
    if kernel == Kernel::Mkl && threads > 1 && s.batch < threads && T::MKL && Mkl::get().is_some() {
        // MKL's own OpenMP team splits each product (module `mkl`);
        // batches of whole entries keep the split below.
        return mkl::with_own_threads(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                for i in 0..s.batch {
                    block(i, 0, m);
                }
            }))
            .map_err(|payload| {
                format!(
                    "host kernel product panicked: {}",
                    super::donation::panic_message(payload.as_ref())
                )
            })
        });
    }
    let donate = super::donation::enabled();
    // Row chunks per matrix to post for a waiting caller (see `donation`),
    // and whether a sleeping caller is worth waking for them:
    // - large products while a caller waits: one chunk per core, woken,
    //   instead of a spawned thread;
    // - mid-size products: a couple of chunks the polling caller can take.
    let posted = if threads > 1 && donate && super::donation::has_waiters() {
        Some((threads, true))
    } else if threads == 1 && donate && work >= DONATE_WORK {
        Some((
            m.div_ceil(DONATE_ROWS.max(m.div_ceil(DONATE_PARTS))),
            work >= WAKE_WORK,
        ))
    } else {
        None
    };
    if let Some((parts, wake)) = posted {
        let rows = m.div_ceil(parts);
        super::donation::run_shared(s.batch * parts, wake, move |chunk| {
            let (i, r0) = (chunk / parts, (chunk % parts) * rows);
            if r0 < m {
                block(i, r0, rows.min(m - r0));
            }
        })
    } else if threads > 1 {
        // Large calls nobody waits for: split the work over scoped threads,
        // spawned once per call, which compute under this thread's
        // floating-point state (XLA's workers flush subnormals; a fresh
        // thread would not). A batch of at least `threads` entries is split
        // into whole entries, a smaller one into row blocks of each entry
        // (about four per thread, a multiple of 48 rows, which the
        // micro-kernels' row tiles divide). Threads take the next chunk
        // from a shared counter, so one that loses its core to another
        // process holds up at most one chunk, not a fixed share.
        let parts = if s.batch >= threads {
            1
        } else {
            let rows = m.div_ceil(threads * 4).next_multiple_of(48);
            m.div_ceil(rows).max(1)
        };
        let rows = m.div_ceil(parts);
        let chunks = s.batch * parts;
        let next = std::sync::atomic::AtomicUsize::new(0);
        let fp = super::fp_env::FpEnv::current();
        let range = || loop {
            let chunk = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if chunk >= chunks {
                break;
            }
            let (i, r0) = (chunk / parts, (chunk % parts) * rows);
            if r0 < m {
                block(i, r0, rows.min(m - r0));
            }
        };
        let joined = std::thread::scope(|scope| {
            let range = &range;
            let others: Vec<_> = (1..threads.min(chunks))
                .map(|_| {
                    scope.spawn(move || {
                        let _fp = fp.enter();
                        range()
                    })
                })
                .collect();
            // Our own range's panic is caught here so the scope still
            // joins the others before the failure is reported.
            let own = std::panic::catch_unwind(std::panic::AssertUnwindSafe(range));
            std::iter::once(own)
                .chain(others.into_iter().map(|h| h.join()))
                .find_map(Result::err)
        });
        match joined {
            Some(payload) => Err(format!(
                "host kernel row block panicked: {}",
                super::donation::panic_message(payload.as_ref())
            )),
            None => Ok(()),
        }
    } else {
        for i in 0..s.batch {
            block(i, 0, m);
        }
        Ok(())
    }
}

/// A 16-bit float type that is multiplied in f32.
pub trait Widened: Copy + Default {
    /// Converts to f32 in bulk.
    fn widen(src: &[Self], dst: &mut [f32]);
    /// Converts from f32 in bulk, rounding to nearest even.
    fn narrow(src: &[f32], dst: &mut [Self]);
}

macro_rules! widened_via_half {
    ($($t:ty),*) => {$(
        impl Widened for $t {
            fn widen(src: &[Self], dst: &mut [f32]) {
                use half::slice::HalfFloatSliceExt;
                src.convert_to_f32_slice(dst)
            }
            fn narrow(src: &[f32], dst: &mut [Self]) {
                use half::slice::HalfFloatSliceExt;
                dst.convert_from_f32_slice(src)
            }
        }
    )*};
}
widened_via_half!(half::bf16, half::f16);

/// bf16/f16 products the way XLA:CPU computes them: operands widened to
/// f32, an f32 product with f32 accumulation, the result rounded once.
///
/// # Safety
/// As for [`gemm_typed`].
pub(crate) unsafe fn gemm_widened<T: Widened>(
    kernel: Kernel,
    a: &BufferView<'_>,
    b: &BufferView<'_>,
    c: &BufferView<'_>,
    s: GemmShape,
    ta: bool,
    tb: bool,
) -> Result<(), String> {
    let (na, nb, nc) = (
        s.batch * s.m * s.k,
        s.batch * s.k * s.n,
        s.batch * s.m * s.n,
    );
    // Allocation failure must not abort the plugin's process: it becomes
    // the kernel's error.
    let zeros = |n: usize| -> Result<Vec<f32>, String> {
        let mut v = Vec::new();
        v.try_reserve_exact(n).map_err(|_| {
            format!(
                "Out of memory allocating {} bytes (f32 copy of a 16-bit GEMM operand)",
                n.saturating_mul(4)
            )
        })?;
        v.resize(n, 0f32);
        Ok(v)
    };
    let (mut wa, mut wb, mut wc) = (zeros(na)?, zeros(nb)?, zeros(nc)?);
    // SAFETY: the buffers hold exactly these element counts (checked dims).
    unsafe {
        if na > 0 {
            T::widen(std::slice::from_raw_parts(a.data as *const T, na), &mut wa);
        }
        if nb > 0 {
            T::widen(std::slice::from_raw_parts(b.data as *const T, nb), &mut wb);
        }
    }
    let view = |v: &mut Vec<f32>, dims| BufferView {
        dtype: XLA_FFI_DataType_F32,
        data: v.as_mut_ptr().cast(),
        dims,
    };
    let (va, vb, vc) = (
        view(&mut wa, a.dims),
        view(&mut wb, b.dims),
        view(&mut wc, c.dims),
    );
    // SAFETY: the widened copies have the operands' dims.
    unsafe { gemm_typed::<f32>(kernel, &va, &vb, &vc, s, ta, tb)? };
    if nc > 0 {
        // SAFETY: the result holds `nc` elements.
        T::narrow(&wc, unsafe {
            std::slice::from_raw_parts_mut(c.data as *mut T, nc)
        });
    }
    Ok(())
}

/// Products (all batch entries together) of at least this many
/// multiply-adds are posted for waiting callers to help with.
const DONATE_WORK: usize = 1 << 19;
/// Products of at least this many multiply-adds also wake callers that
/// sleep while waiting (a wake-up costs tens of µs on small VMs).
const WAKE_WORK: usize = 1 << 23;
/// Row chunks per product when donating.
const DONATE_PARTS: usize = 2;
/// Fewest rows in a donated chunk.
const DONATE_ROWS: usize = 16;

/// Calls of at least this many multiply-adds per thread are split over
/// threads (below it, waking a thread costs more than it saves).
const SPLIT_WORK: usize = 1 << 23;

/// The cores this process may run on, read once (the standard library
/// reads cgroup files on every call).
fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// How many threads (the caller's included) to run a call of shape `s` on:
/// at most one per core, each with at least [`SPLIT_WORK`] multiply-adds
/// and, when one matrix is split by rows, at least 32 of its rows.
fn threads_for(s: GemmShape) -> usize {
    let per = s.m.saturating_mul(s.n).saturating_mul(s.k);
    let work = per.saturating_mul(s.batch);
    if work < 2 * SPLIT_WORK {
        return 1;
    }
    let t = cores().min(work / SPLIT_WORK);
    // Fewer entries than threads: each entry's rows are split.
    if s.batch < t {
        t.min(s.m / 32).max(1)
    } else {
        t
    }
}

mod mkl;
pub use mkl::Mkl;

#[cfg(test)]
mod tests;
