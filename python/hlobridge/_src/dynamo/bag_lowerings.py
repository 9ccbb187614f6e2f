"""``embedding_bag`` (``F.embedding_bag``, ``nn.EmbeddingBag``) forward and
backward spelled out in ops torch_xla lowers (``index_select``, ``gather``,
``index_add``/``scatter_add``, ``scatter_reduce``, ``cumsum``).

torch registers no decomposition for ``aten._embedding_bag`` or its
backward ops, and torch_xla's own lowering of ``_embedding_bag`` reads the
offsets' *values* at trace time (a CPU kernel check: ``offsets[0] has to
be 0``), so with gradients the graph failed to compile, and a program that
did compile would have the offsets baked in. Here every data value
(indices, offsets, per-sample weights) stays a program input: one compiled
program serves any offsets of the same shape.

The values are those of eager CPU (``aten/src/ATen/native/EmbeddingBag.cpp``),
all four outputs included, since autograd's formula feeds them to the
backward:

- ``offset2bag[i]``: the bag of index ``i`` (``index_add`` of ones at the
  offsets, minus one at 0, ``cumsum``). Eager's sum "fast path" (float32 or
  float16 weight, ``padding_idx < 0``) returns it empty, and the backward
  ops then recompute it from the offsets: both done here alike.
- ``bag_size``: offset differences (the last bag runs to the end of the
  indices) less each bag's ``padding_idx`` entries; zeros in ``sum`` mode,
  as eager's.
- ``max_indices``: ``max`` mode: for each bag and feature, the weight row
  of the *first* largest value (eager keeps the first on ties); 0 for an
  empty (or all-padding) bag, whose output is 0. Other modes: eager leaves
  this tensor uninitialized; zeros here.
- ``output``: ``sum`` adds ``weight[idx] * per_sample_weight`` over the
  bag, ``padding_idx`` rows left out; ``mean`` divides by
  ``max(bag_size, 1)``; an empty bag gives zeros.

Backward (``_embedding_bag_backward`` -> ``_embedding_bag_dense_backward``,
``_embedding_bag_per_sample_weights_backward``): each index's row gets
``grad[bag] * scale``, ``scale`` = per-sample weight / the index's count in
the whole batch (``scale_grad_by_freq``) / ``bag_size`` (``mean``, when not
0), computed in float64 and rounded once as eager does; ``padding_idx`` rows
get nothing. ``scale_grad_by_freq`` follows torch's documentation (and
``F.embedding``, and eager CUDA): eager CPU's ``embedding_bag`` divides the
``k``-th distinct index's gradient by the count of ``sorted(indices)[k]``
instead (torch 2.9: ``[0, 0, 1]`` gives row 1 half its gradient), which is
not reproduced. ``max`` sends each non-empty bag's gradient to its
``max_indices`` rows. Per-sample weights get ``dot(grad[bag], weight[idx])``
(0 at ``padding_idx``).

Sums run in XLA's scatter order, not eager's index order: results agree to
float32 rounding of the sums (measured in ``tests/python/test_embedding_bag.py``).
Not reproduced: eager's checks on the values (indices in range, ``offsets[0]
== 0``, sorted offsets); NaN in ``max`` mode (eager keeps a NaN only when it
comes first in its bag). ``sparse=True`` raises
:class:`~hlobridge.errors.UnsupportedOpError` (no sparse tensors here).
"""

from __future__ import annotations

from typing import Any

import torch

from hlobridge._src.errors import UnsupportedOpError

aten = torch.ops.aten
_SUM, _MEAN, _MAX = 0, 1, 2


def _num_bags(offsets: torch.Tensor, include_last_offset: bool) -> int:
    return offsets.shape[0] - (1 if include_last_offset else 0)


def _fast_path_sum(weight: torch.Tensor, per_sample_weights: torch.Tensor | None,
                   padding_idx: int) -> bool:
    """Eager's sum fast path (as torch's meta function): offset2bag is then
    returned empty."""
    ok = (weight.dtype in (torch.float32, torch.float16) and weight.stride(1) == 1
          and padding_idx < 0)
    if per_sample_weights is not None:
        ok = ok and per_sample_weights.stride(0) == 1
    return ok


def _make_offset2bag(offsets: torch.Tensor, n: int) -> torch.Tensor:
    """Eager's ``make_offset2bag``: ones added at the offsets (an offset of
    ``n`` lands past the end), one taken off at 0, a running sum."""
    marks = torch.zeros(n + 1, dtype=offsets.dtype, device=offsets.device)
    marks = marks.index_add(0, offsets, torch.ones_like(offsets))
    first = torch.arange(n + 1, device=offsets.device) == 0
    marks = marks - first.to(offsets.dtype)
    return marks.cumsum(0)[:n].to(offsets.dtype)


