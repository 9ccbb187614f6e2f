"""LU factorization, LU solves and ``linalg.solve`` inside the program.

torch_xla lowers none of ``linalg_lu_factor_ex``, ``linalg_lu_solve`` and
``_linalg_solve_ex``, so ``torch.linalg.solve``, ``solve_ex``,
``tensorsolve``, ``lu_factor``/``lu_factor_ex``, ``lu_solve``, ``det`` and the
backward of ``slogdet``/``logdet`` ended in a named ``UnsupportedOpError``
(the PJRT CPU plugin registers none of the LAPACK handlers JAX's own LU
would call).

Here, in torch ops torch_xla lowers:

- **factorization** (``linalg_lu_factor_ex``, square matrices up to
  :data:`~hlobridge._src.dynamo.linalg_numerics.LU_INFO_MAX_N`): LAPACK
  ``getrf``'s algorithm with partial pivoting unrolled in the program, one
  step per column: the pivot is the first largest ``|x|`` (``|re| + |im|``
  for complex, LAPACK's ``i?amax``), whole rows are swapped, the column
  below is scaled by the pivot's reciprocal, the trailing matrix updated.
  Outputs in LAPACK's form: ``L`` (unit diagonal implied) and ``U`` packed
  in one matrix, 1-based int32 ``pivots`` (row ``k`` was swapped with
  ``pivots[k] - 1``), ``info`` the 1-based index of the first zero pivot;
- **solve** (``linalg_lu_solve``): the row swaps applied to ``B`` in order,
  then two triangular solves (``aten.triangular_solve``); ``adjoint``
  solves ``A^H X = B`` (``U^H``, then ``L^H``, then the swaps in reverse);
  ``left=False`` solves ``X A = B`` as ``A^H X^H = B^H``;
- ``_linalg_solve_ex``: as eager, a real matrix that is contiguous is
  factored transposed and solved with ``adjoint`` (the ``LU`` it returns is
  the transpose's, which torch's backward formula expects); vector
  right-hand sides as torch defines them; batch dimensions broadcast.

- ``lu_unpack``: ``P``, ``L``, ``U`` from the packed factors (the swaps
  applied in order to the identity's rows);
- ``_linalg_det`` and ``_linalg_slogdet``: from the factors of the matrix
  (transposed where eager transposes), ``-1`` per row exchange; their
  ``LU``/``pivots`` outputs are what the backward formulas solve with
  (torch_xla's slogdet returned ones its backward could not use).

The factorization also takes ``m x n`` matrices (``min(m, n)`` steps, as
``getrf``). Gradients are torch's formulas (``linalg_solve_backward`` calls
the LU solve above; ``lu_factor``'s backward unpacks). Declined (the op
stays and is named): ``pivot=False``, ``check_errors=True`` (eager raises
on the data), matrices with a side over ``LU_INFO_MAX_N``, ``slogdet`` of
complex128 (its gradient through these ops was wrong; torch_xla reads
complex128 parts wrongly elsewhere too). Empty batches
and ``0 x 0`` matrices give eager's shapes (determinant 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from hlobridge._src.dynamo.linalg_numerics import LU_INFO_MAX_N

__all__ = ["lu_lowerings"]

_aten = torch.ops.aten


def _magnitude(x: torch.Tensor) -> torch.Tensor:
    return x.real.abs() + x.imag.abs() if x.is_complex() else x.abs()


def lu_factor(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(LU, pivots, info)`` of each ``m x n`` matrix of ``a`` (module
    docs): ``min(m, n)`` elimination steps."""
    batch = a.shape[:-2]
    m, n = a.shape[-2], a.shape[-1]
    rows = torch.arange(m, device=a.device).reshape(m, 1)
    cols = torch.arange(n, device=a.device).reshape(1, n)
    info = torch.zeros(batch, dtype=torch.int32, device=a.device)
    pivots = []
    s = a
    for k in range(min(m, n)):
        mag = _magnitude(s[..., k:, k])
        p = torch.argmax(mag, -1) + k  # (batch): the first largest
        pivots.append(p)
        row_k = s[..., k:k + 1, :]
        row_p = torch.gather(s, -2, p.reshape(*batch, 1, 1).expand(*batch, 1, n))
        at_p = rows == p.reshape(*batch, 1, 1)
        s = torch.where(rows == k, row_p, torch.where(at_p, row_k, s))
        piv = s[..., k, k]
        zero = piv == 0
        info = torch.where((info == 0) & zero, torch.full_like(info, k + 1), info)
        if k == m - 1:
            break
        safe = torch.where(zero, torch.ones_like(piv), piv)
        s = torch.where((rows > k) & (cols == k), s * (1 / safe).reshape(*batch, 1, 1), s)
        if k == n - 1:
            break
        l_col = s[..., :, k:k + 1]  # (..., m, 1)
        u_row = s[..., k:k + 1, :]  # (..., 1, n)
        trailing = (rows > k) & (cols > k)
        s = s - torch.where(trailing, l_col * u_row, torch.zeros_like(s))
    piv_out = (torch.stack(pivots, -1) + 1).to(torch.int32)
    return s, piv_out, info


