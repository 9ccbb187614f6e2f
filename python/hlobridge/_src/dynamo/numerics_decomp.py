"""Decompositions that keep torch's results where torch_xla's lowering of an
op gives a silently different one (found by ``scripts/op_sweep.py``; the
sweep's results are in ``docs/op_numerics.md``).

:func:`numerics_decompositions` is merged into the backend's table
(``hlobridge._src.dynamo.engine.decompositions``). Each entry, with what the
sweep measured before (after: equal to eager torch, tested in
``tests/python/test_op_numerics.py``):

``amax``/``amin``, ``max.dim``/``min.dim``, ``max``/``min`` (no dim)
    torch_xla starts the reduction at ``-FLT_MAX`` (``+FLT_MAX``), not
    ``-inf``: a row of only ``-inf`` (a fully masked attention row) gave
    ``-3.4e38`` instead of ``-inf``. And the XLA CPU plugin compiles max/min
    with ``xla_cpu_enable_fast_min_max`` on by default, so a NaN in the
    row was dropped (``amax([3, nan, -1])`` gave 3, torch gives NaN). Here:
    the index of the extreme (below) and the value gathered at it, so
    values and indices agree with each other and with torch.

``argmax``/``argmin``, the indices of ``max.dim``/``min.dim``
    torch treats NaN as the extreme and returns the first NaN's index;
    torch_xla's reducer (``compare GE`` + ``select``) never picks a NaN
    (both rows of the sweep's NaN case had the wrong index). Here: the
    first NaN's index where a slice has one, else torch_xla's index (whose
    ties already go to the first index, as torch's).

``aminmax`` without ``dim``
    returned the input's shape ((5, 5, 5) for a (5, 5, 5) input) instead of
    0-d results. Here: ``amin`` and ``amax`` over every dimension.

``cumsum`` of integer/bool tensors without ``dtype``
    torch accumulates in int64 and returns int64; torch_xla accumulated in
    the input's type and returned int32 for int32 input (wrong dtype, and
    int32 overflow: ``cumsum`` of eight ``2**30`` gave negative values).
    Here: the input is widened to int64 first.

``max_pool{2,3}d_with_indices`` (also ``max_pool1d``), ``cummax``
    the indices came back as ``uint32`` (pooling) or ``int32`` (``cummax``)
    although torch, and the traced graph, say int64 (torch_xla's tensor
    reports int64; its HLO type is 32-bit). Here: the indices are added to
    an int64 zero, which makes torch_xla emit the widening convert.

``_linalg_svd`` of a batch of matrices (``linalg.svd``, ``svdvals``,
``matrix_norm('nuc')``, ``pinv``, ...)
    torch_xla's batched SVD gives the singular values the right data but a
    wrong shape to later ops: ``matrix_norm(x, 'nuc')`` of a (5, 5, 5) batch
    summed over the batch instead of over each matrix's values (error 0.87
    relative, eager 9e-8; its gradient 2.3), and torch_xla itself fails on
    ``svd(x).S.sum(-1)`` ("expected parameter 0 of size 16 but got ... 48").
    Here: one 2-D SVD per matrix of the batch, stacked (the batch is
    unrolled in the program: fine for the small batches SVD sees in models).
    Still open (docs/op_numerics.md): torch_xla ignores
    ``full_matrices=False`` (``U`` comes back (6, 6) for a (6, 4) matrix),
    so ``linalg.svd``'s reduced ``U``/``Vh`` have the wrong shape and the
    backward of SVD-based ops on non-square matrices fails to compile.

Each decomposition calls the op it replaces; a per-thread guard makes that
inner call return ``NotImplemented`` from the table, so the tracer records
the op itself (``proxy_tensor`` falls back to the op on ``NotImplemented``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["numerics_decompositions"]

_aten = torch.ops.aten
_busy = threading.local()


@contextlib.contextmanager
def _inner(op: Any) -> Iterator[None]:
    """While active, this module's decomposition of ``op`` declines."""
    stack: set[Any] = getattr(_busy, "ops", None) or set()
    _busy.ops = stack
    stack.add(op)
    try:
        yield
    finally:
        stack.discard(op)


def _declines(op: Any) -> bool:
    return op in (getattr(_busy, "ops", None) or ())


