"""Gradients through :func:`hlobridge.call_jax`.

When grad mode is on and a tensor argument requires grad, ``call_jax`` runs
the function as a ``torch.autograd.Function`` built from ``jax.vjp``:

- the **forward** program computes the outputs and the VJP residuals
  (``jax.vjp(f, *differentiable)`` flattened: the residuals are the array
  leaves of the returned VJP closure); torch saves the residuals;
- the **backward** program rebuilds the VJP closure from the residuals and
  applies it to the output cotangents.

Both are ordinary ``call_jax`` programs: compiled once per signature, cached,
zero-copy, with receipts (segment names ``"<fn> (vjp forward)"`` and
``"<fn> (vjp backward)"``). Only inputs that require grad are differentiated;
integer and boolean outputs are marked non-differentiable (their cotangents
are JAX ``float0`` zeros). Complex tensors that require grad are refused, and
double backward is not supported (``once_differentiable``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import tree_util
from torch.autograd.function import once_differentiable

from hlobridge._src.dtypes import require_torch_dtype
from hlobridge._src.entry_cache import table
from hlobridge._src.signature import function_name, rebuild


class _Plan:
    """The forward/backward pair for one function signature. ``out_tree``,
    ``res_tree`` and the output metadata are filled in when the forward is
    traced, which happens before the first forward result returns."""

    __slots__ = ("run", "fwd", "bwd", "mask", "out_tree", "res_tree", "float_out", "out_avals")

    run: Callable[..., Any]
    """``call_jax``, which runs ``fwd`` and ``bwd``."""
    fwd: Callable[..., Any]
    bwd: Callable[..., Any]
    mask: tuple[bool, ...]
    out_tree: Any
    res_tree: Any
    float_out: tuple[bool, ...]
    out_avals: list[tuple[tuple[int, ...], Any]]


def _make_plan(run: Callable[..., Any], fn: Callable[..., Any], treedef: Any, leaves: list[Any],
               mask: tuple[bool, ...]) -> _Plan:
    main = rebuild(fn, treedef, leaves)
    plan = _Plan()
    plan.run = run
    plan.mask = mask

    def fwd(*arrays: Any) -> tuple[list[Any], list[Any]]:
        def on_diff(*diff: Any) -> Any:
            it = iter(diff)
            return main(*[next(it) if m else a for a, m in zip(arrays, mask)])

        out, vjp = jax.vjp(on_diff, *[a for a, m in zip(arrays, mask) if m])
        out_leaves, plan.out_tree = tree_util.tree_flatten(out)
        res, plan.res_tree = tree_util.tree_flatten(vjp)
        plan.float_out = tuple(bool(jnp.issubdtype(o.dtype, jnp.inexact)) for o in out_leaves)
        plan.out_avals = [(tuple(o.shape), o.dtype) for o in out_leaves]
        return out_leaves, res

    def bwd(res: list[Any], cts: list[Any]) -> list[Any]:
        vjp = tree_util.tree_unflatten(plan.res_tree, res)
        it = iter(cts)
        full = [next(it) if f else np.zeros(shape, dtype=jax.dtypes.float0)
                for f, (shape, _) in zip(plan.float_out, plan.out_avals)]
        return list(vjp(plan.out_tree.unflatten(full)))

    name = function_name(fn)
    fwd.__qualname__ = f"{name} (vjp forward)"
    bwd.__qualname__ = f"{name} (vjp backward)"
    plan.fwd, plan.bwd = fwd, bwd
    return plan


class _VjpFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, plan: _Plan, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs, res = plan.run(plan.fwd, *tensors)
        ctx.plan = plan
        ctx.save_for_backward(*res)
        ctx.mark_non_differentiable(*[o for o, f in zip(outs, plan.float_out) if not f])
        return tuple(outs)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *cts: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        plan: _Plan = ctx.plan
        float_cts = [
            ct if ct is not None
            else torch.zeros(shape, dtype=require_torch_dtype(dtype, "call_jax"))
            for ct, f, (shape, dtype) in zip(cts, plan.float_out, plan.out_avals) if f
        ]
        grads = iter(plan.run(plan.bwd, list(ctx.saved_tensors), float_cts))
        return (None, *[next(grads) if m else None for m in plan.mask])


def call_with_grad(run: Callable[..., Any], fn: Callable[..., Any], owner: Any,
                   key: tuple[Any, ...], treedef: Any, leaves: list[Any]) -> Any:
    """``call_jax`` for calls that autograd must track (see the module docs).
    ``run`` is ``call_jax`` itself (passed in so that this module does not
    import :mod:`hlobridge._src.jax_bridge`, which imports it); ``owner`` and
    ``key`` are the call's entry-table owner and signature key."""
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    mask = tuple(bool(t.requires_grad) for t in tensors)
    pkey = (*key, mask)
    plan_table = table(owner)
    plan = plan_table.get(pkey)
    if plan is None:
        plan = _make_plan(run, fn, treedef, leaves, mask)
        plan_table[pkey] = plan
    outs = _VjpFunction.apply(plan, *tensors)  # type: ignore[no-untyped-call]
    return plan.out_tree.unflatten(list(outs))