def lu_unpack(lu: torch.Tensor, pivots: torch.Tensor, unpack_data: bool = True,
              unpack_pivots: bool = True) -> Any:
    """``lu_unpack``: ``P`` (``A = P L U``: the row swaps applied in order to
    the identity's rows), unit lower ``L`` (``m x k``), upper ``U``
    (``k x n``), ``k = min(m, n)``; an output not asked for is empty, as
    eager."""
    m, n = lu.shape[-2], lu.shape[-1]
    k = min(m, n)
    if k == 0 or pivots.shape[-1] != k:
        return NotImplemented
    empty = lu.new_empty((0,))
    if unpack_data:
        eye = torch.eye(m, k, dtype=lu.dtype, device=lu.device)
        lower = torch.tril(lu[..., :, :k], -1) + eye
        upper = torch.triu(lu[..., :k, :])
    else:
        lower = upper = empty
    if not unpack_pivots:
        return empty, lower, upper
    batch = pivots.shape[:-1]
    idx = torch.arange(m, device=lu.device)
    perm = idx.expand(*batch, m)
    for j in range(k):
        p = (pivots[..., j:j + 1].to(torch.int64) - 1)  # (..., 1)
        at_j = perm[..., j:j + 1]
        at_p = torch.gather(perm, -1, p)
        perm = torch.where(idx == j, at_p, torch.where(idx == p, at_j, perm))
    # P^T A = L U with (P^T A)[i] = A[perm[i]]: P[perm[i], i] = 1
    perm_matrix = (idx.reshape(m, 1) == perm.unsqueeze(-2)).to(lu.dtype)
    return perm_matrix, lower, upper


def _swap_rows(b: torch.Tensor, pivots: torch.Tensor, order: range) -> torch.Tensor:
    """``b`` with row ``k`` swapped with row ``pivots[k] - 1``, for ``k`` in
    ``order``."""
    m = b.shape[-2]
    rows = torch.arange(m, device=b.device).reshape(m, 1)
    batch = b.shape[:-2]
    for k in order:
        p = (pivots[..., k].to(torch.int64) - 1).reshape(*batch, 1, 1)
        row_k = b[..., k:k + 1, :]
        row_p = torch.gather(b, -2, p.expand(*batch, 1, b.shape[-1]))
        b = torch.where(rows == k, row_p, torch.where(rows == p, row_k, b))
    return b


def lu_solve(lu: torch.Tensor, pivots: torch.Tensor, b: torch.Tensor, *, left: bool = True,
             adjoint: bool = False) -> Any:
    """``linalg_lu_solve`` (module docs)."""
    if not left:  # X A = B  <=>  A^H X^H = B^H
        return lu_solve(lu, pivots, b.mH, left=True, adjoint=not adjoint).mH
    if lu.shape[-1] != lu.shape[-2] or b.dtype != lu.dtype:
        return NotImplemented
    if lu.numel() == 0 or b.numel() == 0:
        batch = torch.broadcast_shapes(lu.shape[:-2], pivots.shape[:-1], b.shape[:-2])
        return b.new_zeros(*batch, *b.shape[-2:])
    n = lu.shape[-1]
    batch = torch.broadcast_shapes(lu.shape[:-2], pivots.shape[:-1], b.shape[:-2])
    lu = lu.expand(*batch, n, n)
    pivots = pivots.expand(*batch, n)
    b = b.expand(*batch, *b.shape[-2:])
    tri = _aten.triangular_solve.default
    if not adjoint:  # A = P L U: X = U^-1 L^-1 P^T B
        y = _swap_rows(b, pivots, range(n))
        y = tri(y, lu, False, False, True)[0]  # L, unit diagonal
        return tri(y, lu, True, False, False)[0]  # U
    # A^H = U^H L^H P^T: X = P L^-H U^-H B
    lu_h = lu.mH
    y = tri(b, lu_h, False, False, False)[0]  # U^H is lower
    y = tri(y, lu_h, True, False, True)[0]  # L^H is upper, unit diagonal
    return _swap_rows(y, pivots, range(n - 1, -1, -1))


