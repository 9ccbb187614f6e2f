"""Linear-algebra decompositions that keep torch's results where torch_xla's
lowering gives other ones (found by ``scripts/op_sweep.py``;
docs/op_numerics.md). Entries of the backend's table, through
:func:`hlobridge._src.dynamo.numerics_decomp.numerics_decompositions`.

``linalg_inv_ex`` (``linalg.inv_ex``, ``linalg.inv``, ``tensorinv``)
    torch_xla's ``info`` had the matrices' shape ((5, 5) instead of ()) and
    was all zeros, also for a singular matrix. torch's ``info`` is LAPACK
    ``getrf``'s: 0, or the 1-based index of the first pivot of the LU
    factorization with partial pivoting that is exactly zero (of ``A^T``
    for a real ``A``: torch solves ``A X = I`` through the LU of the
    transpose of a contiguous real matrix). Here: the
    inverse from torch_xla (complex: of the real ``2n x 2n`` embedding
    ``[[Re, -Im], [Im, Re]]``, whose inverse is ``[[C, -D], [D, C]]`` for
    ``(Re + i Im)^-1 = C + i D``; torch_xla's complex inverse was 1.99
    relative off), ``info`` from ``linalg_lu_factor_ex``, which
    ``lu_lowerings.py`` unrolls in the program with LAPACK's pivot choice
    for matrices up to :data:`LU_INFO_MAX_N` (an unused ``info`` is dead
    code XLA removes). torch_xla has no LU for larger ones: a named
    ``UnsupportedOpError`` where ``info`` is used (rather than a wrong
    ``info``).

``linalg_pinv`` (``linalg.pinv``, ``pinverse``, ``linalg.matrix_rank``'s
relatives)
    torch_xla's pinv was 2e-7 relative off in float64 for a 5x5 matrix of
    condition number 2.25 (float32 accuracy: XLA's Jacobi SVD gets the
    singular values to 6e-14 there, but ``U S V^H`` reconstructs the matrix
    only to 5e-7, and its ``eigh`` to 3e-9), failed on empty matrices and
    on complex ones. Here: torch's formula (``V diag(1/s) U^H`` over the singular
    values above ``max(atol, rtol * s_max)``; ``hermitian``: the
    eigendecomposition of the matrix the lower triangle defines, as torch
    reads it) on ``_linalg_svd`` / ``linalg_eigh``; complex
    matrices through the real embedding above (the pseudo-inverse of the
    embedding is the embedding of the pseudo-inverse); empty matrices:
    zeros; then one Newton-Schulz step ``X <- 2X - X A X``, which squares
    the error of XLA's factorization and keeps the truncated
    pseudo-inverse (its fixed point).

``_linalg_eigh`` in float64/complex128 (``linalg.eigh``, ``eigvalsh``, ...)
    torch_xla's eigenvectors were float32-accurate (2e-8 relative off for a
    5x5 float64 matrix, eager 1e-16; the eigenvalues 1e-15): XLA's Jacobi
    eigensolver stops at a float32-level tolerance. Here: one step of
    first-order perturbation refinement on ``B = V^H A V`` (``A`` as torch
    reads it: the ``UPLO`` triangle): ``V <- V (I + E)``, ``E_ij = B_ij /
    (B_jj - B_ii)`` where that is below 0.1 (eigenvalues closer than that
    span a subspace whose basis is free, and stays as it is), then one
    Newton-Schulz orthonormalization ``V <- V (3I - V^H V) / 2``; it squares
    the error (1e-15). float32 keeps XLA's result (its rounding is the
    limit there; the step would amplify it across small gaps).

``_linalg_svd`` in float64/complex128 with ``compute_uv`` (``linalg.svd``,
and the backward of ``svdvals``, ``matrix_norm(p='nuc')``, ``cond``, ...)
    XLA's Jacobi SVD (torch_xla: a float32-level tolerance) leaves ``U`` and
    ``V`` orthonormal but their pairing float32-accurate: ``U S V^H`` was
    1e-8 to 7e-7 relative off the matrix, the gradients of ``svdvals``, the
    nuclear norm and ``cond`` 3e-8 to 1e-3 (eager: 1e-16). Here: XLA's full
    SVD of each matrix (a wide matrix as its transpose, ``A^H = V S U^H``),
    Newton-Schulz-orthonormalized, then :data:`SVD_STEPS` steps of
    first-order refinement on ``B = U^H A V``: ``U <- U (I + E)``, ``V <- V
    (I + F)`` with skew-Hermitian ``E``, ``F`` that make ``(I - E) B (I +
    F)`` diagonal to first order: for ``i != j < n`` the symmetric part
    ``(B_ij + conj B_ji) / 2`` over ``s_j - s_i`` plus (``E``) or minus
    (``F``) the skew part over ``s_j + s_i`` (the diagonal's imaginary part
    fixes the phases), ``E_ij = B_ij / s_j`` for ``U``'s columns ``i >= n``;
    each term only where it is below 0.1 and, for the symmetric part,
    where the singular values differ by more than :data:`GAP_FLOOR` times
    the largest (closer ones span a subspace whose basis is free); ``S``
    the magnitudes of ``B``'s diagonal (second-order accurate); then
    Newton-Schulz orthonormalization of ``U`` and ``V``. Result: ``U S
    V^H`` 2e-16 relative, the gradients 1e-15 (1e-12 at condition number
    1e6); the reduced SVD is the refined full one cut to ``min(m, n)``.
    float32 keeps XLA's result. (torch_xla lowers no complex SVD: a named
    error before this is reached.)

Empty matrices (``_linalg_svd``, ``_linalg_slogdet``, ``logdet``)
    torch_xla failed to lower an SVD of a ``0 x 0`` or ``m x 0`` matrix
    (``Slice dim size 1 greater than dynamic slice dimension``) and a
    log-determinant of a ``0 x 0`` one (``limit index (-1)``). Here:
    torch's results, identity singular vectors (as many as the shape
    asks for), no singular values, determinant 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["LU_INFO_MAX_N", "eigh_refined", "empty_slogdet", "empty_svd", "inv_ex",
           "pinv", "svd_refined"]

_aten = torch.ops.aten

LU_INFO_MAX_N = 128
"""The largest matrix whose ``linalg_inv_ex`` info is computed in the
program (the factorization is unrolled: one step per column)."""


def _embed(a: torch.Tensor) -> torch.Tensor:
    re, im = a.real, a.imag
    return torch.cat([torch.cat([re, -im], -1), torch.cat([im, re], -1)], -2)


def _unembed(big: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    c, d = big[..., :rows, :cols], big[..., rows:, :cols]
    return c + 1j * d


def inv_ex(a: torch.Tensor, *, check_errors: bool = False) -> Any:
    """``linalg_inv_ex`` (module docs)."""
    op = _aten.linalg_inv_ex.default
    n = a.shape[-1]
    batch = a.shape[:-2]
    if a.numel() == 0:
        return a.new_zeros(a.shape), torch.zeros(batch, dtype=torch.int32)
    if a.is_complex():
        big, _ = op(_embed(a), check_errors=False)
        inv = _unembed(big, n, n)
    else:
        inv, _ = op(a, check_errors=False)
    # torch solves A X = I; for a real (contiguous) A it factors A^T
    # (linalg_solve_ex's use_A_T), so its info is the transpose's.
    lu_of = a if a.is_complex() else a.mT
    # lu_lowerings.py unrolls the LU up to LU_INFO_MAX_N; larger: torch_xla
    # has no LU, a named error where info is used.
    return inv, _aten.linalg_lu_factor_ex.default(lu_of)[2]


def pinv(a: torch.Tensor, *, atol: torch.Tensor | None = None,
         rtol: torch.Tensor | None = None, hermitian: bool = False) -> torch.Tensor:
    """``linalg_pinv.atol_rtol_tensor`` (module docs)."""
    m, n = a.shape[-2], a.shape[-1]
    if a.numel() == 0:
        return a.new_zeros((*a.shape[:-2], n, m))
    real_dtype = a.real.dtype if a.is_complex() else a.dtype
    rtol_v: Any = rtol
    if rtol is None:  # torch's default: eps * max(m, n), 0 where atol > 0
        default = torch.finfo(real_dtype).eps * max(m, n)
        rtol_v = default if atol is None else torch.where(
            atol > 0, torch.zeros_like(atol), torch.full_like(atol, default))
    if hermitian:  # torch reads the lower triangle only (eigh's "L")
        low = torch.tril(a, -1)
        a = low + torch.diagonal(a, 0, -2, -1).real.diag_embed().to(a.dtype) + low.mH
    if a.is_complex() and not hermitian:
        big = _pinv_real(_embed(a), atol, rtol_v, hermitian)
        return _unembed(big, n, m)
    if a.is_complex():  # hermitian complex: the embedding is symmetric
        big = _pinv_real(_embed(a), atol, rtol_v, True)
        return _unembed(big, n, m)
    return _pinv_real(a, atol, rtol_v, hermitian)


def _pinv_real(a: torch.Tensor, atol: Any, rtol: Any, hermitian: bool) -> torch.Tensor:
    x = _pinv_factored(a, atol, rtol, hermitian)
    # One Newton-Schulz step, X <- 2X - X A X: XLA's Jacobi SVD/eigh leave
    # the singular vectors about float32-accurate in float64; the step
    # squares the error, and the truncated pseudo-inverse is its fixed
    # point (A X = U_r U_r^H), so the cutoff is kept.
    return 2 * x - x @ (a @ x)


def _pinv_factored(a: torch.Tensor, atol: Any, rtol: Any, hermitian: bool) -> torch.Tensor:
    if hermitian:
        w, v = _aten.linalg_eigh.default(a, "L")
        s = w.abs()
        smax = s.amax(-1, keepdim=True)
        tol = _tol(smax, atol, rtol)
        sinv = torch.where(s > tol, 1 / w, torch.zeros_like(w))
        return (v * sinv.unsqueeze(-2)) @ v.transpose(-2, -1)
    k = min(a.shape[-2], a.shape[-1])
    u, s, vh = _aten._linalg_svd.default(a, True, True)
    u, vh = u[..., :, :k], vh[..., :k, :]
    smax = s[..., :1]
    tol = _tol(smax, atol, rtol)
    sinv = torch.where(s > tol, 1 / s, torch.zeros_like(s))
    return (vh.transpose(-2, -1) * sinv.unsqueeze(-2)) @ u.transpose(-2, -1)


def _tol(smax: torch.Tensor, atol: Any, rtol: Any) -> torch.Tensor:
    r = rtol.unsqueeze(-1) if isinstance(rtol, torch.Tensor) else rtol
    tol = smax * r
    if atol is not None:
        tol = torch.maximum(tol, atol.unsqueeze(-1) if isinstance(atol, torch.Tensor) else
                            torch.as_tensor(atol, dtype=smax.dtype))
    return tol


def eigh_refined(a: torch.Tensor, w: torch.Tensor, v: torch.Tensor,
                 uplo: str = "L") -> tuple[torch.Tensor, torch.Tensor]:
    """``_linalg_eigh``'s ``(w, v)`` of ``a`` with the eigenvectors refined
    (module docs)."""
    if uplo.upper() == "L":
        low = torch.tril(a, -1)
    else:
        low = torch.triu(a, 1).mH
    full = low + low.mH + torch.diagonal(a, 0, -2, -1).real.diag_embed().to(a.dtype)
    b = v.mH @ (full @ v)
    d = torch.diagonal(b, 0, -2, -1).real
    gap = (d.unsqueeze(-2) - d.unsqueeze(-1)).to(b.dtype)  # [i, j]: d_j - d_i
    ok = b.abs() < 0.1 * gap.abs()
    e = torch.where(ok, b / torch.where(ok, gap, torch.ones_like(gap)), torch.zeros_like(b))
    v1 = v + v @ e
    eye = torch.eye(v.shape[-1], dtype=v.dtype)
    return w, v1 @ (1.5 * eye - 0.5 * (v1.mH @ v1))


SVD_STEPS = 2
"""Refinement steps of float64/complex128 SVDs (module docs)."""

GAP_FLOOR = 1e-10
"""Singular values closer than this (relative to the largest) are treated
as equal by the SVD refinement."""


def svd_refined(a: torch.Tensor, full_matrices: bool,
                svd_full: Callable[[torch.Tensor], Any]) -> Any:
    """``_linalg_svd(a, full_matrices, compute_uv=True)`` in
    float64/complex128 with the singular vectors refined (module docs).
    ``svd_full`` is XLA's SVD of one ``m x n`` matrix with full ``U``/``Vh``."""
    m, n = a.shape[-2], a.shape[-1]
    batch = tuple(a.shape[:-2])
    parts = [svd_full(x) for x in a.reshape(-1, m, n).unbind(0)]
    u, s, vh = (torch.stack([p[j] for p in parts]).reshape(*batch, *parts[0][j].shape)
                for j in range(3))
    v = vh.mH
    tall = a if m >= n else a.mH  # A^H = V S U^H
    if m < n:
        u, v = v, u
    u, v = _orthonormal(u, 2), _orthonormal(v, 2)
    for _ in range(SVD_STEPS):
        u, s, v = _svd_step(tall, u, s, v)
    if m < n:
        u, v = v, u
    if not full_matrices:
        k = min(m, n)
        u, v = u[..., :, :k], v[..., :, :k]
    return u, s, v.mH