def _dims(x: torch.Tensor, dim: Any) -> list[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return [d % max(x.dim(), 1) for d in dims]


def _as_int64(i: torch.Tensor) -> torch.Tensor:
    """``i`` with an int64 HLO type (torch_xla may report int64 for a 32-bit
    value; adding an int64 zero emits the convert)."""
    return i + i.new_zeros((), dtype=torch.int64)


def _first_nan_index(x: torch.Tensor, dim: Any, keepdim: bool) -> tuple[torch.Tensor,
                                                                        torch.Tensor]:
    """Whether each slice has a NaN, and the first NaN's index."""
    nan = torch.isnan(x)
    if dim is None:
        return nan.any(), _aten.argmax.default(nan.to(torch.int32), None, keepdim)
    return nan.any(dim, keepdim=keepdim), _aten.argmax.default(nan.to(torch.int32), dim,
                                                               keepdim)


def _arg_extreme(op: Any) -> Callable[..., Any]:
    def decomp(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
        if not x.is_floating_point() or x.numel() == 0 or _declines(op):
            return NotImplemented
        with _inner(op):
            plain = op(x, dim, keepdim)
        has, first = _first_nan_index(x, dim, keepdim)
        return _as_int64(torch.where(has, first, plain))

    return decomp


def _extreme_dim(op: Any, arg: Any) -> Callable[..., Any]:
    """``max.dim``/``min.dim``: the index as ``argmax``/``argmin`` (above),
    the value gathered there."""
    def decomp(x: torch.Tensor, dim: int, keepdim: bool = False) -> Any:
        if not x.is_floating_point() or x.dim() == 0 or x.numel() == 0:
            return NotImplemented
        idx = arg(x, dim, True)
        val = torch.gather(x, dim, idx)
        if not keepdim:
            idx, val = idx.squeeze(dim), val.squeeze(dim)
        return val, idx

    return decomp


def _reduce_bool(t: torch.Tensor, dims: list[int], keepdim: bool, *, all_: bool) -> torch.Tensor:
    for d in sorted(dims, reverse=True):
        t = t.all(d, keepdim=True) if all_ else t.any(d, keepdim=True)
    return t if keepdim else t.squeeze(dims)


def _extreme_values(op: Any, inf: float) -> Callable[..., Any]:
    """``amax``/``amin``: NaN where a slice has one, ``inf`` (signed) where a
    slice is all ``inf``, else torch_xla's value."""
    def decomp(x: torch.Tensor, dim: Any = (), keepdim: bool = False) -> Any:
        if not x.is_floating_point() or x.numel() == 0 or _declines(op):
            return NotImplemented
        dims = _dims(x, dim)
        if not dims:
            return NotImplemented
        with _inner(op):
            plain = op(x, dims, keepdim)
        all_inf = _reduce_bool(x == inf, dims, keepdim, all_=True)
        has_nan = _reduce_bool(torch.isnan(x), dims, keepdim, all_=False)
        out = torch.where(all_inf, torch.full_like(plain, inf), plain)
        return torch.where(has_nan, torch.full_like(plain, float("nan")), out)

    return decomp


def _extreme_all(reduce: Any) -> Callable[..., Any]:
    """``max(x)``/``min(x)`` (no dim) as ``amax``/``amin`` over every dim."""
    def decomp(x: torch.Tensor) -> Any:
        if not x.is_floating_point() or x.dim() == 0 or x.numel() == 0:
            return NotImplemented
        return reduce(x, list(range(x.dim())), False)

    return decomp


def _aminmax(x: torch.Tensor, *, dim: int | None = None, keepdim: bool = False) -> Any:
    dims = _dims(x, dim)
    if not dims:  # 0-d
        return x.clone(), x.clone()
    return _aten.amin.default(x, dims, keepdim), _aten.amax.default(x, dims, keepdim)


def _cumsum(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> Any:
    if dtype is not None or x.dtype == torch.int64 or x.is_floating_point() or x.is_complex():
        return NotImplemented
    return _aten.cumsum.default(x.to(torch.int64), dim)


def _with_int64_indices(op: Any, index_at: int) -> Callable[..., Any]:
    def decomp(*args: Any, **kwargs: Any) -> Any:
        if _declines(op):
            return NotImplemented
        with _inner(op):
            outs = list(op(*args, **kwargs))
        outs[index_at] = _as_int64(outs[index_at])
        return tuple(outs)

    return decomp


def _linalg_svd(a: torch.Tensor, full_matrices: bool = True, compute_uv: bool = True, *,
                driver: str | None = None) -> Any:
    """Batched SVD as one 2-D SVD per matrix, stacked."""
    op = _aten._linalg_svd.default
    if a.dim() <= 2 or a.numel() == 0 or _declines(op):
        return NotImplemented
    batch = tuple(a.shape[:-2])
    flat = a.reshape(-1, *a.shape[-2:])
    with _inner(op):
        parts = [op(m, full_matrices, compute_uv, driver=driver) for m in flat.unbind(0)]
    outs = []
    for k in range(3):
        first = parts[0][k]
        if first.numel() == 0 and first.dim() == 1:  # compute_uv=False: empty U, Vh
            outs.append(first)
        else:
            outs.append(torch.stack([p[k] for p in parts]).reshape(*batch, *first.shape))
    return tuple(outs)


def numerics_decompositions() -> dict[Any, Any]:
    """The table (module docs); merged into the backend's decompositions."""
    a = _aten
    argmax, argmin = _arg_extreme(a.argmax.default), _arg_extreme(a.argmin.default)
    amax = _extreme_values(a.amax.default, float("-inf"))
    amin = _extreme_values(a.amin.default, float("inf"))
    return {
        a.argmax.default: argmax,
        a.argmin.default: argmin,
        a.max.dim: _extreme_dim(a.max.dim, argmax),
        a.min.dim: _extreme_dim(a.min.dim, argmin),
        a.amax.default: amax,
        a.amin.default: amin,
        a.max.default: _extreme_all(a.amax.default),
        a.min.default: _extreme_all(a.amin.default),
        a.aminmax.default: _aminmax,
        a.cumsum.default: _cumsum,
        a.max_pool2d_with_indices.default: _with_int64_indices(
            a.max_pool2d_with_indices.default, 1),
        a.max_pool3d_with_indices.default: _with_int64_indices(
            a.max_pool3d_with_indices.default, 1),
        a.cummax.default: _with_int64_indices(a.cummax.default, 1),
        a._linalg_svd.default: _linalg_svd,
    }
