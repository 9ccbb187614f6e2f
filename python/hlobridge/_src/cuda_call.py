"""``hb.call_jax`` on CUDA tensors: the JAX function is lowered once per
signature for the ``cuda`` platform (through :func:`hlobridge._src.lowering.lower`,
which applies no host rewrite: those exist for the CPU plugin only) and run
on the CUDA runtime by :class:`hlobridge.devices.DeviceProgram`, with the
tensors in and out by DLPack.

``call_jax`` routes here when a tensor argument is on a CUDA device (its
general path, like the torch_xla lazy path). Separate from
:mod:`hlobridge.devices` so that the stitching module, which dispatches
device tensors to :mod:`hlobridge.devices`, never imports the lowering.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from hlobridge._src.errors import ArgumentError, DtypeError
from hlobridge._src.devices import DeviceProgram

__all__ = ["call_jax_cuda", "call_jax_routed"]

_LOCK = threading.Lock()
_LOWERED: dict[Any, tuple[DeviceProgram, Any]] = {}


def call_jax_routed(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                    leaves: list[Any], treedef: Any, t0: float) -> Any:
    """``call_jax`` on CUDA tensors (the ``cuda`` row of :mod:`hlobridge._src.routing`)."""
    return call_jax_cuda(fn, *args, **kwargs)


def call_jax_cuda(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``hb.call_jax(fn, *args, **kwargs)`` for CUDA tensors: ``fn`` is
    lowered once per signature for the ``cuda`` platform and run on the CUDA
    runtime; non-tensor leaves are static. Gradients are not supported on
    this path yet (a tensor that requires grad under grad mode is an
    :class:`ArgumentError`)."""
    import torch
    from jax import tree_util

    from hlobridge._src.dtypes import DTYPES
    from hlobridge._src.lowering import lower, segment_of

    leaves, treedef = tree_util.tree_flatten((args, kwargs))
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    for i, t in enumerate(tensors):
        if t.requires_grad and torch.is_grad_enabled():
            raise ArgumentError(f"call_jax on CUDA tensors: input {i} requires grad; gradients are "
                                f"not supported on the CUDA path yet (detach it or use torch.no_grad())")
        if t.dtype not in DTYPES:
            raise DtypeError(f"call_jax on CUDA tensors: unsupported dtype {t.dtype}")
    sig = tuple((t.dtype, tuple(t.shape)) if isinstance(t, torch.Tensor) else (type(t), t) for t in leaves)
    key = (fn, treedef, sig)
    with _LOCK:
        hit = _LOWERED.get(key)
    if hit is None:
        low = lower(fn, treedef, leaves, "cuda")
        seg = segment_of(fn, low, "cuda", "", len(tensors), low.out_tree.num_leaves)
        hit = (DeviceProgram(low.text, segments=(seg,)), low.out_tree)
        with _LOCK:
            _LOWERED.setdefault(key, hit)
    prog, out_tree = hit
    return out_tree.unflatten(prog(*tensors))
