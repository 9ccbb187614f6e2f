"""Numerics decompositions of reductions, scans and pooling: NaN- and
``inf``-correct extremes and their indices, int64 ``cumsum``, ``cummax``
ties, int64 pooling indices, ``avg_pool`` with ``divisor_override``, the
complex variance (``numerics_decomp`` documents each)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from hlobridge._src.dynamo.numerics_common import as_int64, declines, reduced_dims, inner_call

_aten = torch.ops.aten


def _first_nan_index(x: torch.Tensor, dim: Any, keepdim: bool) -> tuple[torch.Tensor,
                                                                        torch.Tensor]:
    """Whether each slice has a NaN, and the first NaN's index."""
    nan = torch.isnan(x)
    if dim is None:
        return nan.any(), _aten.argmax.default(nan.to(torch.int32), None, keepdim)
    return nan.any(dim, keepdim=keepdim), _aten.argmax.default(nan.to(torch.int32), dim,
                                                               keepdim)


def arg_extreme(op: Any) -> Callable[..., Any]:
    def decomp(x: torch.Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
        if not x.is_floating_point() or x.numel() == 0 or declines(op):
            return NotImplemented
        with inner_call(op):
            plain = op(x, dim, keepdim)
        has, first = _first_nan_index(x, dim, keepdim)
        return as_int64(torch.where(has, first, plain))

    return decomp


def extreme_dim(op: Any, arg: Any) -> Callable[..., Any]:
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


def extreme_values(op: Any, inf: float) -> Callable[..., Any]:
    """``amax``/``amin``: NaN where a slice has one, ``inf`` (signed) where a
    slice is all ``inf``, else torch_xla's value."""
    def decomp(x: torch.Tensor, dim: Any = (), keepdim: bool = False) -> Any:
        if not x.is_floating_point() or x.numel() == 0 or declines(op):
            return NotImplemented
        dims = reduced_dims(x, dim)
        if not dims:
            return NotImplemented
        with inner_call(op):
            plain = op(x, dims, keepdim)
        all_inf = _reduce_bool(x == inf, dims, keepdim, all_=True)
        has_nan = _reduce_bool(torch.isnan(x), dims, keepdim, all_=False)
        out = torch.where(all_inf, torch.full_like(plain, inf), plain)
        return torch.where(has_nan, torch.full_like(plain, float("nan")), out)

    return decomp


def extreme_all(reduce: Any) -> Callable[..., Any]:
    """``max(x)``/``min(x)`` (no dim) as ``amax``/``amin`` over every dim."""
    def decomp(x: torch.Tensor) -> Any:
        if not x.is_floating_point() or x.dim() == 0 or x.numel() == 0:
            return NotImplemented
        return reduce(x, list(range(x.dim())), False)

    return decomp


def aminmax(x: torch.Tensor, *, dim: int | None = None, keepdim: bool = False) -> Any:
    dims = reduced_dims(x, dim)
    if not dims:  # 0-d
        return x.clone(), x.clone()
    return _aten.amin.default(x, dims, keepdim), _aten.amax.default(x, dims, keepdim)


def cumsum(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> Any:
    if dtype is not None or x.dtype == torch.int64 or x.is_floating_point() or x.is_complex():
        return NotImplemented
    return _aten.cumsum.default(x.to(torch.int64), dim)


def with_int64_indices(op: Any, index_at: int) -> Callable[..., Any]:
    def decomp(*args: Any, **kwargs: Any) -> Any:
        if declines(op):
            return NotImplemented
        with inner_call(op):
            outs = list(op(*args, **kwargs))
        outs[index_at] = as_int64(outs[index_at])
        return tuple(outs)

    return decomp


def avg_pool_divisor(op: Any, at: int) -> Callable[..., Any]:
    """``avg_pool{2,3}d`` with ``divisor_override``: torch divides each
    window's sum by the override whatever ``count_include_pad`` says (and
    truncates integer results); torch_xla divided by the count of the
    window's real elements with ``count_include_pad=False``, got windows
    that ``ceil_mode`` adds wrong, and rounded integers differently. Here:
    the input zero-padded on the high side so that ``ceil_mode=False`` gives
    torch's ceil-mode windows, ``count_include_pad=True`` (the sum of a
    window does not change with zeros); integers: the exact sum (float64,
    divisor 1), truncated after the division."""
    def decomp(*args: Any) -> Any:
        args_l = list(args)
        if len(args_l) <= at + 1 or args_l[at + 1] is None or declines(op):
            return NotImplemented
        x, d = args_l[0], args_l[at + 1]
        nd = 2 if op in (_aten.avg_pool2d.default, _aten.avg_pool2d_backward.default) else 3

        def per_dim(v: Any, default: Any) -> list[int]:
            v = default if v is None or (isinstance(v, (list, tuple)) and len(v) == 0) else v
            v = [v] if isinstance(v, int) else list(v)
            return v * nd if len(v) == 1 else v

        k = per_dim(args_l[1], None)
        st = per_dim(args_l[2] if len(args_l) > 2 else None, k)
        pad = per_dim(args_l[3] if len(args_l) > 3 else 0, 0)
        ceil = bool(args_l[4]) if len(args_l) > 4 else False
        if ceil:
            extra = []
            for i in range(nd):
                n = x.shape[x.dim() - nd + i]
                o = -(-(n + 2 * pad[i] - k[i]) // st[i]) + 1
                if (o - 1) * st[i] >= n + pad[i]:
                    o -= 1
                extra.append(max(0, (o - 1) * st[i] + k[i] - (n + 2 * pad[i])))
            widths: list[int] = []
            for e in reversed(extra):
                widths += [0, e]
            x = torch.nn.functional.pad(x, widths)
        args_l[1], args_l[2], args_l[3], args_l[4] = k, st, pad, False
        args_l[at] = True
        if x.is_floating_point():
            args_l[0] = x
            with inner_call(op):
                return op(*args_l)
        args_l[0], args_l[at + 1] = x.double(), 1
        with inner_call(op):
            sums = op(*args_l)
        return torch.div(sums, d, rounding_mode="trunc").to(x.dtype)

    return decomp


def complex_var(op: Any) -> Callable[..., Any]:
    """``var``/``std``/``var_mean``/``std_mean`` of a complex tensor:
    torch's variance is real, ``var(re) + var(im)``; torch_xla returned a
    complex variance (``var_mean``), a wrong value (``std_mean``) or failed
    (``var``, ``std``)."""
    std = op in (_aten.std.correction, _aten.std_mean.correction)
    with_mean = op in (_aten.var_mean.correction, _aten.std_mean.correction)

    def decomp(x: torch.Tensor, dim: Any = None, *, correction: Any = None,
               keepdim: bool = False) -> Any:
        if not x.is_complex():
            return NotImplemented
        var = (_aten.var.correction(x.real, dim, correction=correction, keepdim=keepdim)
               + _aten.var.correction(x.imag, dim, correction=correction, keepdim=keepdim))
        out = var.sqrt() if std else var
        if not with_mean:
            return out
        dims = reduced_dims(x, dim)
        n = 1
        for d in dims:
            n *= x.shape[d]
        return out, _aten.sum.dim_IntList(x, dims, keepdim) / n

    return decomp


def complex_mean(x: torch.Tensor, dim: Any = None, keepdim: bool = False, *,
                 dtype: Any = None) -> Any:
    """``mean`` of a complex tensor (``mean.default`` and ``mean.dim``):
    torch_xla's lowering failed ("Invalid type for NanValue (C64)"), and
    with it ``rms_norm`` and the backward of ``var``/``std`` of complex.
    Here: the sum over the element count (an empty slice: NaN, as eager)."""
    if not x.is_complex() and not (dtype is not None and dtype.is_complex):
        return NotImplemented
    dims = reduced_dims(x, dim)
    n = 1
    for d in dims:
        n *= x.shape[d]
    return _aten.sum.dim_IntList(x, dims, keepdim, dtype=dtype) / n


def complex_var_mean(x: torch.Tensor, dim: Any = None, *, correction: Any = None,
                     keepdim: bool = False) -> Any:
    """``var_mean`` of a complex tensor, as torch computes it (a real
    variance); the backend's two-pass ``var_mean`` calls this for complex
    inputs."""
    return complex_var(_aten.var_mean.correction)(x, dim, correction=correction,
                                                      keepdim=keepdim)


def cummax(x: torch.Tensor, dim: int) -> Any:
    """``cummax`` as torch: on ties torch takes the *last* index of the
    running maximum (it updates on ``x >= max``, and on NaN), and a NaN
    stays the maximum; torch_xla took the first index, dropped NaN, gave
    32-bit indices and wrong bool indices. Here: torch_xla's values, NaN
    from the first NaN on; the index is the last position at or before
    each one where ``x`` equals the running maximum (or is NaN), as the
    running maximum of those positions."""
    op = _aten.cummax.default
    if declines(op) or x.dim() == 0 or x.numel() == 0:
        return NotImplemented
    xs = x.to(torch.uint8) if x.dtype == torch.bool else x
    with inner_call(op):
        v, _ = op(xs, dim)
        upd = xs == v
        if xs.is_floating_point():
            nan = torch.isnan(xs)
            seen, _ = op(nan.to(torch.uint8), dim)
            v = torch.where(seen.to(torch.bool), torch.full_like(v, float("nan")), v)
            upd = (xs == v) | nan
        d = dim % x.dim()
        shape = [1] * x.dim()
        shape[d] = x.shape[d]
        pos = torch.arange(x.shape[d], dtype=torch.int64).reshape(shape).expand(x.shape)
        last, _ = op(torch.where(upd, pos, torch.zeros_like(pos)), dim)
    return (v.to(torch.bool) if x.dtype == torch.bool else v), as_int64(last)