def _bags_of(offset2bag: torch.Tensor, offsets: torch.Tensor, n: int) -> torch.Tensor:
    """``offset2bag`` as the backward ops use it: recomputed from the
    offsets where the forward returned it empty (eager does the same)."""
    if n != 0 and offset2bag.numel() == 0:
        return _make_offset2bag(offsets, n)
    return offset2bag


def _keep(indices: torch.Tensor, padding_idx: int) -> torch.Tensor:
    """True where the index is not ``padding_idx`` (any negative: none)."""
    if padding_idx < 0:
        return torch.ones_like(indices, dtype=torch.bool)
    return indices != padding_idx


def _bag_size(offsets: torch.Tensor, bags: torch.Tensor, keep: torch.Tensor, n: int,
              num_bags: int, padding_idx: int) -> torch.Tensor:
    """Eager's ``make_bag_size`` (offset differences, the last bag to the
    end of the indices) less the ``padding_idx`` entries of each bag."""
    starts = offsets[:num_bags]
    ends = torch.cat([offsets[1:num_bags], torch.full((min(num_bags, 1),), n,
                                                      dtype=offsets.dtype, device=offsets.device)])
    size = ends - starts
    if padding_idx >= 0 and n > 0:
        size = size.index_add(0, bags, (~keep).to(offsets.dtype), alpha=-1)
    return size


