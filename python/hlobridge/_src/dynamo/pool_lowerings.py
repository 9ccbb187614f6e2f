"""Max pooling inside the program: adaptive, dilated, and floating-point
undilated.

torch_xla lowers neither ``adaptive_max_pool2d``/``3d`` nor their backward
(``nn.AdaptiveMaxPool1d/2d/3d``, ``adaptive_max_pool1d`` goes through the
2-d op), nor a ``max_pool{2,3}d_with_indices`` with a dilation other than 1,
so they ended in a named ``UnsupportedOpError``. Here, in torch ops
torch_xla lowers:

- **windows** as eager's: along each spatial dimension, output ``i`` reads
  input rows ``floor(i * n / o)`` up to ``ceil((i + 1) * n / o)``
  (adaptive) or ``i s - p + j dil`` for ``j < k`` inside the input (dilated;
  eager's output count, ceil mode included); each window is gathered
  (``index_select``) into fixed slots, the slots past a short window or in
  the padding masked;
- **the maximum and its index** as eager's CPU kernel picks them: it scans
  the window in row-major order and takes a value when it is greater than
  the running maximum or NaN, so the index is the first maximum, or the
  last NaN where the window has one; indices are flat over the input's
  spatial dimensions (int64), as eager;
- **backward**: ``scatter_add`` of the output gradient at those indices,
  eager's accumulation.

Floating-point ``max_pool{2,3}d_with_indices`` without dilation (1-d pools
reach the 2-d op) are lowered here too. torch_xla's lowering reduced each window twice, once for
the values and once, as a five-operand ``reduce-window``, for the indices,
and XLA:CPU runs both as scalar loops: through ``torch.compile``, the
forward with indices of ResNet-50's stem pool (batch 8) took 146 ms, its
forward and backward 246 ms, against 10–14 and 40–62 ms here (eager:
37–43 and 51–55 ms; 2-core Intel Xeon, medians of several runs). In a whole ``compile_train_step`` program, where
XLA overlapped the old loops with other work, the step time was unchanged
(7 interleaved rounds). Here the input is padded with ``-inf`` and each
window offset is one strided slice: the maximum is their ``maximum`` (NaN
if one is), and the index the first valid offset equal to it, or the last
NaN, each offset compared on its own (a running select chain, fused into
its consumers, measured slower). The backward is the ``scatter_add``
above, into the whole input at once.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["pool_lowerings"]

_aten = torch.ops.aten


def _adaptive_windows(n: int, o: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(position (o, k), valid (o, k))``: the input positions of each
    output's adaptive window along one dimension (padded to the longest),
    from ``arange`` (XLA folds them; no tensor constants in the graph)."""
    k = max(-(-(i + 1) * n // o) - (i * n) // o for i in range(o))
    i = torch.arange(o, device=device).reshape(o, 1)
    start = (i * n) // o
    end = ((i + 1) * n + o - 1) // o
    pos = start + torch.arange(k, device=device).reshape(1, k)
    return pos, pos < end


def _output_size(n: int, k: int, s: int, p: int, dil: int, ceil_mode: bool) -> int:
    """Eager's output count along one dimension (a ceil-mode window must
    start inside the input or its left padding)."""
    span = dil * (k - 1) + 1
    o = (n + 2 * p - span + ((s - 1) if ceil_mode else 0)) // s + 1
    if ceil_mode and (o - 1) * s >= n + p:
        o -= 1
    return o


def _pool_windows(n: int, k: int, s: int, p: int, dil: int, ceil_mode: bool,
                  device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The same for a (dilated, padded, strided) max pooling window: output
    ``i`` reads ``i s - p + j dil`` for ``j < k``, the positions inside the
    input; eager's output count."""
    o = _output_size(n, k, s, p, dil, ceil_mode)
    i = torch.arange(o, device=device).reshape(o, 1)
    pos = i * s - p + torch.arange(k, device=device).reshape(1, k) * dil
    return pos, (pos >= 0) & (pos < n)


def _window_max(x: torch.Tensor, windows: list[tuple[torch.Tensor, torch.Tensor]]) -> Any:
    """Max over windows of ``x``'s last ``len(windows)`` dimensions and the
    flat spatial index eager's CPU kernel reports: it scans a window in
    row-major order and takes a value greater than the running maximum
    (which starts at ``-inf``, an integer type's lowest value, on the first
    valid position) or NaN."""
    d = len(windows)
    spatial = list(x.shape[-d:])
    lead = list(x.shape[:-d])
    outs = [w[0].shape[0] for w in windows]
    win = x
    flat = torch.zeros((), dtype=torch.int64, device=x.device)
    valid = torch.ones((), dtype=torch.bool, device=x.device)
    for axis, (pos, ok) in enumerate(windows):
        n = spatial[axis]
        o, k = pos.shape
        at = len(lead) + 2 * axis  # the (o, k) pairs of earlier axes come first
        win = win.index_select(at, pos.clamp(0, n - 1).reshape(-1))
        win = win.reshape(*win.shape[:at], o, k, *win.shape[at + 1:])
        stride = 1
        for later in spatial[axis + 1:]:
            stride *= later
        shape = [1] * (2 * d)
        shape[2 * axis], shape[2 * axis + 1] = o, k
        flat = flat + (pos * stride).reshape(shape)
        valid = valid & ok.reshape(shape)
    # (..., o1, k1, o2, k2, ...) -> (..., o1, o2, ..., k1 * k2 * ...)
    order = [2 * a for a in range(d)] + [2 * a + 1 for a in range(d)]
    win = win.permute(*range(len(lead)), *[len(lead) + p for p in order])
    win = win.reshape(*lead, *outs, -1)
    flat = flat.permute(*order).reshape(*outs, -1)
    valid = valid.permute(*order).reshape(*outs, -1)
    floating = win.is_floating_point()
    nan = (torch.isnan(win) if floating else torch.zeros_like(win, dtype=torch.bool)) & valid
    lowest = float("-inf") if floating else torch.iinfo(win.dtype).min
    clean = torch.where(valid & ~nan, win, torch.full_like(win, lowest))
    best = clean.amax(-1, keepdim=True)
    first_max = torch.argmax((valid & (clean == best)).to(torch.int32), -1, keepdim=True)
    k_all = win.shape[-1]
    last_nan = (k_all - 1) - torch.argmax(nan.flip(-1).to(torch.int32), -1, keepdim=True)
    pick = torch.where(nan.any(-1, keepdim=True), last_nan, first_max)
    out = torch.gather(win, -1, pick).squeeze(-1)
    indices = torch.gather(flat.expand(*lead, *flat.shape), -1, pick).squeeze(-1)
    return out, indices


def _floating_nd(x: torch.Tensor, d: int, integers: bool = False) -> bool:
    kind = x.is_floating_point() or (integers and not x.is_complex() and x.dtype != torch.bool)
    return kind and x.dim() in (d + 1, d + 2) and x.numel() > 0


def _max_pool_fn(d: int) -> Callable[..., Any]:
    def lower(x: torch.Tensor, output_size: list[int]) -> Any:
        if len(output_size) != d or not _floating_nd(x, d):
            return NotImplemented
        return _window_max(x, [_adaptive_windows(n, o, x.device)
                               for n, o in zip(x.shape[-d:], output_size)])
    return lower


def _spread(v: Any, d: int) -> list[int]:
    v = [v] if isinstance(v, int) else list(v)
    return v * d if len(v) == 1 else v


def _sliced_window_max(x: torch.Tensor, ks: list[int], st: list[int], pad: list[int],
                       ceil_mode: bool) -> Any:
    """Undilated floating-point max pooling and eager's flat indices, one
    strided slice per window offset (module docs)."""
    d = len(ks)
    spatial = list(x.shape[-d:])
    outs = [_output_size(n, k, s, p, 1, ceil_mode) for n, k, s, p in zip(spatial, ks, st, pad)]
    # ``-inf`` padding, low ``p`` and high up to the last window's end.
    widths: list[int] = []
    for n, k, s, p, o in zip(spatial, ks, st, pad, outs):
        widths = [p, max(0, (o - 1) * s + k - p - n)] + widths
    xp = torch.nn.functional.pad(x, widths, value=float("-inf"))
    strides = [1] * d
    for a in range(d - 2, -1, -1):
        strides[a] = strides[a + 1] * spatial[a + 1]

    def shaped(a: int, v: torch.Tensor) -> torch.Tensor:
        shape = [1] * d
        shape[a] = outs[a]
        return v.reshape(shape)

    def along(a: int, v: torch.Tensor) -> torch.Tensor:
        return shaped(a, v * strides[a])

    wins = []
    for offset in itertools.product(*[range(k) for k in ks]):
        win = xp
        pos = torch.zeros((), dtype=torch.int64, device=x.device)
        valid = torch.ones((), dtype=torch.bool, device=x.device)
        for a, j in enumerate(offset):
            at = x.dim() - d + a
            win = win.narrow(at, j, (outs[a] - 1) * st[a] + 1)[(slice(None),) * at
                                                               + (slice(None, None, st[a]),)]
            p = torch.arange(outs[a], dtype=torch.int64, device=x.device) * st[a] - pad[a] + j
            pos = pos + along(a, p)
            valid = valid & shaped(a, (p >= 0) & (p < spatial[a]))
        wins.append((win, pos, valid))
    # The maximum (NaN if the window has one), then eager's index: the
    # first valid position holding it, or the last NaN. Each offset is
    # compared with the maximum on its own, so no select depends on the
    # one before (a running chain fused into its consumers measured slower).
    # Some offset always matches (padding is ``-inf``, so the maximum is a
    # valid position's value), so each chain starts from the offset it
    # would reach last instead of testing it.
    best = wins[0][0]
    for win, _, _ in wins[1:]:
        best = torch.maximum(best, win)
    index = wins[-1][1]
    for win, pos, valid in reversed(wins[:-1]):
        index = torch.where((win == best) & valid, pos, index)
    nan_index = wins[0][1]
    for win, pos, _ in wins[1:]:
        nan_index = torch.where(torch.isnan(win), pos, nan_index)
    index = torch.where(torch.isnan(best), nan_index, index)
    return best, index.expand(best.shape)


def _dilated_max_pool_fn(d: int, with_indices: Any) -> Callable[..., Any]:
    """``max_pool{2,3}d_with_indices``: with a dilation other than 1, which
    torch_xla cannot lower, gathered windows; floating-point ones without,
    strided slices; the rest (integers) stays torch_xla's."""
    def lower(x: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
              dilation: Any = 1, ceil_mode: bool = False) -> Any:
        dil = _spread(dilation, d)
        ks = _spread(kernel_size, d)
        st = _spread(stride, d) if stride not in ((), [], None) else ks
        pad = _spread(padding, d)
        if all(v == 1 for v in dil):
            if not _floating_nd(x, d):
                return with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)
            return _sliced_window_max(x, ks, st, pad, ceil_mode)
        if not _floating_nd(x, d, integers=True):
            return with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)
        return _window_max(x, [_pool_windows(n, k, s, p, dl, ceil_mode, x.device)
                               for n, k, s, p, dl in zip(x.shape[-d:], ks, st, pad, dil)])
    return lower


def _scatter_back(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor, d: int) -> Any:
    """``scatter_add`` of ``grad`` at the flat spatial ``indices``: eager's
    accumulation in a max pooling's backward."""
    lead = x.shape[:-d]
    size = 1
    for n in x.shape[-d:]:
        size *= n
    planes = 1
    for n in lead:
        planes *= n
    # One flat index into the whole input (a one-column scatter: XLA then
    # builds no coordinate tuples from iotas).
    plane = torch.arange(planes, device=x.device).reshape(planes, 1) * size
    at = (indices.reshape(planes, -1) + plane).reshape(-1)
    out = grad.new_zeros(planes * size).scatter_add(0, at, grad.reshape(-1))
    return out.reshape(x.shape)


def _dilated_max_pool_backward_fn(d: int) -> Callable[..., Any]:
    """The backward of a max pool: ``scatter_add`` at its indices."""
    def lower(grad: torch.Tensor, x: torch.Tensor, kernel_size: Any, stride: Any,
              padding: Any, dilation: Any, ceil_mode: bool, indices: torch.Tensor) -> Any:
        if not _floating_nd(x, d):
            return NotImplemented
        return _scatter_back(grad, x, indices, d)
    return lower


def _max_pool_backward_fn(d: int) -> Callable[..., Any]:
    def lower(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor) -> Any:
        if not _floating_nd(x, d):
            return NotImplemented
        return _scatter_back(grad, x, indices, d)
    return lower


@functools.cache
def pool_lowerings() -> dict[Any, Callable[..., Any]]:
    """aten overload -> lowering, merged into the backend's table through
    :func:`~hlobridge._src.dynamo.jax_lowerings.jax_lowerings` (after the
    numerics table, whose int64-index entries for the max pools the dilated
    entries fall back to); built once, so every table holds the same
    functions. Callers copy it before changing it."""
    from hlobridge._src.dynamo.numerics_reductions import with_int64_indices

    a = _aten
    return {
        a.adaptive_max_pool2d.default: _max_pool_fn(2),
        a.adaptive_max_pool3d.default: _max_pool_fn(3),
        a.adaptive_max_pool2d_backward.default: _max_pool_backward_fn(2),
        a.adaptive_max_pool3d_backward.default: _max_pool_backward_fn(3),
        a.max_pool2d_with_indices.default: _dilated_max_pool_fn(
            2, with_int64_indices(a.max_pool2d_with_indices.default, 1)),
        a.max_pool3d_with_indices.default: _dilated_max_pool_fn(
            3, with_int64_indices(a.max_pool3d_with_indices.default, 1)),
        a.max_pool2d_with_indices_backward.default: _dilated_max_pool_backward_fn(2),
        a.max_pool3d_with_indices_backward.default: _dilated_max_pool_backward_fn(3),
    }
