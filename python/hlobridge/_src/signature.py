"""Call signatures of a JAX function called on torch pytrees: how a call's
flattened ``(args, kwargs)`` becomes the function hlobridge lowers, how the
function is named in receipts and errors, and the error for arguments that
cannot be part of a cache key.

A call's pytree is flattened once (:func:`jax.tree_util.tree_flatten`);
``torch.Tensor`` leaves are the program's array inputs and every other leaf
is static: baked into the program and part of the cache key.
:func:`rebuild` turns ``(fn, treedef, leaves)`` back into a function of the
arrays alone, which is what every lowering path (``call_jax``, its
autograd and lazy paths) traces.

This module is a leaf: it imports only torch, JAX, numpy and the native
module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import torch
from jax import tree_util

from hlobridge._src.errors import ArgumentError, OutputError

__all__ = ["function_name", "rebuild", "unhashable_error"]

_Tensor = torch.Tensor
# What a function may return as a leaf: arrays (tracers while traced), numpy
# values and Python numbers (which JAX turns into 0-d arrays).
_OUT_LEAF_TYPES = (jax.Array, jax.core.Tracer, np.ndarray, np.generic, bool, int, float, complex)


def function_name(fn: Callable[..., Any]) -> str:
    """``fn``'s qualified name (else its name, else its repr): the name of its
    receipt segment and of ``fn`` in error messages."""
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn))


def rebuild(fn: Callable[..., Any], treedef: Any, leaves: list[Any]) -> Callable[..., Any]:
    """``main(*arrays)``: ``fn`` called on the pytree ``treedef`` with the
    tensor leaves replaced by ``arrays`` and the static leaves kept. Named
    ``main`` so that the lowered module does not depend on ``fn``'s name.
    Raises :class:`~hlobridge.OutputError` (while traced) for a result leaf
    torch cannot receive."""
    is_tensor = [isinstance(leaf, _Tensor) for leaf in leaves]
    statics = [None if t else leaf for t, leaf in zip(is_tensor, leaves)]

    def main(*arrays: Any) -> Any:
        it = iter(arrays)
        full = [next(it) if t else s for t, s in zip(is_tensor, statics)]
        a, kw = tree_util.tree_unflatten(treedef, full)
        out = fn(*a, **kw)
        _check_outputs(fn, out)
        return out

    main.__name__ = main.__qualname__ = "main"
    return main


def _check_outputs(fn: Callable[..., Any], out: Any) -> None:
    """Raise :class:`OutputError` for a result leaf torch cannot receive."""
    for path, leaf in tree_util.tree_flatten_with_path(out)[0]:
        if not isinstance(leaf, _OUT_LEAF_TYPES):
            where = f" at {tree_util.keystr(path)}" if path else ""
            raise OutputError(f"call_jax: {function_name(fn)} returned a {type(leaf).__qualname__}"
                              f"{where}, which is not an array; return arrays or numbers only "
                              f"(keep other values outside the function)")


def unhashable_error(leaves: list[Any]) -> ArgumentError:
    """The error for a call whose static leaves cannot be a cache key (raised
    by the caller when the key lookup fails with ``TypeError``)."""
    for leaf in leaves:
        if isinstance(leaf, _Tensor):
            continue
        try:
            hash(leaf)
        except TypeError:
            kind = type(leaf).__module__ + "." + type(leaf).__qualname__
            hint = (" (pass arrays as torch tensors, e.g. torch.from_numpy(a) or "
                    "hlobridge.jax_to_pt(a))" if hasattr(leaf, "__array__") else "")
            return ArgumentError(f"call_jax: non-tensor arguments are static and must be "
                                 f"hashable; got an unhashable {kind}{hint}")
    return ArgumentError("call_jax: the arguments cannot be used as a cache key")
