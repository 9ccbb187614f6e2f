"""Lowerings for the aten ops torch_xla has none for (its CPU fallbacks),
so that they compile and run inside the ONE hlobridge program instead of
ending in :class:`~hlobridge.errors.UnsupportedOpError` ("torch_xla has no
lowering for aten::...").

:func:`jax_lowerings` is a decomposition table (aten overload -> function),
merged into the backend's (``hlobridge._src.dynamo.engine.decompositions``),
so AOTAutograd applies it while it traces: below autograd, so every
gradient is torch's own autograd formula (whose backward ops go through
this table too). Each entry is one of two kinds:

- **torch**: torch-level ops torch_xla lowers (torch's own decomposition
  from ``torch._decomp`` where it is exact, or one spelled out here to
  match eager's kernel), e.g. ``addmm`` with ``alpha``/``beta``, ``fmin``,
  ``round.decimals``, ``linalg_cholesky_ex``'s factor through
  ``aten.cholesky``, ``unfold`` as ``index_select``;
- **jax**: a JAX function embedded as a ``hlobridge::call_jax`` node (the
  machinery of :func:`hlobridge.call_jax`: the node becomes a ``jax.jit``
  segment stitched into the program), e.g. ``_fft_r2c`` as ``jnp.fft``,
  ``lgamma`` as ``lax.lgamma``, ``hypot``, ``signbit``, torch's Hurwitz
  ``zeta`` (for ``polygamma``). Dtype promotion and output dtypes are done in
  torch around the call (JAX sees inputs of the result's dtype; integer
  results are cast in torch, since JAX without x64 has no int64).

A variant that cannot match eager returns ``NotImplemented`` (the op stays
in the graph, and torch_xla's fallback names it as before). Not covered:
ops whose JAX lowering on CPU is a LAPACK custom call (``linalg_qr``,
``linalg_eig``, ...): the PJRT CPU plugin registers no LAPACK FFI handlers.
LU factorization, LU solves, ``solve`` and determinants are torch-level
(``lu_lowerings.py``), as are adaptive and dilated max pooling
(``pool_lowerings.py``); ``scatter_reduce``/``index_reduce`` are a JAX
scatter (``scatter_lowerings.py``): all merged into :func:`jax_lowerings`.

The table, its semantics and what the op sweep measured are in
``docs/jax_lowerings.md``; tests in ``tests/python/test_jax_lowerings.py``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch

from hlobridge._src.dynamo.jax_segment import jax_segment

__all__ = ["jax_lowerings"]

aten = torch.ops.aten


def _float(x: torch.Tensor) -> torch.Tensor:
    """``x`` in the dtype a unary float op computes in (int/bool -> the
    default float type, as torch's INT_TO_FLOAT promotion)."""
    return x if x.is_floating_point() or x.is_complex() else x.to(torch.get_default_dtype())


def _jax_dtype_ok(*ts: torch.Tensor) -> bool:
    return all(t.dtype in (torch.float32, torch.float64) for t in ts)


# -- torch-level lowerings -----------------------------------------------------


def _addbmm(self: torch.Tensor, b1: torch.Tensor, b2: torch.Tensor, *, beta: Any = 1,
            alpha: Any = 1) -> torch.Tensor:
    """``beta * self + alpha * sum_b(b1[b] @ b2[b])``; ``beta == 0``
    ignores ``self`` (NaN included), as eager."""
    if not (b1.is_floating_point() or b1.is_complex()):  # eager casts the scalars
        beta, alpha = int(beta), int(alpha)
    prod = torch.bmm(b1, b2).sum(0, dtype=b1.dtype)  # int32 stays int32, as eager
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        return prod  # (M, N): self only broadcasts to it
    return (self * beta if beta != 1 else self) + prod


def _addmm_like(ref: Callable[..., Any]) -> Callable[..., Any]:
    """torch's decomposition of ``addmm``/``addmv`` only where ``alpha`` or
    ``beta`` is not 1 (torch_xla lowers the plain op itself)."""
    def lower(self: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: Any = 1,
              alpha: Any = 1) -> Any:
        if beta == 1 and alpha == 1:
            return NotImplemented
        return ref(self, a, b, beta=beta, alpha=alpha)
    return lower


def _fmin_fmax(pick: Callable[..., Any]) -> Callable[..., Any]:
    """``fmin``/``fmax``: the other operand where one is NaN (NaN only where
    both are), as eager."""
    def lower(a: torch.Tensor, b: torch.Tensor) -> Any:
        dt = torch.result_type(a, b)
        if not dt.is_floating_point:
            return NotImplemented
        a, b = a.to(dt), b.to(dt)
        m = pick(a, b)
        return torch.where(torch.isnan(a), b, torch.where(torch.isnan(b), a, m))
    return lower


def _exp2(x: torch.Tensor) -> Any:
    """``2 ** x`` (``stablehlo.power``: exact at integer exponents, as eager)."""
    xf = _float(x)
    if xf.is_complex():
        return NotImplemented
    return aten.pow.Scalar(2.0, xf)


def _adaptive_avg_pool2d(x: torch.Tensor, output_size: list[int]) -> Any:
    """torch's decomposition where torch_xla has no lowering (an output size
    that does not divide the input's)."""
    from torch._decomp import decomposition_table

    if all(x.shape[-2 + i] % output_size[i] == 0 for i in range(2)):
        return NotImplemented
    return decomposition_table[aten._adaptive_avg_pool2d.default](x, output_size)


def _pool_matrix(n_in: int, n_out: int, like: torch.Tensor) -> torch.Tensor:
    """``(n_out, n_in)``: row ``i`` averages adaptive pooling's window
    ``[floor(i*n_in/n_out), ceil((i+1)*n_in/n_out))`` (built from ``arange``,
    no tensor constant)."""
    i = torch.arange(n_out, device=like.device).unsqueeze(1)
    k = torch.arange(n_in, device=like.device).unsqueeze(0)
    start = (i * n_in) // n_out
    end = ((i + 1) * n_in + n_out - 1) // n_out
    inside = (k >= start) & (k < end)
    return inside.to(like.dtype) / (end - start).to(like.dtype)


def _adaptive_avg_pool2d_backward(grad: torch.Tensor, x: torch.Tensor) -> Any:
    """The backward of adaptive average pooling: pooling is ``P_h @ x @
    P_w^T`` (:func:`_pool_matrix`), so the input's gradient is
    ``P_h^T @ grad @ P_w``."""
    out = grad.shape[-2:]
    if all(x.shape[-2 + i] % out[i] == 0 for i in range(2)) or not x.is_floating_point():
        return NotImplemented
    ph = _pool_matrix(x.shape[-2], out[0], grad)
    pw = _pool_matrix(x.shape[-1], out[1], grad)
    return torch.matmul(torch.matmul(ph.mT, grad), pw)


def _logcumsumexp(x: torch.Tensor, dim: int) -> Any:
    return _logcumsumexp_real(x, dim)


def _logcumsumexp_real(x: torch.Tensor, dim: int) -> Any:
    if not _jax_dtype_ok(x):
        return NotImplemented
    if x.dim() == 0:
        return x.clone()
    import jax

    return jax_segment("_logcumsumexp", lambda a, axis: jax.lax.cumlogsumexp(a, axis=axis), x,
                     axis=dim % x.dim())[0]


def _angle(x: torch.Tensor) -> torch.Tensor:
    """``angle``: ``atan2(imag, real)`` for complex inputs; for real ones
    ``pi`` where negative, else 0, NaN kept (as eager)."""
    if x.dtype == torch.complex128:
        return NotImplemented  # torch_xla's real/imag of complex128 read wrong values
    if x.is_complex():
        return torch.atan2(torch.imag(x), torch.real(x))
    xf = _float(x)
    out = torch.where(xf < 0, torch.full_like(xf, math.pi), torch.zeros_like(xf))
    return torch.where(torch.isnan(xf), xf, out)


def _unfold(x: torch.Tensor, dim: int, size: int, step: int) -> Any:
    """``unfold``/``unfold_copy`` as an ``index_select`` of the windows'
    positions (torch_xla falls back on ``unfold_copy``): dimension ``dim``
    becomes the window count, a last dimension of ``size`` is added."""
    if x.dim() == 0:  # eager: a 1-long window of the one element
        return x.reshape(1).clone() if size == 1 and step > 0 else NotImplemented
    if step <= 0:
        return NotImplemented
    d = dim % x.dim()
    n = (x.shape[d] - size) // step + 1
    if n <= 0 or size <= 0:
        return NotImplemented
    starts = torch.arange(n, device=x.device).unsqueeze(1) * step
    idx = (starts + torch.arange(size, device=x.device).unsqueeze(0)).reshape(-1)
    y = torch.index_select(x, d, idx)
    y = y.reshape(*x.shape[:d], n, size, *x.shape[d + 1:])
    return y.movedim(d + 1, -1).contiguous()


def _cummin(x: torch.Tensor, dim: int) -> Any:
    """``cummin`` as ``cummax`` of the order-reversed input (``-x`` for
    floats, NaN kept; ``~x`` for integers, no overflow), whose ties and NaN
    semantics are eager's mirrored (the backend's ``cummax`` entry)."""
    if x.dtype == torch.bool:
        v, i = aten.cummax.default(torch.logical_not(x), dim)
        return torch.logical_not(v), i
    if x.is_complex():
        return NotImplemented
    flip = torch.neg if x.is_floating_point() else torch.bitwise_not
    v, i = aten.cummax.default(flip(x), dim)
    return flip(v), i


def _round_decimals(x: torch.Tensor, *, decimals: int = 0) -> Any:
    """``round(x, decimals)`` as eager CPU computes it: ``nearbyint(x *
    10^d) / 10^d``, or ``nearbyint(x / 10^-d) * 10^-d`` for negative ``d``
    (torch's reference multiplies by the inexact ``10^-d``)."""
    if not x.is_floating_point():
        return NotImplemented
    if decimals == 0:
        return aten.round.default(x)
    if decimals > 0:
        p = float(10 ** decimals)
        return aten.round.default(x * p) / p
    p = float(10 ** -decimals)
    return aten.round.default(x / p) * p


def _conj_physical(x: torch.Tensor) -> Any:
    """``conj_physical`` of a complex tensor (``jnp.conj``)."""
    if x.dtype not in (torch.complex64, torch.complex128):
        return NotImplemented
    import jax.numpy as jnp

    return jax_segment("conj_physical", lambda a: jnp.conj(a), x)[0]


def _complex(re: torch.Tensor, im: torch.Tensor) -> Any:
    """``complex(real, imag)`` (``lax.complex``)."""
    if re.dtype != im.dtype or not _jax_dtype_ok(re):
        return NotImplemented
    import jax

    re, im = torch.broadcast_tensors(re, im)
    return jax_segment("complex", lambda a, b: jax.lax.complex(a, b), re, im)[0]


def _polar(r: torch.Tensor, theta: torch.Tensor) -> Any:
    """``polar(abs, angle)``: ``abs * cos(angle) + i abs * sin(angle)``, as
    eager."""
    if r.dtype != theta.dtype or r.dtype != torch.float32:
        # float64: polar's backward reads its complex128 result through
        # torch_xla ops that get complex128 wrong (as angle's)
        return NotImplemented
    import jax
    import jax.numpy as jnp

    r, theta = torch.broadcast_tensors(r, theta)
    return jax_segment("polar", lambda a, t: jax.lax.complex(a * jnp.cos(t), a * jnp.sin(t)),
                     r, theta)[0]


def _cholesky_ex(a: torch.Tensor, upper: bool = False, check_errors: bool = False) -> Any:
    """``linalg_cholesky_ex`` through ``aten.cholesky`` (which torch_xla
    lowers to ``stablehlo.cholesky``); ``info`` as LAPACK's: 0, or the
    1-based order of the first leading minor that is not positive definite
    (XLA's factor is NaN from there on, where LAPACK's holds partial
    values: only the factor of a positive-definite matrix is compared)."""
    if check_errors:
        return NotImplemented  # eager raises on the data: not in a program
    if not _jax_dtype_ok(a):
        return NotImplemented
    if a.shape[-1] == 0:
        return a.clone(), torch.zeros(a.shape[:-2], dtype=torch.int32, device=a.device)
    factor = aten.cholesky.default(a, upper)
    # LAPACK reads one triangle: the lower one of A^H for upper=True.
    info = jax_segment("linalg_cholesky_ex.info", _cholesky_info, a.mH if upper else a)[0]
    return factor, info


def _cholesky_info(a: Any) -> Any:
    """JAX: LAPACK ``potrf``'s ``info`` of the lower triangle of ``a``
    (an unblocked factorization in a ``fori_loop``, as the first failing
    pivot is what ``info`` names); XLA DCEs it where ``info`` is unused."""
    import jax
    import jax.numpy as jnp

    n = a.shape[-1]
    idx = jnp.arange(n)

    def body(k: Any, carry: Any) -> Any:
        low, info = carry
        row = low[..., k, :]  # zero from column k on
        d = jnp.real(a[..., k, k]) - jnp.sum(jnp.abs(row) ** 2, -1)
        bad = ~(d > 0)
        info = jnp.where((info == 0) & bad, k + 1, info)
        lkk = jnp.sqrt(jnp.where(bad, 1, d))
        col = (a[..., :, k] - jnp.einsum("...ij,...j->...i", low, jnp.conj(row))) / lkk[..., None]
        col = jnp.where(idx > k, col, jnp.where(idx == k, lkk[..., None].astype(col.dtype), 0))
        return low.at[..., :, k].set(col), info

    init = (jnp.zeros_like(a), jnp.zeros(a.shape[:-2], jnp.int32))
    return jax.lax.fori_loop(0, n, body, init)[1]


def _solve_triangular(a: torch.Tensor, b: torch.Tensor, *, upper: bool, left: bool = True,
                      unitriangular: bool = False) -> torch.Tensor:
    """``linalg_solve_triangular`` through ``aten.triangular_solve``
    (``stablehlo.triangular_solve``); ``left=False`` solves the transposed
    system."""
    if left:
        return aten.triangular_solve.default(b, a, upper, False, unitriangular)[0]
    x = aten.triangular_solve.default(b.mT, a.mT, not upper, False, unitriangular)[0]
    return x.mT


def _cholesky_solve_helper(b: torch.Tensor, factor: torch.Tensor, upper: bool) -> torch.Tensor:
    """Solve ``A X = B`` with ``A = L L^H`` (``U^H U`` if ``upper``): two
    triangular solves."""
    if upper:
        y = _solve_triangular(factor.mH, b, upper=False)
        return _solve_triangular(factor, y, upper=True)
    y = _solve_triangular(factor, b, upper=False)
    return _solve_triangular(factor.mH, y, upper=True)


def _cholesky_solve(b: torch.Tensor, factor: torch.Tensor, upper: bool = False) -> Any:
    """``cholesky_solve``: batch dimensions broadcast, as eager."""
    if b.dtype != factor.dtype:
        return NotImplemented
    batch = torch.broadcast_shapes(b.shape[:-2], factor.shape[:-2])
    b = b.expand(*batch, *b.shape[-2:])
    factor = factor.expand(*batch, *factor.shape[-2:])
    return _cholesky_solve_helper(b, factor, upper)


def _cholesky_inverse(factor: torch.Tensor, upper: bool = False) -> torch.Tensor:
    n = factor.shape[-1]
    eye = torch.eye(n, dtype=factor.dtype, device=factor.device).expand(factor.shape)
    return _cholesky_solve_helper(eye, factor, upper)


# -- JAX lowerings: FFT ----------------------------------------------------------

# aten's fft_norm_mode: 0 none, 1 by sqrt(n), 2 by n (applied as given).
_FORWARD_NORM = {0: "backward", 1: "ortho", 2: "forward"}
"""jnp norm of a forward transform that scales by aten's mode."""
_INVERSE_NORM = {0: "forward", 1: "ortho", 2: "backward"}
"""jnp norm of an inverse transform that scales by aten's mode."""


def _fft_ok(x: torch.Tensor, dim: list[int]) -> bool:
    return (x.dtype in (torch.float32, torch.float64, torch.complex64, torch.complex128)
            and 0 < len(dim) <= 3 and all(x.shape[d] > 0 for d in dim))


def _fft_r2c(x: torch.Tensor, dim: list[int], normalization: int, onesided: bool) -> Any:
    if not _fft_ok(x, dim):
        return NotImplemented
    import jax.numpy as jnp

    def r2c(a: Any, axes: tuple[int, ...], norm: str, onesided: bool) -> Any:
        if onesided:
            return jnp.fft.rfftn(a, axes=axes, norm=norm)
        return jnp.fft.fftn(a.astype(jnp.result_type(a, jnp.complex64)), axes=axes, norm=norm)

    dims = tuple(d % x.dim() for d in dim)
    return jax_segment("_fft_r2c", r2c, x, axes=dims, norm=_FORWARD_NORM[normalization],
                     onesided=onesided)[0]


def _fft_c2r(x: torch.Tensor, dim: list[int], normalization: int, last_dim_size: int) -> Any:
    if not _fft_ok(x, dim) or last_dim_size <= 0:
        return NotImplemented
    import jax.numpy as jnp

    dims = tuple(d % x.dim() for d in dim)
    sizes = tuple(x.shape[d] for d in dims[:-1]) + (last_dim_size,)
    # irfftn reads only the first last_dim_size // 2 + 1 entries of the last
    # axis, as aten's c2r (which ignores the rest of a longer input).
    return jax_segment("_fft_c2r", lambda a, s, axes, norm: jnp.fft.irfftn(a, s=s, axes=axes,
                                                                          norm=norm),
                     x, s=sizes, axes=dims, norm=_INVERSE_NORM[normalization])[0]


def _fft_c2c(x: torch.Tensor, dim: list[int], normalization: int, forward: bool) -> Any:
    if not _fft_ok(x, dim):
        return NotImplemented
    import jax.numpy as jnp

    def c2c(a: Any, axes: tuple[int, ...], norm: str, forward: bool) -> Any:
        return (jnp.fft.fftn if forward else jnp.fft.ifftn)(a, axes=axes, norm=norm)

    dims = tuple(d % x.dim() for d in dim)
    norm = (_FORWARD_NORM if forward else _INVERSE_NORM)[normalization]
    return jax_segment("_fft_c2c", c2c, x, axes=dims, norm=norm, forward=forward)[0]


# -- JAX lowerings: special functions ------------------------------------------


def _unary_jax(name: str, jax_fn: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
    """A float unary op as JAX's ``jax_fn()`` (int/bool inputs promoted to
    the default float type first, as eager)."""
    def lower(x: torch.Tensor) -> Any:
        xf = _float(x)
        if not _jax_dtype_ok(xf):
            return NotImplemented
        return jax_segment(name, lambda a: jax_fn()(a), xf)[0]
    return lower


def _binary_jax(name: str, jax_fn: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
    """A float binary op (``igamma``, ``zeta``...) as JAX's ``jax_fn()``,
    after torch's type promotion and broadcasting."""
    def lower(a: Any, b: Any) -> Any:
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            return NotImplemented
        dt = torch.result_type(a, b)
        dt = dt if dt.is_floating_point else torch.get_default_dtype()
        if dt not in (torch.float32, torch.float64):
            return NotImplemented
        a, b = torch.broadcast_tensors(a.to(dt), b.to(dt))
        return jax_segment(name, lambda x, y: jax_fn()(x, y), a, b)[0]
    return lower


def _jnp(name: str) -> Callable[[], Callable[..., Any]]:
    def get() -> Callable[..., Any]:
        import jax.numpy as jnp

        return getattr(jnp, name)  # type: ignore[no-any-return]
    return get


def _signbit(x: torch.Tensor) -> Any:
    """``signbit``: the sign bit (of -0.0 and -NaN too), read by JAX's
    bitcast (torch_xla falls back on ``view(dtype)``)."""
    if x.dtype == torch.bool:
        return torch.zeros_like(x)
    if not x.is_floating_point():
        return x < 0
    if not _jax_dtype_ok(x):
        return NotImplemented
    import jax.numpy as jnp

    return jax_segment("signbit", lambda a: jnp.signbit(a), x)[0]


def _copysign_scalar(a: torch.Tensor, other: Any) -> Any:
    if not isinstance(other, (int, float)):
        return NotImplemented
    af = _float(a)
    return _binary_jax("copysign", _jnp("copysign"))(af, torch.full_like(af, float(other)))


def _frexp(x: torch.Tensor) -> Any:
    """``frexp``: mantissa in ``x``'s dtype, exponent int32 (as eager)."""
    if not _jax_dtype_ok(x):
        return NotImplemented
    import jax.numpy as jnp

    m, e = jax_segment("frexp", lambda a: jnp.frexp(a), x)
    return m, e.to(torch.int32)


def _trigamma(x: torch.Tensor) -> torch.Tensor:
    """``polygamma(1, x)``, torch's algorithm (``calc_trigamma``: reflection
    below 1/2, six recurrence steps, the asymptotic series), in torch ops."""
    pi = math.pi
    neg = x < 0.5
    s = torch.sin(pi * x)
    refl = torch.where(neg, -(pi * pi) / (s * s), torch.zeros_like(x))
    y = torch.where(neg, 1 - x, x)
    acc = torch.zeros_like(x)
    for _ in range(6):
        acc = acc + 1 / (y * y)
        y = y + 1
    ixx = 1 / (y * y)
    acc = acc + (1 + 1 / (2 * y) + ixx * (1.0 / 6 - ixx * (1.0 / 30 - ixx * (1.0 / 42)))) / y
    return torch.where(neg, -(refl + acc), acc)


_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
           7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
           -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18)


def _zeta_jax(x: Any, q: Any) -> Any:
    """JAX: the Hurwitz zeta as torch computes it (Cephes ``zeta``: direct
    sum until ``a > 9`` or converged, then Euler-Maclaurin), elementwise
    with a ``while_loop``; ``lax.zeta`` sums a fixed 9 terms, which is
    inaccurate for negative ``q`` (``polygamma`` of negative inputs)."""
    import jax
    import jax.numpy as jnp

    eps = jnp.finfo(x.dtype).eps / 2
    one = jnp.ones_like(x)
    s = q ** -x
    a = q
    b = jnp.zeros_like(x)
    special = jnp.where(x == 1, jnp.inf, jnp.where(x < 1, jnp.nan, 0.0))
    is_special = (x <= 1) | ((q <= 0) & ((q == jnp.floor(q)) | (x != jnp.floor(x))))
    special = jnp.where(x <= 1, special,
                        jnp.where(q == jnp.floor(q), jnp.inf, jnp.nan)).astype(x.dtype)
    done = is_special

    def cond(c: Any) -> Any:
        i, a, b, s, done = c
        return jnp.any(~done & ((i < 9) | (a <= 9)))

    def body(c: Any) -> Any:
        i, a, b, s, done = c
        act = ~done & ((i < 9) | (a <= 9))
        a2 = jnp.where(act, a + 1, a)
        b2 = jnp.where(act, a2 ** -x, b)
        s2 = jnp.where(act, s + b2, s)
        conv = act & (jnp.abs(b2 / s2) < eps)
        return i + 1, a2, b2, s2, done | conv

    i0 = jnp.zeros(x.shape, jnp.int32)
    _, a, b, s, done = jax.lax.while_loop(cond, body, (i0, a, b, s, done))
    w = a
    s = jnp.where(done, s, s + b * w / (x - 1) - 0.5 * b)
    aa = one
    k = jnp.zeros_like(x)
    for coef in _ZETA_A:
        aa = aa * (x + k)
        b = b / w
        t = aa * b / coef
        s = jnp.where(done, s, s + t)
        done = done | (jnp.abs(t / s) < eps)
        k = k + 1
        aa = aa * (x + k)
        b = b / w
        k = k + 1
    return jnp.where(is_special, special, s)


def _zeta(a: Any, b: Any) -> Any:
    """``special_zeta`` (torch's type promotion and broadcasting)."""
    return _binary_jax("special_zeta", lambda: _zeta_jax)(a, b)


def _polygamma(n: int, x: torch.Tensor) -> Any:
    """``polygamma`` as torch: ``digamma`` (n = 0), torch's ``trigamma``
    (n = 1), else ``(-1)^(n+1) n! zeta(n + 1, x)`` with torch's zeta."""
    xf = _float(x)
    if not _jax_dtype_ok(xf) or n < 0:
        return NotImplemented
    if n == 0:
        return aten.digamma.default(xf)
    if n == 1:
        return _trigamma(xf)
    sign = -1.0 if n % 2 == 0 else 1.0
    z = _zeta_jax_call(torch.full_like(xf, float(n + 1)), xf)
    return z * (sign * math.factorial(n))


def _zeta_jax_call(s: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return jax_segment("special_zeta", _zeta_jax, s, q)[0]


def _digamma_jax(x: Any) -> Any:
    """JAX: ``lax.digamma`` with torch's poles: ``-inf`` at ``+0``, ``+inf``
    at ``-0`` (``copysign(inf, -x)``), NaN at the negative integers
    (``lax.digamma`` gives NaN at zero)."""
    import jax
    import jax.numpy as jnp

    out = jax.lax.digamma(x)
    return jnp.where(x == 0, jnp.copysign(jnp.inf, -x).astype(x.dtype), out)


def _lax(name: str) -> Callable[[], Callable[..., Any]]:
    def get() -> Callable[..., Any]:
        import jax

        return getattr(jax.lax, name)  # type: ignore[no-any-return]
    return get


def _special(name: str) -> Callable[[], Callable[..., Any]]:
    def get() -> Callable[..., Any]:
        import jax.scipy.special as sp

        return getattr(sp, name)  # type: ignore[no-any-return]
    return get


# -- JAX lowerings: searchsorted -------------------------------------------------


def _searchsorted(seq: torch.Tensor, values: Any, *, out_int32: bool = False,
                  right: bool = False, side: str | None = None,
                  sorter: torch.Tensor | None = None) -> Any:
    """``searchsorted`` as ``jnp.searchsorted`` (``vmap`` over the leading
    dimensions of an N-d sorted sequence); indices cast to int64/int32 in
    torch."""
    if not isinstance(values, torch.Tensor) or seq.dim() == 0:
        return NotImplemented
    dt = torch.result_type(seq, values)
    if dt.is_complex or dt == torch.bool:
        return NotImplemented
    if sorter is not None:
        seq = torch.gather(seq, -1, sorter)
    seq, values = seq.to(dt), values.to(dt)
    use_right = bool(right) or side == "right"
    if seq.dim() > 1 and seq.shape[:-1] != values.shape[:-1]:
        return NotImplemented
    import jax
    import jax.numpy as jnp

    def ss(s: Any, v: Any, side: str) -> Any:
        def one(s1: Any, v1: Any) -> Any:
            return jnp.searchsorted(s1, v1, side=side, method="compare_all").astype(jnp.int32)
        if s.ndim == 1:
            return one(s, v)
        lead = s.shape[:-1]
        out = jax.vmap(one)(s.reshape(-1, s.shape[-1]), v.reshape(-1, v.shape[-1]))
        return out.reshape(*lead, v.shape[-1])

    idx = jax_segment("searchsorted", ss, seq, values, side="right" if use_right else "left")[0]
    return idx.to(torch.int32 if out_int32 else torch.int64)


def _bucketize(x: Any, boundaries: torch.Tensor, *, out_int32: bool = False,
               right: bool = False) -> Any:
    if boundaries.dim() != 1:
        return NotImplemented
    return _searchsorted(boundaries, x, out_int32=out_int32, right=right)


# -- the table -------------------------------------------------------------------


@functools.cache
def _table() -> dict[Any, Callable[..., Any]]:
    from torch._decomp import decomposition_table as torch_decomp

    t: dict[Any, Callable[..., Any]] = {}
    # torch: torch's own decompositions (exact to eager up to rounding).
    t[aten.grid_sampler_2d.default] = torch_decomp[aten.grid_sampler_2d.default]
    t[aten.round.decimals] = _round_decimals
    t[aten.conj_physical.default] = _conj_physical
    t[aten._conj_physical.default] = _conj_physical
    t[aten.complex.default] = _complex
    t[aten.polar.default] = _polar
    t[aten._adaptive_avg_pool2d.default] = _adaptive_avg_pool2d
    t[aten._adaptive_avg_pool2d_backward.default] = _adaptive_avg_pool2d_backward
    t[aten.exp2.default] = _exp2
    t[aten.fmin.default] = _fmin_fmax(torch.minimum)
    t[aten.fmax.default] = _fmin_fmax(torch.maximum)
    t[aten.cholesky_solve.default] = _cholesky_solve
    t[aten.unfold_copy.default] = _unfold
    t[aten.unfold.default] = _unfold  # a view: AOTAutograd's graph keeps it as one
    t[aten.cummin.default] = _cummin
    t[aten.addmm.default] = _addmm_like(torch_decomp[aten.addmm.default])
    t[aten.addmv.default] = torch_decomp[aten.addmv.default]  # torch_xla has none at all
    t[aten.addbmm.default] = _addbmm
    t[aten.angle.default] = _angle
    t[aten.linalg_cholesky_ex.default] = _cholesky_ex
    t[aten.linalg_solve_triangular.default] = _solve_triangular
    t[aten._cholesky_solve_helper.default] = _cholesky_solve_helper
    t[aten.cholesky_inverse.default] = _cholesky_inverse
    # closed-form index arithmetic (arange, sqrt and floor in float64)
    t[aten.triu_indices.default] = torch_decomp[aten.triu_indices.default]
    t[aten.tril_indices.default] = torch_decomp[aten.tril_indices.default]
    # jax
    t[aten._logcumsumexp.default] = _logcumsumexp_real
    t[aten.logcumsumexp.default] = _logcumsumexp
    t[aten.hypot.default] = _binary_jax("hypot", _jnp("hypot"))
    t[aten.copysign.Tensor] = _binary_jax("copysign", _jnp("copysign"))
    t[aten.copysign.Scalar] = _copysign_scalar
    t[aten.nextafter.default] = _binary_jax("nextafter", _jnp("nextafter"))
    t[aten.signbit.default] = _signbit
    t[aten.frexp.Tensor] = _frexp
    t[aten._fft_r2c.default] = _fft_r2c
    t[aten._fft_c2r.default] = _fft_c2r
    t[aten._fft_c2c.default] = _fft_c2c
    t[aten.lgamma.default] = _unary_jax("lgamma", _lax("lgamma"))
    t[aten.digamma.default] = _unary_jax("digamma", lambda: _digamma_jax)
    t[aten.polygamma.default] = _polygamma
    t[aten.i0.default] = _unary_jax("i0", _special("i0"))
    t[aten.special_i0e.default] = _unary_jax("special_i0e", _special("i0e"))
    t[aten.special_i1.default] = _unary_jax("special_i1", _special("i1"))
    t[aten.special_i1e.default] = _unary_jax("special_i1e", _special("i1e"))
    t[aten.special_ndtri.default] = _unary_jax("special_ndtri", _special("ndtri"))
    t[aten.special_log_ndtr.default] = _unary_jax("special_log_ndtr", _special("log_ndtr"))
    t[aten.special_erfcx.default] = _unary_jax("special_erfcx", _special("erfcx"))
    t[aten.igamma.default] = _binary_jax("igamma", _lax("igamma"))
    t[aten.igammac.default] = _binary_jax("igammac", _lax("igammac"))
    t[aten.special_zeta.default] = _zeta
    t[aten.searchsorted.Tensor] = _searchsorted
    t[aten.bucketize.Tensor] = _bucketize
    return t


def jax_lowerings() -> dict[Any, Callable[..., Any]]:
    """The table (module docs): aten overload -> lowering, for the
    backend's decomposition table."""
    # Mixture-of-experts ops (histc, _grouped_mm, transformers' grouped_mm
    # custom ops): grouped_lowerings.py; not cached, as transformers may
    # register its ops after the first compile.
    from hlobridge._src.dynamo.grouped_lowerings import grouped_lowerings
    from hlobridge._src.dynamo.lu_lowerings import lu_lowerings
    from hlobridge._src.dynamo.pool_lowerings import pool_lowerings
    from hlobridge._src.dynamo.scatter_lowerings import scatter_lowerings
    from hlobridge._src.dynamo.select_lowerings import select_lowerings

    return (dict(_table()) | grouped_lowerings() | select_lowerings() | scatter_lowerings()
            | lu_lowerings() | pool_lowerings())
