"""Symbolic output sizes for ``call_jax`` under ``torch.compile(dynamic=True)``.

``call_jax``'s fake implementation (:mod:`hlobridge._src.custom_op`) asks
:func:`symbolic_outputs` when an input has symbolic sizes: the JAX function
is traced once by :func:`jax.eval_shape` on inputs whose shapes are JAX
symbolic dimensions (one per torch symbol), and each output dimension, a JAX
dimension expression, becomes the same expression over the torch
``SymInt`` s. The sizes thus stay symbolic through the JAX call, where they
used to be specialised (with a guard) to the first call's values.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import jax
import torch

from hlobridge._src.dynamic.symbols import is_symbolic, jax_dims, torch_size
from hlobridge._src.errors import BridgeError, DynamicShapeError

__all__ = ["any_symbolic", "symbolic_outputs"]


def any_symbolic(tensors: Sequence[Any]) -> bool:
    """Whether any of ``tensors`` has a symbolic size."""
    return any(is_symbolic(t) for t in tensors)


def _shape_env(tensors: Sequence[torch.Tensor]) -> Any:
    for t in tensors:
        for d in t.shape:
            if isinstance(d, torch.SymInt):
                return d.node.shape_env
    return None


def symbolic_outputs(fn: Any, tensors: Sequence[torch.Tensor], jax_dtype: Any,
                     x64: bool) -> tuple[Any, list[tuple[tuple[Any, ...], Any]]]:
    """``(output pytree of ShapeDtypeStruct, [(torch sizes, JAX dtype)])`` of
    the registered function ``fn`` (a :class:`~hlobridge._src.custom_op.JaxFunction`)
    on ``tensors`` (fake, with symbolic sizes)."""
    jshapes, env = jax_dims([tuple(t.shape) for t in tensors], _shape_env(tensors))
    names = {str(s): s for s in env}
    torch_env: dict[str, Any] = {}
    for t, js in zip(tensors, jshapes):
        for d, jd in zip(t.shape, js):
            if isinstance(d, torch.SymInt) and str(jd) in names:
                torch_env.setdefault(str(jd), d)
    shape_env = _shape_env(tensors)
    for name, sym in names.items():  # a symbol only inside sizes (floordiv(s0, 2))
        if name not in torch_env and shape_env is not None and sym in shape_env.var_to_val:
            torch_env[name] = shape_env.create_symintnode(
                sym, hint=int(shape_env.var_to_val[sym]))
    sds = [jax.ShapeDtypeStruct(s, jax_dtype(t.dtype))  # type: ignore[no-untyped-call]
           for s, t in zip(jshapes, tensors)]
    with jax.enable_x64(True) if x64 else contextlib.nullcontext():
        try:
            out_tree = jax.eval_shape(fn.structured, *sds)
        except BridgeError:
            raise
        except Exception as e:
            raise DynamicShapeError(
                f"hlobridge dynamic shapes: the JAX function {fn.name} cannot be traced with "
                f"symbolic sizes ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''});"
                f" compile with torch.compile(..., dynamic=False)") from e
    outs = [(tuple(torch_size(d, torch_env) for d in o.shape), o.dtype)
            for o in jax.tree_util.tree_leaves(out_tree)]
    return out_tree, outs