def _svd_step(a: torch.Tensor, u: torch.Tensor, s: torch.Tensor,
              v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One refinement step of the SVD ``a = u diag(s) v^H`` of a tall (``m >=
    n``) matrix, ``u`` ``m x m``, ``v`` ``n x n`` (module docs)."""
    m, n = a.shape[-2], a.shape[-1]
    b = u.mH @ (a @ v)  # m x n, diagonal up to XLA's error
    bk = b[..., :n, :]
    sym, skew = (bk + bk.mH) / 2, (bk - bk.mH) / 2
    si, sj = s.unsqueeze(-1), s.unsqueeze(-2)  # [i, j]: s_i, s_j
    dif, tot = (sj - si).to(b.dtype), (sj + si).to(b.dtype)
    # Pairs closer than GAP_FLOOR * s_max: a free basis to first order (the
    # symmetric part is a rounding-level residual there), kept as it is.
    far = dif.abs() > GAP_FLOOR * s.amax(-1)[..., None, None]
    x_sym = torch.where(far, _guarded(sym, dif), torch.zeros_like(sym))
    x_skew = _guarded(skew, tot)
    e = x_sym + x_skew  # U's correction (skew-Hermitian)
    f = x_sym - x_skew  # V's
    if m > n:  # U's columns beyond n: rotate out their part along the first n
        g = _guarded(b[..., n:, :], sj.to(b.dtype).expand(*b.shape[:-2], m - n, n))
        top = torch.cat([e, -g.mH], -1)
        bottom = torch.cat([g, torch.zeros_like(b[..., n:, :1]).expand(
            *b.shape[:-2], m - n, m - n)], -1)
        e = torch.cat([top, bottom], -2)
    u1 = _orthonormal(u + u @ e, 3)
    v1 = _orthonormal(v + v @ f, 3)
    return u1, torch.diagonal(bk, 0, -2, -1).abs(), v1


def _guarded(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den`` where that is below 0.1 in magnitude, else 0: a larger
    first-order correction is outside its range (close or repeated singular
    values, whose vectors' basis is free and stays as it is)."""
    ok = num.abs() < 0.1 * den.abs()
    return torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)),
                       torch.zeros_like(num))


