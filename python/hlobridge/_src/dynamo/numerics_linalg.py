"""Numerics decompositions of linear algebra and complex arithmetic:
batched and reduced SVD, refined float64 ``inv``/``eigh``, complex
``slogdet``/``logdet`` signs, complex ``div``/``abs``/norms/``logaddexp``
(``numerics_decomp`` documents each)."""

from __future__ import annotations

from typing import Any

import torch

from hlobridge._src.dynamo import linalg_numerics
from hlobridge._src.dynamo.numerics_common import HALF, REAL_OF, declines, inner_call

_aten = torch.ops.aten


def linalg_svd(a: torch.Tensor, full_matrices: bool = False, compute_uv: bool = True, *,
                driver: str | None = None) -> Any:
    """Batched SVD as one 2-D SVD per matrix, stacked; the reduced SVD
    (``full_matrices=False``, which torch_xla ignores) as the full one,
    ``U``/``Vh`` cut to ``min(m, n)`` columns/rows; empty matrices:
    :func:`linalg_numerics.empty_svd`."""
    op = _aten._linalg_svd.default
    empty = linalg_numerics.empty_svd(a, full_matrices, compute_uv, driver=driver)
    if empty is not None:
        return empty
    if compute_uv and a.dtype in (torch.float64, torch.complex128) and not declines(op):
        def full(x: torch.Tensor) -> Any:  # XLA's vectors: float32-accurate
            with inner_call(op):
                return op(x, True, True, driver=driver)
        return linalg_numerics.svd_refined(a, full_matrices, full)
    m, n = a.shape[-2], a.shape[-1]
    reduce = compute_uv and not full_matrices and m != n
    if (a.dim() <= 2 and not reduce) or declines(op):
        return NotImplemented
    batch = tuple(a.shape[:-2])
    flat = a.reshape(-1, m, n)
    with inner_call(op):
        parts = [list(op(x, full_matrices or reduce, compute_uv, driver=driver))
                 for x in flat.unbind(0)]
    if reduce:
        k = min(m, n)
        for p in parts:
            p[0], p[2] = p[0][:, :k], p[2][:k, :]
    outs = []
    for j in range(3):
        first = parts[0][j]
        if first.numel() == 0 and first.dim() == 1:  # compute_uv=False: empty U, Vh
            outs.append(first)
        else:
            outs.append(torch.stack([p[j] for p in parts]).reshape(*batch, *first.shape))
    return tuple(outs)


def inv_ex(a: torch.Tensor, *, check_errors: bool = False) -> Any:
    """``linalg_inv_ex``: :func:`linalg_numerics.inv_ex` (its ``info``;
    complex through the real embedding), the inner call of the op
    recorded as is."""
    op = _aten.linalg_inv_ex.default
    if declines(op):
        return NotImplemented
    with inner_call(op):
        return linalg_numerics.inv_ex(a, check_errors=check_errors)


def eigh(a: torch.Tensor, uplo: str = "L", compute_v: bool = True) -> Any:
    """``_linalg_eigh`` in float64/complex128: :func:`linalg_numerics.eigh_refined`
    (XLA's eigenvectors are float32-accurate there)."""
    op = _aten._linalg_eigh.default
    if (declines(op) or not compute_v or a.numel() == 0
            or a.dtype not in (torch.float64, torch.complex128)):
        return NotImplemented
    with inner_call(op):
        w, v = op(a, uplo, True)
    return linalg_numerics.eigh_refined(a, w, v, uplo)


def div_complex(a: Any, b: Any) -> Any:
    """``div.Tensor`` with a complex operand: torch_xla's result carries
    the default float dtype as its torch type (its HLO is complex), so a
    later ``cat``/``stack`` converted it to float32 (``gradient`` of
    complex64 came back float32). Here: the quotient plus a complex zero,
    which gives the result torch_xla's complex type."""
    op = _aten.div.Tensor
    cplx = [t for t in (a, b) if isinstance(t, torch.Tensor) and t.is_complex()]
    if not cplx or declines(op):
        return NotImplemented
    with inner_call(op):
        q = op(a, b)
    return q + torch.zeros((), dtype=q.dtype)