def _empty_factors(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The factors of an empty batch or of ``m x 0``/``0 x n`` matrices."""
    k = min(a.shape[-2:])
    return (a.new_zeros(a.shape), torch.zeros(*a.shape[:-2], k, dtype=torch.int32,
                                              device=a.device),
            torch.zeros(a.shape[:-2], dtype=torch.int32, device=a.device))


def _lu_factor_ex(a: torch.Tensor, *, pivot: bool = True, check_errors: bool = False) -> Any:
    if not pivot or check_errors or a.dim() < 2 or max(a.shape[-2:]) > LU_INFO_MAX_N:
        return NotImplemented
    if a.numel() == 0:
        return _empty_factors(a)
    return lu_factor(a)


def _is_vector_rhs(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch's rule: ``B`` is a batch of vectors when it is 1-d, or has one
    dimension fewer than ``A`` and ``A``'s batch-and-rows shape."""
    return b.dim() == 1 or (b.dim() == a.dim() - 1 and b.shape == a.shape[:-1])


def _solve_ex(a: torch.Tensor, b: torch.Tensor, *, left: bool = True,
              check_errors: bool = False) -> Any:
    if (check_errors or a.dim() < 2 or a.shape[-1] != a.shape[-2]
            or a.shape[-1] > LU_INFO_MAX_N or a.dtype != b.dtype):
        return NotImplemented
    vector = _is_vector_rhs(a, b)
    rhs = b.unsqueeze(-1) if vector else b
    if not left and vector:
        return NotImplemented
    if a.numel() == 0 or rhs.numel() == 0:  # an empty batch or no right-hand side
        lu, pivots, info = _lu_factor_ex(a)
        batch = torch.broadcast_shapes(a.shape[:-2], rhs.shape[:-2])
        x = rhs.new_zeros(*batch, *rhs.shape[-2:])
        return (x.squeeze(-1) if vector else x), lu, pivots, info
    # As eager (linalg_solve_ex_out): a real contiguous A is factored
    # transposed, and its backward solves with the LU it returns.
    use_a_t = a.is_contiguous() and not a.is_complex()
    lu, pivots, info = lu_factor(a.mT if use_a_t else a)
    x = lu_solve(lu, pivots, rhs, left=left, adjoint=use_a_t)
    if x is NotImplemented:
        return NotImplemented
    return (x.squeeze(-1) if vector else x), lu, pivots, info


def _lu_for_det(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(LU, pivots, row exchanges)`` as eager's ``_linalg_det`` and
    ``_linalg_slogdet`` factor (a real contiguous matrix transposed: the
    determinant is the same, and their backward formulas expect that
    ``LU``)."""
    lu, pivots, _ = lu_factor(a.mT if a.is_contiguous() and not a.is_complex() else a)
    n = a.shape[-1]
    swaps = (pivots != torch.arange(1, n + 1, dtype=torch.int32, device=a.device)).sum(-1)
    return lu, pivots, swaps


def _slogdet(a: torch.Tensor) -> Any:
    """``_linalg_slogdet``: sign and ``log|det|`` from the LU factors (the
    product of the pivots' signs or phases, ``-1`` per row exchange; the sum
    of ``log|u_ii|``), with eager's ``LU`` and ``pivots`` for the backward.
    ``0 x 0`` and larger matrices: :func:`numerics_linalg.slogdet`."""
    from hlobridge._src.dynamo.numerics_linalg import slogdet

    if (a.shape[-1] != a.shape[-2] or a.shape[-1] > LU_INFO_MAX_N or a.shape[-1] == 0
            or a.dtype == torch.complex128):  # its gradient came out wrong: left named
        return slogdet(a)
    if a.numel() == 0:  # an empty batch
        lu, pivots, _ = _empty_factors(a)
        return a.new_zeros(a.shape[:-2]), a.real.new_zeros(a.shape[:-2]), lu, pivots
    lu, pivots, swaps = _lu_for_det(a)
    diag = lu.diagonal(0, -2, -1)
    mag = diag.abs()
    phase = torch.where(mag == 0, torch.zeros_like(diag),
                        diag / torch.where(mag == 0, torch.ones_like(mag), mag))
    flip = (1 - 2 * (swaps % 2)).to(a.dtype)
    sign = phase.prod(-1) * flip
    return sign, mag.log().sum(-1), lu, pivots


def _det(a: torch.Tensor) -> Any:
    """``_linalg_det``: the product of ``U``'s diagonal, ``-1`` per row
    exchange, with eager's ``LU`` and ``pivots`` for the backward."""
    if a.shape[-1] != a.shape[-2] or a.shape[-1] > LU_INFO_MAX_N:
        return NotImplemented
    if a.numel() == 0:  # 0 x 0 matrices (determinant 1) or an empty batch
        lu, pivots, _ = _empty_factors(a)
        return a.new_ones(a.shape[:-2]), lu, pivots
    lu, pivots, swaps = _lu_for_det(a)
    flip = (1 - 2 * (swaps % 2)).to(a.dtype)
    return lu.diagonal(0, -2, -1).prod(-1) * flip, lu, pivots


def lu_lowerings() -> dict[Any, Callable[..., Any]]:
    """aten overload -> lowering, merged into the backend's table through
    :func:`~hlobridge._src.dynamo.jax_lowerings.jax_lowerings`."""
    return {
        _aten.linalg_lu_factor_ex.default: _lu_factor_ex,
        _aten.linalg_lu_solve.default: lu_solve,
        _aten.lu_unpack.default: lu_unpack,
        _aten._linalg_solve_ex.default: _solve_ex,
        _aten._linalg_slogdet.default: _slogdet,
        _aten._linalg_det.default: _det,
    }
