"""The lowerings of ops torch_xla has none for
(``hlobridge._src.dynamo.jax_lowerings``, ``docs/jax_lowerings.md``):
each compiled by ``torch.compile(backend="hlobridge", fullgraph=True)``
(so no graph break) between torch ops, against eager torch on fresh
seeded random inputs, forward and (where eager differentiates) backward
(the gradients of ``sum(out * w)``, ``w`` random), in float32 and float64
(complex where the op takes it).

Tolerances (``torch.testing.assert_close``, relative + absolute):
float32 ``rtol=1e-4, atol=1e-5``, float64 ``rtol=1e-9, atol=1e-11``
(JAX's/XLA's special-function and FFT algorithms are not torch's, so not
bitwise equal); complex as their real type. Integer results (indices,
``info``) must be equal.

Each call must run as ONE hlobridge program: ``hb.last_receipt()`` after
the compiled call lists its segments, and for a JAX lowering one of them is
the ``jax.jit`` segment stitched in with the torch ones around it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import hlobridge as hb

TOL = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-9, 1e-11)}

Make = Callable[[torch.Generator, torch.dtype], tuple[Any, ...]]


def _r(g: torch.Generator, dt: torch.dtype, *shape: int, scale: float = 1.0,
       offset: float = 0.0) -> torch.Tensor:
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale + offset).to(dt)


def _pos(g: torch.Generator, dt: torch.dtype, *shape: int, lo: float = 0.2,
         hi: float = 5.0) -> torch.Tensor:
    return (torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo).to(dt)


def _c(g: torch.Generator, dt: torch.dtype, *shape: int) -> torch.Tensor:
    real = torch.float32 if dt == torch.complex64 else torch.float64
    return torch.complex(_r(g, real, *shape), _r(g, real, *shape))


def _spd(g: torch.Generator, dt: torch.dtype, n: int, batch: tuple[int, ...] = ()) -> torch.Tensor:
    m = _r(g, torch.float64, *batch, n, n)
    return (m @ m.mT + n * torch.eye(n, dtype=torch.float64)).to(dt)


def _tri(g: torch.Generator, dt: torch.dtype, n: int, upper: bool) -> torch.Tensor:
    m = _r(g, torch.float64, n, n) * 0.3 + 2 * torch.eye(n, dtype=torch.float64)
    return (m.triu() if upper else m.tril()).to(dt)


# name -> (function, inputs, differentiable, JAX segment expected, dtypes)
def _index_reduce(s: torch.Tensor, dim: int, i: torch.Tensor, v: torch.Tensor, reduce: str,
                  **kw: Any) -> torch.Tensor:
    return s.index_reduce(dim, i, v, reduce, **kw)


# ``index_reduce`` warns once per process that it is in beta (an error under
# ``-W error``, and Dynamo cannot trace ``catch_warnings``): spend it here.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", r"index_reduce\(\) is in beta", UserWarning)
    torch.zeros(1).index_reduce(0, torch.tensor([0]), torch.ones(1), "amax")


R = (torch.float32, torch.float64)
C = (torch.complex64, torch.complex128)
CASES: dict[str, tuple[Callable[..., Any], Make, bool, bool, tuple[torch.dtype, ...]]] = {
    # torch-level
    "addmm_alpha_beta": (lambda s, a, b: torch.addmm(s, a, b, beta=0.5, alpha=2.0),
                         lambda g, d: (_r(g, d, 3, 5), _r(g, d, 3, 4), _r(g, d, 4, 5)),
                         True, False, R),
    "addmm_beta0_nan": (lambda s, a, b: torch.addmm(s, a, b, beta=0.0, alpha=3.0),
                        lambda g, d: (torch.full((3, 5), float("nan"), dtype=d),
                                      _r(g, d, 3, 4), _r(g, d, 4, 5)), False, False, R),
    "addmv": (lambda s, a, v: torch.addmv(s, a, v, beta=2.0, alpha=-1.0),
              lambda g, d: (_r(g, d, 3), _r(g, d, 3, 4), _r(g, d, 4)), True, False, R),
    "addbmm": (lambda s, a, b: torch.addbmm(s, a, b, beta=0.5, alpha=1.5),
               lambda g, d: (_r(g, d, 3, 5), _r(g, d, 2, 3, 4), _r(g, d, 2, 4, 5)),
               True, False, R),
    "addbmm_beta0_broadcast": (lambda s, a, b: torch.addbmm(s, a, b, beta=0, alpha=2.0),
                               lambda g, d: (torch.full((5,), float("nan"), dtype=d),
                                             _r(g, d, 2, 3, 4), _r(g, d, 2, 4, 5)),
                               False, False, R),
    "hypot": (torch.hypot, lambda g, d: (_r(g, d, 4, 5), _r(g, d, 4, 5)), True, True, R),
    "copysign": (torch.copysign, lambda g, d: (_r(g, d, 4, 5), _r(g, d, 5)), True, True, R),
    "exp2": (torch.exp2, lambda g, d: (_r(g, d, 4, 5),), True, False, R),
    "fmin": (torch.fmin, lambda g, d: (_r(g, d, 4, 5), _r(g, d, 4, 5)), True, False, R),
    "fmax_nan": (torch.fmax, lambda g, d: (torch.tensor([1.0, float("nan"), 2.0], dtype=d),
                                           torch.tensor([float("nan"), 0.5, 3.0], dtype=d)),
                 False, False, R),
    "signbit": (torch.signbit, lambda g, d: (_r(g, d, 4, 5),), False, True, R),
    "round_decimals": (lambda x: torch.round(x, decimals=2),
                       lambda g, d: (_r(g, d, 4, 5, scale=10),), True, False, R),
    "angle": (torch.angle, lambda g, d: (_r(g, d, 4, 5),), True, False, R),
    "angle_complex": (torch.angle, lambda g, d: (_c(g, d, 4, 5),), True, False,
                      (torch.complex64,)),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (3, 4)),
                            lambda g, d: (_r(g, d, 2, 3, 7, 9),), True, False, R),
    "grid_sample": (lambda x, grid: F.grid_sample(x, grid, align_corners=False),
                    lambda g, d: (_r(g, d, 1, 2, 5, 6), _r(g, d, 1, 4, 3, 2) * 0.9),
                    False, False, R),  # its backward stays a named error
    "unfold": (lambda x: x.unfold(1, 3, 2), lambda g, d: (_r(g, d, 4, 9, 2),), True, False, R),
    "unfold_last_overlapping": (lambda x: x.unfold(-1, 4, 1), lambda g, d: (_r(g, d, 3, 6),),
                                True, False, R),
    "unfold_0d": (lambda x: x.unfold(0, 1, 1), lambda g, d: (_r(g, d, 1).reshape(()),),
                  True, False, R),
    "cummin": (lambda x: torch.cummin(x, 1), lambda g, d: (_r(g, d, 3, 7),), True, False, R),
    "cummin_ties_nan": (lambda x: torch.cummin(x, 0), lambda g, d: (
        torch.tensor([2.0, 1.0, 1.0, 3.0, float("nan"), 0.0, 1.0], dtype=d),), False, False, R),
    "cummin_int_extremes": (lambda x: torch.cummin(x, 0), lambda g, d: (
        torch.tensor([5, -2**63, 3, -2**63, 7], dtype=torch.int64),), False, False, R),
    "stft": (lambda x, w: torch.stft(x, 8, hop_length=2, window=w, return_complex=True),
             lambda g, d: (_r(g, d, 2, 40), torch.hann_window(8, dtype=d)), True, True, R),
    "cholesky": (torch.linalg.cholesky, lambda g, d: (_spd(g, d, 4, (2,)),), True, False, R),
    "cholesky_ex": (torch.linalg.cholesky_ex, lambda g, d: (_spd(g, d, 4, (2,)),),
                    True, True, R),
    "cholesky_upper": (lambda a: torch.linalg.cholesky(a, upper=True),
                       lambda g, d: (_spd(g, d, 4),), True, False, R),
    "cholesky_ex_info": (lambda a: torch.linalg.cholesky_ex(a)[1],
                         lambda g, d: (torch.tensor([[4.0, 2.0, 1.0], [2.0, 5.0, 3.0],
                                                     [1.0, 3.0, 1.0]], dtype=d),),
                         False, True, R),
    "cholesky_ex_upper_info": (lambda a: torch.linalg.cholesky_ex(a, upper=True)[1],
                               lambda g, d: (torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=d),),
                               False, True, R),
    "solve_triangular_left": (
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=True),
        lambda g, d: (_tri(g, d, 4, True), _r(g, d, 4, 3)), True, False, R),
    "solve_triangular_right_unit": (
        lambda a, b: torch.linalg.solve_triangular(a, b, upper=False, left=False,
                                                   unitriangular=True),
        lambda g, d: (_tri(g, d, 4, False), _r(g, d, 3, 4)), True, False, R),
    "cholesky_solve": (lambda b, a: torch.cholesky_solve(b, torch.linalg.cholesky(a)),
                       lambda g, d: (_r(g, d, 4, 2), _spd(g, d, 4)), True, False, R),
    "cholesky_inverse_upper": (
        lambda a: torch.cholesky_inverse(torch.linalg.cholesky(a, upper=True), upper=True),
        lambda g, d: (_spd(g, d, 3),), True, False, R),
    # JAX
    "logcumsumexp": (lambda x: torch.logcumsumexp(x, 1),
                     lambda g, d: (_r(g, d, 3, 6, scale=3),), True, True, R),
    "rfft_ortho": (lambda x: torch.fft.rfft(x, norm="ortho"),
                   lambda g, d: (_r(g, d, 3, 8),), True, True, R),
    "fft_real_input": (torch.fft.fft, lambda g, d: (_r(g, d, 7),), True, True, R),
    "fft2_complex": (lambda x: torch.fft.fft2(x, norm="forward"),
                     lambda g, d: (_c(g, d, 2, 4, 5),), True, True, C),
    "ifftn_complex": (lambda x: torch.fft.ifftn(x, dim=(0, 2)),
                      lambda g, d: (_c(g, d, 3, 4, 5),), True, True, C),
    "irfft_n": (lambda x: torch.fft.irfft(x, n=9), lambda g, d: (_c(g, d, 2, 5),), True, True, C),
    "hfft": (torch.fft.hfft, lambda g, d: (_c(g, d, 6),), True, True, C),
    "ihfft": (torch.fft.ihfft, lambda g, d: (_r(g, d, 6),), True, True, R),
    "stft_like_rfftn": (lambda x: torch.fft.rfftn(x, dim=(-2, -1), norm="forward"),
                        lambda g, d: (_r(g, d, 2, 4, 6),), True, True, R),
    "lgamma": (torch.lgamma, lambda g, d: (_r(g, d, 5, 4, scale=3),), True, True, R),
    "digamma": (torch.digamma, lambda g, d: (_pos(g, d, 5, 4),), True, True, R),
    "digamma_poles": (torch.digamma, lambda g, d: (
        torch.tensor([0.0, -0.0, -2.0, -1.5, 1.0, 3.0], dtype=d),), False, True, R),
    "digamma_int": (torch.digamma, lambda g, d: (torch.arange(-3, 5),), False, True, (torch.float32,)),
    "lgamma_int": (torch.lgamma, lambda g, d: (torch.arange(-3, 5),), False, True, (torch.float32,)),
    "polygamma_2": (lambda x: torch.polygamma(2, x), lambda g, d: (_pos(g, d, 5, 4),),
                    True, True, R),
    "polygamma_1_negative": (lambda x: torch.polygamma(1, x),
                             lambda g, d: (_r(g, d, 8, scale=4) + 0.01,), True, False, R),
    "polygamma_3_negative": (lambda x: torch.polygamma(3, x),
                             lambda g, d: (_r(g, d, 8, scale=4) + 0.01,), True, True, R),
    "zeta_negative_q": (torch.special.zeta, lambda g, d: (
        torch.tensor([2.0, 3.0, 2.5, 4.0, 0.5, 1.0], dtype=d),
        torch.tensor([-8.3, -1.5, -2.0, 0.7, 2.0, 3.0], dtype=d)), False, True, R),
    "round_neg_decimals": (lambda x: torch.round(x, decimals=-2),
                           lambda g, d: (_r(g, d, 4, 5, scale=1000),), True, False, R),
    "round_decimals_empty": (lambda x: torch.round(x, decimals=3),
                             lambda g, d: (_r(g, d, 1, 0, 3),), False, False, R),
    "addmv_plain_broadcast": (lambda s, a, v: torch.addmv(s, a, v),
                              lambda g, d: (_r(g, d, 1), _r(g, d, 5, 4), _r(g, d, 4)),
                              True, False, R),
    "logcumsumexp_0d": (lambda x: torch.logcumsumexp(x, 0) * 2,
                        lambda g, d: (_r(g, d, 1).reshape(()),), False, False, R),
    "cholesky_empty_upper": (lambda a: torch.linalg.cholesky_ex(a, upper=True),
                             lambda g, d: (_r(g, d, 0, 0),), False, False, R),
    "ihfft2": (lambda x: torch.fft.ihfft2(x, norm="ortho"), lambda g, d: (_r(g, d, 3, 4, 6),),
               True, True, R),
    "complex": (torch.complex, lambda g, d: (_r(g, d, 4, 3), _r(g, d, 3)), True, True, R),
    "polar": (torch.polar, lambda g, d: (_pos(g, d, 5), _r(g, d, 5)), True, True,
              (torch.float32,)),
    # float64 is declined: its backward goes through torch_xla ops that get
    # complex128 wrong (as angle of complex128)
    "mvlgamma": (lambda x: torch.mvlgamma(x, 3), lambda g, d: (_pos(g, d, 5, lo=1.5),),
                 True, True, R),
    "zeta": (torch.special.zeta, lambda g, d: (_pos(g, d, 5, lo=1.5), _pos(g, d, 5)),
             False, True, R),
    "i0": (torch.i0, lambda g, d: (_r(g, d, 6, scale=3),), True, True, R),
    "i0e": (torch.special.i0e, lambda g, d: (_r(g, d, 6, scale=3),), True, True, R),
    "i1": (torch.special.i1, lambda g, d: (_r(g, d, 6, scale=3),), True, True, R),
    "i1e": (torch.special.i1e, lambda g, d: (_r(g, d, 6, scale=3),), True, True, R),
    "ndtri": (torch.special.ndtri, lambda g, d: (_pos(g, d, 6, lo=0.01, hi=0.99),),
              True, True, R),
    "log_ndtr": (torch.special.log_ndtr, lambda g, d: (_r(g, d, 6, scale=5),), True, True, R),
    "erfcx": (torch.special.erfcx, lambda g, d: (_r(g, d, 6, scale=3),), True, True, R),
    "igamma": (torch.igamma, lambda g, d: (_pos(g, d, 6), _pos(g, d, 6)), False, True, R),
    "igammac": (torch.igammac, lambda g, d: (_pos(g, d, 6), _pos(g, d, 6)), False, True, R),
    # eager differentiates igamma(a, x) in x only
    "igamma_grad_x": (lambda x: torch.igamma(torch.full_like(x, 2.5), x),
                      lambda g, d: (_pos(g, d, 6),), True, True, R),
    "igammac_grad_x": (lambda x: torch.igammac(torch.full_like(x, 0.7), x),
                       lambda g, d: (_pos(g, d, 6),), True, True, R),
    "hypot_extremes": (torch.hypot, lambda g, d: (
        torch.tensor([3e30, 0.0, float("inf"), float("nan"), 1e-30], dtype=d),
        torch.tensor([4e30, 0.0, float("nan"), 1.0, 1e-30], dtype=d)), False, True, R),
    "copysign_scalar": (lambda x: torch.copysign(x, -1.0), lambda g, d: (_r(g, d, 5),),
                        True, True, R),
    "signbit_zero_nan": (torch.signbit, lambda g, d: (
        torch.tensor([-0.0, 0.0, float("nan"), -float("nan"), -1.0, float("-inf")],
                     dtype=d),), False, True, R),
    "nextafter": (torch.nextafter, lambda g, d: (_r(g, d, 6), _r(g, d, 6)), False, True, R),
    "frexp": (torch.frexp, lambda g, d: (_r(g, d, 6, scale=100),), False, True, R),
    "logcumsumexp_inf": (lambda x: torch.logcumsumexp(x, 0), lambda g, d: (
        torch.tensor([float("-inf"), float("-inf"), 1.0, float("-inf"), 2.0], dtype=d),),
        False, True, R),
    "searchsorted": (lambda s, v: torch.searchsorted(s, v),
                     lambda g, d: (torch.sort(_r(g, d, 9))[0], _r(g, d, 4, 3)), False, True, R),
    "searchsorted_nd_right_int32": (
        lambda s, v: torch.searchsorted(s, v, right=True, out_int32=True),
        lambda g, d: (torch.sort(_r(g, d, 3, 9))[0], _r(g, d, 3, 5)), False, True, R),
    "bucketize": (lambda x, b: torch.bucketize(x, b, right=True),
                  lambda g, d: (_r(g, d, 4, 5), torch.sort(_r(g, d, 7))[0]), False, True, R),
    # scatter_reduce (scatter_lowerings.py): duplicate indices, unhit
    # positions, an index smaller than src (only its part of src is read;
    # eager's backward refuses that, so forward only)
    "scatter_reduce_amax": (lambda s, i, v: torch.scatter_reduce(s, 1, i, v, "amax",
                                                                 include_self=False),
                            lambda g, d: (_r(g, d, 3, 5), torch.randint(0, 5, (3, 6), generator=g),
                                          _r(g, d, 3, 6)), True, True, R),
    "scatter_reduce_amin_self": (lambda s, i, v: torch.scatter_reduce(s, 0, i, v, "amin"),
                                 lambda g, d: (_r(g, d, 4, 3), torch.randint(0, 4, (5, 3),
                                                                             generator=g),
                                               _r(g, d, 5, 3)), True, True, R),
    "scatter_reduce_prod": (lambda s, i, v: torch.scatter_reduce(s, 1, i, v, "prod"),
                            lambda g, d: (_r(g, d, 2, 6), torch.randint(0, 6, (2, 8), generator=g),
                                          _r(g, d, 2, 8)), True, True, R),
    "scatter_reduce_mean": (lambda s, i, v: torch.scatter_reduce(s, 0, i, v, "mean",
                                                                 include_self=False),
                            lambda g, d: (_r(g, d, 6, 2), torch.randint(0, 3, (5, 2), generator=g),
                                          _r(g, d, 5, 2)), True, True, R),
    "index_reduce_amax": (lambda s, i, v: _index_reduce(s, 1, i, v, "amax", include_self=False),
                          lambda g, d: (_r(g, d, 3, 5), torch.tensor([4, 0, 4, 2]),
                                        _r(g, d, 3, 4)), True, True, R),
    "index_reduce_mean_0d": (lambda s, i, v: _index_reduce(s, 0, i, v, "mean"),
                             lambda g, d: (_r(g, d), torch.tensor([0]), _r(g, d)), True, True, R),
    "index_reduce_prod": (lambda s, i, v: _index_reduce(s, 0, i, v, "prod"),
                          lambda g, d: (_r(g, d, 4, 2), torch.tensor([1, 3, 1]),
                                        _r(g, d, 3, 2)), True, True, R),
    # LU (lu_lowerings.py): partial pivoting as LAPACK's getrf, solves,
    # determinants; batch broadcasting, rectangular factors, a zero leading
    # entry (a row exchange is needed), a singular matrix
    "solve": (torch.linalg.solve, lambda g, d: (_r(g, d, 2, 4, 4) + 3 * torch.eye(4, dtype=d),
                                                _r(g, d, 4, 3)), True, False, R + C),
    "solve_vector_right": (lambda a, b: torch.linalg.solve(a, b, left=False),
                           lambda g, d: (_r(g, d, 5, 5), _r(g, d, 2, 5)), True, False, R),
    "solve_vector_rhs": (torch.linalg.solve, lambda g, d: (_r(g, d, 3, 4, 4), _r(g, d, 3, 4)),
                         True, False, R),
    "solve_ex_pivoting": (lambda a, b: torch.linalg.solve_ex(a, b),
                          lambda g, d: (torch.tensor([[0.0, 2.0, 1.0], [1.0, 1.0, 0.0],
                                                      [4.0, -1.0, 3.0]], dtype=d),
                                        _r(g, d, 3, 2)), True, False, R),
    "lu_factor_wide": (torch.linalg.lu_factor, lambda g, d: (_r(g, d, 2, 3, 5),), True, False,
                       R + C),
    "lu_factor_tall_singular": (torch.linalg.lu_factor_ex,
                                lambda g, d: (_r(g, d, 6, 4) * torch.tensor([1.0, 0.0, 1.0, 1.0],
                                                                            dtype=d),),
                                False, False, R),
    "lu_unpack": (lambda a: torch.lu_unpack(*torch.linalg.lu_factor(a)),
                  lambda g, d: (_r(g, d, 2, 5, 4),), True, False, R),
    "lu_solve_adjoint_left": (lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b,
                                                                 adjoint=True, left=False),
                              lambda g, d: (_r(g, d, 4, 4), _r(g, d, 3, 4)), True, False, R + C),
    "det": (torch.linalg.det, lambda g, d: (_r(g, d, 3, 5, 5),), True, False, R + C),
    "det_singular_empty": (lambda a, e: (torch.linalg.det(a), torch.linalg.det(e)),
                           lambda g, d: (_r(g, d, 4, 1) * _r(g, d, 1, 4),
                                         torch.zeros(2, 0, 0, dtype=d)), False, False, R),
    "slogdet": (torch.linalg.slogdet, lambda g, d: (_r(g, d, 2, 6, 6),), True, False,
                R + (torch.complex64,)),
    "logdet_spd": (torch.logdet, lambda g, d: (_spd(g, d, 5),), True, False, R),
    # adaptive max pooling (pool_lowerings.py): uneven windows, eager's
    # index among ties (the first) and with NaN (the last NaN), backward
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (3, 2), return_indices=True),
                            lambda g, d: (_r(g, d, 2, 3, 7, 5),), True, False, R),
    "adaptive_max_pool2d_ties_nan": (
        lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True),
        lambda g, d: (torch.tensor([[[1.0, 3.0, 3.0, 0.0, 2.0], [3.0, 1.0, 3.0, 2.0, 2.0],
                                     [float("nan"), 0.0, float("nan"), float("nan"), 1.0]]], dtype=d),),
        False, False, R),
    "adaptive_max_pool1d": (lambda x: F.adaptive_max_pool1d(x, 4),
                            lambda g, d: (_r(g, d, 3, 9),), True, False, R),
    "adaptive_max_pool3d": (lambda x: F.adaptive_max_pool3d(x, (2, 3, 2), return_indices=True),
                            lambda g, d: (_r(g, d, 1, 2, 5, 4, 3),), True, False, R),
    "max_pool2d_dilated": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1, dilation=(1, 2),
                                                  ceil_mode=True, return_indices=True),
                           lambda g, d: (_r(g, d, 2, 3, 7, 9),), True, False, R),
    "max_pool2d_dilated_neg_inf": (lambda x: F.max_pool2d(x, 2, dilation=2, padding=1,
                                                          return_indices=True),
                                   lambda g, d: (torch.full((1, 1, 5, 5), float("-inf"),
                                                            dtype=d),), False, False, R),
    "max_pool2d_dilated_int_ties": (lambda x: F.max_pool2d((x * 2).round().to(torch.int32), 3,
                                                           stride=2, padding=1, dilation=2,
                                                           return_indices=True),
                                    lambda g, d: (_r(g, d, 2, 6, 8),), False, False,
                                    (torch.float32,)),
    "max_pool3d_dilated": (lambda x: F.max_pool3d(x, 2, stride=1, dilation=2, return_indices=True),
                           lambda g, d: (_r(g, d, 1, 2, 5, 6, 5),), True, False, R),
    # undilated max pooling as strided slices (pool_lowerings.py): ResNet's
    # stem pool, ceil mode, ties (the first), NaN (the last), all -inf, 1-d/3-d
    "max_pool2d_slices": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True),
                          lambda g, d: (_r(g, d, 2, 3, 11, 9),), True, False, R),
    "max_pool2d_slices_ceil_ties_nan": (
        lambda x: F.max_pool2d(x, (3, 2), stride=2, padding=1, ceil_mode=True,
                               return_indices=True),
        lambda g, d: (torch.where(_r(g, d, 2, 2, 7, 8) > 1.0, float("nan"),
                                  (_r(g, d, 2, 2, 7, 8) * 1.5).round()),), False, False, R),
    "max_pool2d_slices_ties_grad": (
        lambda x: F.max_pool2d(x, 2, stride=1, return_indices=True),
        lambda g, d: ((_r(g, d, 1, 2, 6, 5) * 1.5).round(),), True, False, R),
    "max_pool2d_slices_neg_inf": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1,
                                                         return_indices=True),
                                  lambda g, d: (torch.full((1, 2, 5, 6), float("-inf"),
                                                           dtype=d),), False, False, R),
    "max_pool1d_slices": (lambda x: F.max_pool1d(x, 3, stride=2, padding=1, return_indices=True),
                          lambda g, d: (_r(g, d, 2, 3, 10),), True, False, R),
    "max_pool3d_slices": (lambda x: F.max_pool3d(x, 3, stride=2, padding=1, ceil_mode=True,
                                                 return_indices=True),
                          lambda g, d: (_r(g, d, 1, 2, 5, 6, 7),), True, False, R),
    "scatter_value_long_index": (lambda s, i: torch.scatter(s, 1, i, -2.5),
                                 lambda g, d: (_r(g, d, 3, 5), torch.randint(0, 5, (3, 7),
                                                                             generator=g)),
                                 True, False, R),
    "scatter_reduce_bool": (lambda s, i, v: torch.stack([
        torch.scatter_reduce(s > 0, 1, i, v > 0, r, include_self=inc)
        for r in ("sum", "prod", "amax", "amin") for inc in (True, False)]),
        lambda g, d: (_r(g, d, 3, 5), torch.randint(0, 5, (3, 6), generator=g), _r(g, d, 3, 6)),
        False, True, (torch.float32,)),
    "scatter_reduce_src_larger": (lambda s, i, v: torch.scatter_reduce(s, 1, i, v, "mean"),
                                  lambda g, d: (_r(g, d, 3, 5), torch.randint(0, 5, (2, 4),
                                                                              generator=g),
                                                _r(g, d, 3, 7)), False, True, R),
    "scatter_reduce_amax_nan": (lambda s, i, v: torch.scatter_reduce(s, 0, i, v, "amax"),
                                lambda g, d: (_r(g, d, 3), torch.tensor([0, 0, 2, 2]),
                                              torch.tensor([1.0, float("nan"), -1.0, 0.5],
                                                           dtype=d)), False, True, R),
}


def _close(got: Any, want: Any, dt: torch.dtype) -> None:
    if not isinstance(want, torch.Tensor):
        for a, b in zip(got, want, strict=True):
            _close(a, b, dt)
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    if not (want.is_floating_point() or want.is_complex()):
        assert torch.equal(got, want)
        return
    real = torch.float32 if dt in (torch.float32, torch.complex64) else torch.float64
    rtol, atol = TOL[real]
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)


def _leaves(out: Any) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else list(out)


def _params() -> list[Any]:
    return [pytest.param(name, dt, id=f"{name}-{str(dt).replace('torch.', '')}")
            for name, (_, _, _, _, dts) in CASES.items() for dt in dts]


@pytest.mark.parametrize("name,dt", _params())
def test_lowering_matches_eager_in_one_program(name: str, dt: torch.dtype) -> None:
    fn, make, grad, jax_seg, _ = CASES[name]
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(hash(name) % 2**31)
    inputs = make(g, dt)

    # Torch ops on both sides of the lowered op: one program holds them all.
    def model(*xs: Any) -> Any:
        xs = tuple(x * 1 if x.is_floating_point() or x.is_complex() else x for x in xs)
        return tuple(o + 0 if o.is_floating_point() or o.is_complex() else o
                     for o in _leaves(fn(*xs)))

    compiled = torch.compile(model, backend="hlobridge", fullgraph=True, dynamic=False)
    want = model(*inputs)
    got = compiled(*inputs)
    receipt = hb.last_receipt()
    _close(got, want, dt)
    assert receipt is not None and receipt.segments
    engines = [getattr(s, "engine", "") for s in receipt.segments]
    assert "torch_xla_lazy" in engines
    if jax_seg:
        assert "jax.jit" in engines, engines
    if not grad:
        return
    ins_e = [x.detach().clone().requires_grad_(x.is_floating_point() or x.is_complex())
             for x in inputs]
    ins_c = [x.detach().clone().requires_grad_(x.requires_grad) for x in ins_e]
    out_e = model(*ins_e)
    ws = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype)
          if not o.is_complex() else _c(g, o.dtype, *o.shape) for o in out_e]
    diff = [x for x in ins_e if x.requires_grad]
    ge = torch.autograd.grad(sum((o * w).real.sum() for o, w in zip(out_e, ws)), diff)
    out_c = compiled(*ins_c)
    gc = torch.autograd.grad(sum((o * w).real.sum() for o, w in zip(out_c, ws)),
                             [x for x in ins_c if x.requires_grad])
    _close([o.detach() for o in out_c], [o.detach() for o in out_e], dt)
    _close(list(gc), list(ge), dt)
    assert hb.last_receipt() is not None


def test_table_names_only_overloads() -> None:
    """Every key of the table is an aten overload (what AOTAutograd's
    decomposition table needs), and the backend's table holds them."""
    from hlobridge._src.dynamo.engine import decompositions
    from hlobridge._src.dynamo.jax_lowerings import jax_lowerings

    table = jax_lowerings()
    backend = decompositions()
    for op, fn in table.items():
        assert isinstance(op, torch._ops.OpOverload), op
        assert backend[op] is fn


def test_declined_variant_keeps_the_named_error() -> None:
    """A variant the table declines (``linalg.cholesky``'s error check is
    eager's data-dependent raise; ``cholesky_ex(check_errors=True)``) still
    ends in the named error, not in a wrong result."""
    torch._dynamo.reset()
    a = _spd(torch.Generator().manual_seed(0), torch.float32, 3)
    f = torch.compile(lambda x: torch.linalg.cholesky_ex(x, check_errors=True)[0],
                      backend="hlobridge", fullgraph=True)
    with pytest.raises(hb.UnsupportedOpError, match="cholesky_ex"):
        f(a)
