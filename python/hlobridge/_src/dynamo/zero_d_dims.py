"""Ops with a ``dim`` argument applied to a 0-d tensor.

torch treats a 0-d tensor as a 1-element vector for ``dim`` (``dim`` may be
0 or -1: ``x.sum(0)``, ``x.cumsum(-1)``, ``x.index_select(0, i)``, ``x.max(0)``
of a 0-d ``x`` are 0-d results); torch_xla wraps ``dim`` against rank 0 and
fails (``RuntimeError: Value out of range (expected to be in range of [0,
-1], but got 0)``: 133 samples of the op sweep, in reductions, scans and
index ops, and every ``masked.*`` op that reduces a 0-d input; see
docs/op_numerics.md). Here, for the ops of :data:`_OPS`: the 0-d tensor
arguments (``self``, ``index``, ``source``, ``src``) as 1-element vectors,
``dim`` as 0, the op itself, and each 1-element result reshaped back to 0-d
(the results of these ops are 0-d for a 0-d input, as torch's).

:func:`zero_d_wrap` wraps an entry of the backend's decomposition table (or
none), which keeps handling every other input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["ZERO_D_OPS", "zero_d_wrap"]

_aten = torch.ops.aten

_OPS = (
    "sum.dim_IntList", "mean.dim", "prod.dim_int", "nansum.default", "amax.default",
    "amin.default", "argmax.default", "argmin.default", "any.dim", "any.dims", "all.dim",
    "all.dims", "logsumexp.default", "max.dim", "min.dim", "cumsum.default", "cumprod.default",
    "cummax.default", "cummin.default", "logcumsumexp.default", "count_nonzero.dim_IntList",
    "index_select.default", "index_add.default", "index_copy.default", "index_fill.int_Scalar",
    "index_fill.int_Tensor", "gather.default", "scatter.src", "scatter.value",
    "scatter_add.default", "_softmax.default", "_log_softmax.default", "norm.ScalarOpt_dim",
    "linalg_vector_norm.default", "aminmax.default", "index_reduce.default",
)
"""The ops (``aten`` overload names) rewritten for a 0-d ``self``."""

_AS_VECTOR = ("self", "index", "source", "src")
"""The tensor arguments that become 1-element vectors when 0-d."""


def _overload(name: str) -> Any:
    packet, _, overload = name.partition(".")
    p = getattr(_aten, packet, None)
    return getattr(p, overload, None) if p is not None else None


ZERO_D_OPS: tuple[Any, ...] = tuple(o for o in (_overload(n) for n in _OPS) if o is not None)


def _applies(dim: Any) -> bool:
    if dim is None:
        return False
    return not (isinstance(dim, (list, tuple)) and len(dim) == 0)


def zero_d_wrap(op: Any, inner: Callable[..., Any] | None) -> Callable[..., Any]:
    """The decomposition of ``op``: the 1-element-vector form of a 0-d
    ``self`` with a ``dim`` (module docs), else ``inner`` (``NotImplemented``
    without one: the tracer records the op)."""
    schema = op._schema
    names = [a.name for a in schema.arguments]

    def decomp(*args: Any, **kwargs: Any) -> Any:
        bound = dict(zip(names, args))
        bound.update(kwargs)
        x = bound.get("self")
        if isinstance(x, torch.Tensor) and x.dim() == 0 and _applies(bound.get("dim")):
            dim = bound["dim"]
            bound["dim"] = 0 if isinstance(dim, int) else [0]
            for k in _AS_VECTOR:
                v = bound.get(k)
                if isinstance(v, torch.Tensor) and v.dim() == 0:
                    bound[k] = v.reshape(1)
            self_ = bound.pop("self")
            out = op(self_, **bound)
            if isinstance(out, torch.Tensor):
                return out.reshape(())
            return tuple(o.reshape(()) if isinstance(o, torch.Tensor) else o for o in out)
        return NotImplemented if inner is None else inner(*args, **kwargs)

    return decomp
