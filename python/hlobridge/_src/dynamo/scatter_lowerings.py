"""``scatter_reduce`` and ``index_reduce`` as a JAX scatter inside the program.

torch_xla has no lowering for ``aten::scatter_reduce.two`` with ``prod``,
``mean``, ``amax`` or ``amin`` (graph neural networks aggregate messages
with them), so the op ended in a named ``UnsupportedOpError``. Here it is
one ``jax.jit`` segment (:func:`~hlobridge._src.dynamo.jax_segment.jax_segment`):
the index tensor, with the other dimensions' coordinates, addresses
``self``, and ``x.at[...]`` applies the reduction (``add``, ``multiply``,
``max``, ``min``; NaN propagates through ``max``/``min`` as in eager, since
hlobridge compiles with ``xla_cpu_enable_fast_min_max=false``).

Eager's semantics, kept:

- only the first ``index.shape`` elements of ``src`` are read;
- ``include_self=False``: a position some index points at starts from the
  reduction's identity instead of ``self``; positions no index points at
  keep ``self`` (``mean`` too);
- ``mean``: the sum over the count (``self`` counted once with
  ``include_self``); integer results by floor division, as eager.

Gradients are torch's own (``scatter_reduce_backward``: gathers, masks and
``scatter_add`` torch_xla lowers; ``prod`` calls this lowering again). Its
``scatter.value`` with an index longer than ``self`` along ``dim`` failed in
torch_xla's lowering (a slice past the end): here ``scatter.src`` of a
filled tensor of the index's shape.
``index_reduce`` (torch_xla's lowering failed on every sample) is the same
scatter, its 1-d index spread over ``source``'s shape. Bool tensors reduce
as int32 (``sum`` is "or", ``prod`` "and"). Declined (the op stays and is
named): complex tensors, bool ``mean``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from hlobridge._src.dynamo.jax_segment import jax_segment

__all__ = ["scatter_lowerings"]

_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def _scatter_reduce_jax(s: Any, idx: Any, src: Any, *, dim: int, reduce: str,
                        include_self: bool) -> Any:
    import jax.numpy as jnp

    src = src[tuple(slice(0, n) for n in idx.shape)]
    coords = list(jnp.indices(idx.shape, sparse=True))
    coords[dim] = idx
    at = tuple(coords)
    floating = jnp.issubdtype(s.dtype, jnp.floating)
    if not include_self:
        if reduce in ("sum", "mean"):
            identity = jnp.zeros((), s.dtype)
        elif reduce == "prod":
            identity = jnp.ones((), s.dtype)
        else:
            info = jnp.finfo(s.dtype) if floating else jnp.iinfo(s.dtype)
            big = jnp.array(jnp.inf if floating else info.max, s.dtype)
            identity = -big if reduce == "amax" and floating else (
                jnp.array(info.min, s.dtype) if reduce == "amax" else big)
        s_base = s.at[at].set(identity)
    else:
        s_base = s
    if reduce in ("sum", "mean"):
        out = s_base.at[at].add(src)
    elif reduce == "prod":
        out = s_base.at[at].multiply(src)
    elif reduce == "amax":
        out = s_base.at[at].max(src)
    else:
        out = s_base.at[at].min(src)
    if reduce != "mean":
        return out
    count = jnp.zeros(s.shape, jnp.int32).at[at].add(1)
    hit = count > 0
    count = count + (1 if include_self else 0)
    safe = jnp.maximum(count, 1).astype(s.dtype)
    mean = out / safe if floating else jnp.floor_divide(out, safe)
    return jnp.where(hit, mean, s)


def _scatter_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor,
                    reduce: str, *, include_self: bool = True) -> Any:
    """``scatter_reduce.two`` (module docs)."""
    if (reduce not in _REDUCES or self.is_complex() or src.dtype != self.dtype
            or self.dim() == 0 or index.dim() != self.dim() or index.numel() == 0):
        return NotImplemented
    if self.dtype == torch.bool:  # sum: or, prod: and, amax/amin: or/and (mean: eager refuses)
        if reduce == "mean":
            return NotImplemented
        out = _scatter_reduce(self.to(torch.int32), dim, index, src.to(torch.int32), reduce,
                              include_self=include_self)
        return out != 0
    dim = dim % self.dim()
    return jax_segment("scatter_reduce", _scatter_reduce_jax, self, index.to(torch.int32), src,
                       dim=dim, reduce=reduce, include_self=bool(include_self))[0]


def _scatter_value(self: torch.Tensor, dim: int, index: torch.Tensor, value: Any) -> Any:
    """``scatter.value`` with an index longer than ``self`` along ``dim``
    (``scatter_reduce``'s backward makes one): torch_xla's lowering slices
    past the end and fails; ``scatter.src`` of the filled index shape does
    not."""
    if self.dim() == 0 or index.dim() != self.dim() or \
            index.shape[dim % self.dim()] <= self.shape[dim % self.dim()]:
        return NotImplemented
    src = torch.full(index.shape, value, dtype=self.dtype, device=self.device)
    return torch.ops.aten.scatter.src(self, dim, index, src)


def _index_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor,
                  reduce: str, *, include_self: bool = True) -> Any:
    """``index_reduce`` (``prod``, ``mean``, ``amax``, ``amin``): torch_xla's
    lowering failed on every sample ("index out of range"). It is
    ``scatter_reduce`` with the 1-d index spread over ``source``'s shape
    along ``dim`` (0-d tensors as 1-element vectors)."""
    if self.dim() == 0:
        out = _index_reduce(self.reshape(1), 0, index, source.reshape(1), reduce,
                            include_self=include_self)
        return out if out is NotImplemented else out.reshape(())
    if index.dim() != 1 or source.dim() != self.dim():
        return NotImplemented
    dim = dim % self.dim()
    view = [1] * source.dim()
    view[dim] = -1
    spread = index.reshape(view).expand(source.shape)
    return _scatter_reduce(self, dim, spread, source, reduce, include_self=include_self)


def scatter_lowerings() -> dict[Any, Callable[..., Any]]:
    """aten overload -> lowering, merged into :func:`jax_lowerings`."""
    aten = torch.ops.aten
    return {aten.scatter_reduce.two: _scatter_reduce, aten.scatter.value: _scatter_value,
            aten.index_reduce.default: _index_reduce}