def logdet_empty(a: torch.Tensor) -> Any:
    """``logdet`` of ``0 x 0`` matrices: 0 (torch_xla failed to lower it);
    of complex matrices ``log(sign) + logabsdet`` as torch (torch_xla's
    dropped the phase: its ``slogdet`` sign, :func:`slogdet`)."""
    if a.shape[-1] != 0:
        if not a.is_complex():
            return NotImplemented
        sign, logabsdet = torch.linalg.slogdet(a)
        return torch.log(sign) + logabsdet
    return a.new_zeros(a.shape[:-2])


COMPLEX_SIGN_MAX_N = 128
"""The largest complex matrix whose ``slogdet`` sign is computed in the
program (the elimination is unrolled: one step per column)."""


def _complex_det_sign(a: torch.Tensor) -> torch.Tensor:
    """``det / |det|`` of each complex matrix of ``a``: Gaussian
    elimination with partial pivoting unrolled over the columns, the
    product of the pivots' phases and ``-1`` per row exchange; 0 for a
    singular matrix (an exactly zero pivot), as torch's sign."""
    batch, n = a.shape[:-2], a.shape[-1]
    sign = torch.ones(batch, dtype=a.dtype)
    s = a
    for k in range(n):
        m = n - k
        p = torch.argmax(s[..., :, 0].abs(), -1, keepdim=True)
        pivot_row = torch.gather(s, -2, p.unsqueeze(-1).expand(*batch, 1, m))
        piv = pivot_row[..., 0, 0]
        mag = piv.abs()
        zero = mag == 0
        safe = torch.where(zero, torch.ones_like(piv), piv)
        unit = safe / torch.where(zero, torch.ones_like(mag), mag)
        unit = torch.where(zero, torch.zeros_like(unit), unit)
        swap = 1 - 2 * (p[..., 0] != 0).to(mag.dtype)
        sign = sign * unit * swap
        if m == 1:
            break
        rows = torch.arange(1, m).reshape(*([1] * len(batch)), m - 1)
        moved = (rows == p).unsqueeze(-1)  # row p takes row 0's place
        rest = torch.where(moved, s[..., :1, :], s[..., 1:, :])
        l_col = rest[..., :, 0] / safe.unsqueeze(-1)
        s = rest[..., :, 1:] - l_col.unsqueeze(-1) * pivot_row[..., :, 1:]
    return sign


def slogdet(a: torch.Tensor) -> Any:
    """``_linalg_slogdet``: of ``0 x 0`` matrices
    :func:`linalg_numerics.empty_slogdet`; of complex ones torch_xla's
    ``logabsdet`` (right) with the sign from :func:`_complex_det_sign`
    (torch_xla's was ``1``: a real sign, error 2 relative). Above
    :data:`COMPLEX_SIGN_MAX_N` the sign is ``det / |det|`` through
    ``_linalg_det``, which torch_xla does not lower: a named error where
    the sign is used."""
    op = _aten._linalg_slogdet.default
    empty = linalg_numerics.empty_slogdet(a)
    if empty is not None:
        return empty
    if not a.is_complex() or declines(op):
        return NotImplemented
    with inner_call(op):
        _, logabsdet, lu, pivots = op(a)
    if a.shape[-1] > COMPLEX_SIGN_MAX_N:
        det = _aten._linalg_det.default(a)[0]
        sign = det / det.abs()
    else:
        sign = _complex_det_sign(a)
    return sign, logabsdet, lu, pivots