def _orthonormal(q: torch.Tensor, steps: int = 1) -> torch.Tensor:
    """``steps`` Newton-Schulz steps towards the nearest matrix with
    orthonormal columns, ``Q (3I - Q^H Q) / 2``: each squares the error."""
    eye = torch.eye(q.shape[-1], dtype=q.dtype)
    for _ in range(steps):
        q = q @ (1.5 * eye - 0.5 * (q.mH @ q))
    return q


def empty_svd(a: torch.Tensor, full_matrices: bool = False, compute_uv: bool = True, *,
              driver: str | None = None) -> Any:
    """``_linalg_svd`` of empty matrices (module docs); ``None`` otherwise."""
    if a.numel() != 0:
        return None
    batch, (m, n) = tuple(a.shape[:-2]), tuple(a.shape[-2:])
    k = min(m, n)
    real = a.real.dtype if a.is_complex() else a.dtype
    s = torch.zeros((*batch, k), dtype=real)
    if not compute_uv:
        return a.new_zeros((0,)), s, a.new_zeros((0,))
    cu, rv = (m, n) if full_matrices else (k, k)
    u = torch.eye(m, cu, dtype=a.dtype).expand(*batch, m, cu).clone()
    vh = torch.eye(rv, n, dtype=a.dtype).expand(*batch, rv, n).clone()
    return u, s, vh


def empty_slogdet(a: torch.Tensor) -> Any:
    """``_linalg_slogdet`` of ``0 x 0`` matrices (module docs); ``None``
    otherwise."""
    if a.shape[-1] != 0:
        return None
    batch = tuple(a.shape[:-2])
    real = a.real.dtype if a.is_complex() else a.dtype
    return (torch.ones(batch, dtype=a.dtype), torch.zeros(batch, dtype=real),
            a.new_zeros(a.shape), torch.zeros((*batch, 0), dtype=torch.int32))

