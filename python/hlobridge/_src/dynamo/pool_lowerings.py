"""Adaptive max pooling inside the program.

torch_xla lowers neither ``adaptive_max_pool2d``/``3d`` nor their backward
(``nn.AdaptiveMaxPool1d/2d/3d``, ``adaptive_max_pool1d`` goes through the
2-d op), so they ended in a named ``UnsupportedOpError``. Here, in torch ops
torch_xla lowers:

- **windows** as eager's: along each spatial dimension, output ``i`` reads
  input rows ``floor(i * n / o)`` up to ``ceil((i + 1) * n / o)``; each
  window is gathered (``index_select``) into a fixed ``K`` slots, the slots
  past a short window masked to ``-inf``;
- **the maximum and its index** as eager's CPU kernel picks them: it scans
  the window in row-major order and takes a value when it is greater than
  the running maximum or NaN, so the index is the first maximum, or the
  last NaN where the window has one; indices are flat over the input's
  spatial dimensions (int64), as eager;
- **backward**: ``scatter_add`` of the output gradient at those indices,
  eager's accumulation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["pool_lowerings"]

_aten = torch.ops.aten


def _windows(n: int, o: int, device: Any) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(index (o, k), valid (o, k), k)``: the input positions of each
    output's window along one dimension (padded to the longest, ``k``),
    from ``arange`` (XLA folds them; no tensor constants in the graph)."""
    k = max(-(-(i + 1) * n // o) - (i * n) // o for i in range(o))
    i = torch.arange(o, device=device).reshape(o, 1)
    start = (i * n) // o
    end = ((i + 1) * n + o - 1) // o
    pos = start + torch.arange(k, device=device).reshape(1, k)
    return torch.minimum(pos, end - 1), pos < end, k


def _adaptive_max_pool(x: torch.Tensor, output_size: list[int]) -> Any:
    d = len(output_size)
    if not x.is_floating_point() or x.dim() not in (d + 1, d + 2) or x.numel() == 0:
        return NotImplemented
    spatial = list(x.shape[-d:])
    lead = list(x.shape[:-d])
    win = x
    flat = torch.zeros((), dtype=torch.int64, device=x.device)
    valid = torch.ones((), dtype=torch.bool, device=x.device)
    ks = []
    for axis, (n, o) in enumerate(zip(spatial, output_size)):
        idx, ok, k = _windows(n, o, x.device)
        ks.append(k)
        pos = len(lead) + 2 * axis  # the (o, k) pairs of earlier axes come first
        win = win.index_select(pos, idx.reshape(-1))
        win = win.reshape(*win.shape[:pos], o, k, *win.shape[pos + 1:])
        stride = 1
        for later in spatial[axis + 1:]:
            stride *= later
        shape = [1] * (2 * d)
        shape[2 * axis], shape[2 * axis + 1] = o, k
        flat = flat + (idx * stride).reshape(shape)
        valid = valid & ok.reshape(shape)
    # (..., o1, k1, o2, k2, ...) -> (..., o1, o2, ..., k1 * k2 * ...)
    order = [2 * a for a in range(d)] + [2 * a + 1 for a in range(d)]
    win = win.permute(*range(len(lead)), *[len(lead) + p for p in order])
    win = win.reshape(*lead, *output_size, -1)
    flat = flat.permute(*order).reshape(*output_size, -1)
    valid = valid.permute(*order).reshape(*output_size, -1)
    nan = torch.isnan(win) & valid
    clean = torch.where(valid & ~nan, win, torch.full_like(win, float("-inf")))
    k_all = win.shape[-1]
    first_max = torch.argmax(clean, -1, keepdim=True)
    last_nan = (k_all - 1) - torch.argmax(nan.flip(-1).to(torch.int32), -1, keepdim=True)
    pick = torch.where(nan.any(-1, keepdim=True), last_nan, first_max)
    out = torch.gather(win, -1, pick).squeeze(-1)
    indices = torch.gather(flat.expand(*lead, *flat.shape), -1, pick).squeeze(-1)
    return out, indices


def _max_pool_fn(d: int) -> Callable[..., Any]:
    def lower(x: torch.Tensor, output_size: list[int]) -> Any:
        if len(output_size) != d:
            return NotImplemented
        return _adaptive_max_pool(x, list(output_size))
    return lower


def _max_pool_backward_fn(d: int) -> Callable[..., Any]:
    def lower(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor) -> Any:
        """``scatter_add`` of ``grad`` at the flat spatial ``indices``."""
        if x.dim() not in (d + 1, d + 2) or x.numel() == 0:
            return NotImplemented
        lead = x.shape[:-d]
        size = 1
        for n in x.shape[-d:]:
            size *= n
        out = grad.new_zeros(*lead, size)
        out = out.scatter_add(-1, indices.reshape(*lead, -1), grad.reshape(*lead, -1))
        return out.reshape(x.shape)
    return lower


def pool_lowerings() -> dict[Any, Callable[..., Any]]:
    """aten overload -> lowering, merged into the backend's table through
    :func:`~hlobridge._src.dynamo.jax_lowerings.jax_lowerings`."""
    return {
        _aten.adaptive_max_pool2d.default: _max_pool_fn(2),
        _aten.adaptive_max_pool3d.default: _max_pool_fn(3),
        _aten.adaptive_max_pool2d_backward.default: _max_pool_backward_fn(2),
        _aten.adaptive_max_pool3d_backward.default: _max_pool_backward_fn(3),
    }