def abs_complex(x: torch.Tensor) -> Any:
    """``abs`` of a complex tensor: torch_xla's result keeps the complex
    type as its torch type (its HLO is real), so ``(z.abs() ** 2).sum()``
    came back complex64 and ``linalg.norm`` of complex refused it (``Input
    must be a floating type``). Here: ``hi * sqrt(1 + (lo / hi)^2)`` of the
    larger and smaller of ``|re|``, ``|im|`` (no overflow; inf where either
    part is infinite, as torch)."""
    if not x.is_complex():
        return NotImplemented
    re, im = x.real.abs(), x.imag.abs()
    hi, lo = torch.maximum(re, im), torch.minimum(re, im)
    r = lo / torch.where(hi == 0, torch.ones_like(hi), hi)
    out = hi * torch.sqrt(1 + r * r)
    return torch.where(torch.isinf(re) | torch.isinf(im), torch.full_like(out, float("inf")),
                       out)


def vector_norm_complex(x: torch.Tensor, ord: Any = 2, dim: Any = None,
                         keepdim: bool = False, *, dtype: torch.dtype | None = None) -> Any:
    """``linalg_vector_norm`` of a complex tensor (``linalg.norm``,
    ``norm``, ``renorm``, ``pairwise_distance``, ...: torch_xla refused
    it): the norm of ``|x|`` (:func:`abs_complex`), torch's definition.
    float16/bfloat16 without ``dtype``: accumulated in float32, as torch
    does (torch_xla summed ``|x|^p`` in the 16-bit type: ``dist(a, b, 4)``
    of a (5, 5, 5) float16 pair overflowed to inf where eager is finite)."""
    if x.dtype in HALF and dtype is None:
        op = _aten.linalg_vector_norm.default
        return op(x.float(), ord, dim, keepdim).to(x.dtype)
    if not x.is_complex():
        return NotImplemented
    real = None if dtype is None else REAL_OF.get(dtype, dtype)
    return _aten.linalg_vector_norm.default(abs_complex(x), ord, dim, keepdim, dtype=real)


def dist_half(a: torch.Tensor, b: torch.Tensor, p: Any = 2) -> Any:
    """``dist`` of float16/bfloat16: the norm of the difference in float32
    (:func:`vector_norm_complex`; torch_xla overflowed); of complex
    tensors: the real norm of the difference (torch_xla's was complex and
    its gradient 0.5 to 6.6 relative off)."""
    special = HALF + (torch.complex64, torch.complex128)
    if a.dtype not in special and (not isinstance(b, torch.Tensor) or b.dtype not in special):
        return NotImplemented
    return vector_norm_complex(a - b, p)


def div_scalar_complex(x: torch.Tensor, other: Any) -> Any:
    """``div.Scalar`` of a complex tensor: torch_xla returned the real part
    only (float32 for complex64: ``trapezoid(y, x)``,
    ``cumulative_trapezoid`` of complex inputs). Here: ``div.Tensor`` by a
    0-d tensor, which torch_xla gets right."""
    if not x.is_complex():
        return NotImplemented
    return _aten.div.Tensor(x, torch.scalar_tensor(other, dtype=x.dtype))


def logaddexp_complex(a: torch.Tensor, b: torch.Tensor) -> Any:
    """``logaddexp`` of complex tensors: torch's decomposition puts the
    Python constant ``complex(nan, nan)`` in the graph, whose generated
    code reads ``(nan+nanj)`` and fails (``NameError: name 'nanj' is not
    defined``). Here: the same formula, the NaN made from a real tensor."""
    if not (a.is_complex() or b.is_complex()):
        return NotImplemented
    dt = torch.result_type(a, b)
    a, b = a.to(dt), b.to(dt)
    mask = torch.real(a) >= torch.real(b)
    max_, min_ = torch.where(mask, a, b), torch.where(mask, b, a)
    inf_mask = torch.logical_and(torch.logical_not(torch.isfinite(torch.real(a))),
                                 torch.real(a) == torch.real(b))
    inf_vals = torch.where(torch.real(min_) < 0, min_,
                           torch.log(torch.exp(min_) + torch.exp(max_)))
    vals = torch.where(inf_mask, inf_vals, max_ + torch.log1p(torch.exp(min_ - max_)))
    nan = torch.full_like(torch.real(min_), float("nan"))
    return torch.where(torch.isnan(min_), torch.complex(nan, nan), vals)