def _embedding_bag(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                   scale_grad_by_freq: bool = False, mode: int = 0, sparse: bool = False,
                   per_sample_weights: torch.Tensor | None = None,
                   include_last_offset: bool = False, padding_idx: int = -1,
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    n = indices.shape[0]
    num_bags = _num_bags(offsets, include_last_offset)
    d = weight.shape[1]
    bags = _make_offset2bag(offsets, n)
    keep = _keep(indices, padding_idx)
    bag_size = _bag_size(offsets, bags, keep, n, num_bags, padding_idx)
    out_zero = weight.new_zeros(num_bags, d)
    if mode == _MAX:
        rows = weight.index_select(0, indices)
        neg = torch.full_like(rows, float("-inf"))
        cand = torch.where(keep[:, None], rows, neg)
        top = torch.full_like(out_zero, float("-inf")).scatter_reduce(
            0, bags[:, None].expand(n, d), cand, "amax", include_self=True)
        is_top = keep[:, None] & (rows == top.index_select(0, bags))
        pos = torch.arange(n, device=indices.device)[:, None].expand(n, d)
        pos = torch.where(is_top, pos, torch.full_like(pos, n))
        first = torch.full((num_bags, d), n, dtype=pos.dtype, device=pos.device).scatter_reduce(
            0, bags[:, None].expand(n, d), pos, "amin", include_self=True)
        nonempty = (bag_size > 0)[:, None]
        safe = torch.where(nonempty, first, torch.zeros_like(first)).clamp(max=max(n - 1, 0))
        if n > 0:
            word = indices.index_select(0, safe.reshape(-1)).reshape(num_bags, d)
        else:
            word = torch.zeros_like(safe)
        max_indices = torch.where(nonempty, word, torch.zeros_like(word)).to(offsets.dtype)
        output = torch.where(nonempty, weight.gather(0, max_indices.to(torch.int64)), out_zero)
        offset2bag = bags
    else:
        rows = weight.index_select(0, indices)
        if per_sample_weights is not None:
            rows = rows * per_sample_weights.to(rows.dtype)[:, None]
        if padding_idx >= 0:
            rows = torch.where(keep[:, None], rows, torch.zeros_like(rows))
        output = out_zero.index_add(0, bags, rows)
        if mode == _MEAN:
            output = output / bag_size.clamp(min=1).to(output.dtype)[:, None]
        max_indices = torch.zeros_like(bag_size)
        if mode == _SUM:
            bag_size = torch.zeros_like(bag_size)  # eager's value (sum never reads it)
        if mode == _SUM and _fast_path_sum(weight, per_sample_weights, padding_idx):
            offset2bag = offsets.new_zeros(0)
        else:
            offset2bag = bags
    return output, offset2bag, bag_size, max_indices


def _embedding_bag_forward_only(weight: torch.Tensor, indices: torch.Tensor,
                                offsets: torch.Tensor, scale_grad_by_freq: bool = False,
                                mode: int = 0, sparse: bool = False,
                                per_sample_weights: torch.Tensor | None = None,
                                include_last_offset: bool = False, padding_idx: int = -1,
                                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """As :func:`_embedding_bag`; in ``sum`` mode ``bag_size`` is shaped
    like the offsets, as eager's (whose values it leaves unset there; a
    trailing ``include_last_offset`` slot is 0 here)."""
    output, offset2bag, bag_size, max_indices = _embedding_bag(
        weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
        include_last_offset, padding_idx)
    extra = offsets.shape[0] - bag_size.shape[0]
    if extra and mode == _SUM:
        bag_size = torch.cat([bag_size, bag_size.new_zeros(extra)])
    return output, offset2bag, bag_size, max_indices


def _embedding_bag_backward(grad: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                            offset2bag: torch.Tensor, bag_size: torch.Tensor,
                            max_indices: torch.Tensor, num_weights: int,
                            scale_grad_by_freq: bool, mode: int, sparse: bool,
                            per_sample_weights: torch.Tensor | None = None,
                            padding_idx: int = -1) -> torch.Tensor:
    if sparse:
        raise UnsupportedOpError(
            "hlobridge backend: embedding_bag with sparse=True has a sparse gradient, and "
            "sparse tensors are not supported: use sparse=False")
    bags = _bags_of(offset2bag, offsets, indices.shape[0])
    return _embedding_bag_dense_backward(grad, indices, bags, bag_size, max_indices,
                                         num_weights, scale_grad_by_freq, mode,
                                         per_sample_weights, padding_idx)


def _embedding_bag_dense_backward(grad: torch.Tensor, indices: torch.Tensor,
                                  offset2bag: torch.Tensor, bag_size: torch.Tensor,
                                  max_indices: torch.Tensor, num_weights: int,
                                  scale_grad_by_freq: bool, mode: int,
                                  per_sample_weights: torch.Tensor | None = None,
                                  padding_idx: int = -1) -> torch.Tensor:
    d = grad.shape[1]
    out = grad.new_zeros(num_weights, d)
    if mode == _MAX:
        nonempty = (bag_size != 0)[:, None]
        g = torch.where(nonempty, grad, torch.zeros_like(grad))
        return out.scatter_add(0, max_indices.to(torch.int64), g)
    n = indices.shape[0]
    if n == 0:
        return out
    bags = offset2bag.to(torch.int64)
    rows = grad.index_select(0, bags)
    if per_sample_weights is not None or scale_grad_by_freq or mode == _MEAN:
        # eager: a double ``scale``, rounded to the gradient's dtype once
        scale = torch.ones(n, dtype=torch.float64, device=grad.device)
        if per_sample_weights is not None:
            scale = per_sample_weights.to(torch.float64)
        if scale_grad_by_freq:
            counts = torch.zeros(num_weights, dtype=torch.int64, device=grad.device).index_add(
                0, indices.to(torch.int64), torch.ones_like(indices, dtype=torch.int64))
            scale = scale / counts.index_select(0, indices.to(torch.int64)).to(torch.float64)
        if mode == _MEAN:
            size = bag_size.index_select(0, bags)
            size = torch.where(size != 0, size, torch.ones_like(size))
            scale = scale / size.to(torch.float64)
        rows = rows * scale.to(grad.dtype)[:, None]
    keep = _keep(indices, padding_idx)
    if padding_idx >= 0:
        rows = torch.where(keep[:, None], rows, torch.zeros_like(rows))
    return out.index_add(0, indices, rows)


def _embedding_bag_per_sample_weights_backward(
        grad: torch.Tensor, weight: torch.Tensor, indices: torch.Tensor,
        offsets: torch.Tensor, offset2bag: torch.Tensor, mode: int,
        padding_idx: int = -1) -> torch.Tensor:
    n = indices.shape[0]
    if n == 0:
        return grad.new_zeros(0)
    bags = _bags_of(offset2bag, offsets, n).to(torch.int64)
    dots = (grad.index_select(0, bags) * weight.index_select(0, indices).to(grad.dtype)).sum(1)
    if padding_idx >= 0:
        dots = torch.where(indices != padding_idx, dots, torch.zeros_like(dots))
    return dots


def bag_decompositions() -> dict[Any, Any]:
    """The entries for :func:`hlobridge._src.dynamo.engine.decompositions`."""
    return {
        aten._embedding_bag.default: _embedding_bag,
        aten._embedding_bag_forward_only.default: _embedding_bag_forward_only,
        aten._embedding_bag_backward.default: _embedding_bag_backward,
        aten._embedding_bag_dense_backward.default: _embedding_bag_dense_backward,
        aten._embedding_bag_per_sample_weights_backward.default:
            _embedding_bag_per_sample_weights_backward,
    }
