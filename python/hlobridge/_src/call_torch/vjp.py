"""Gradients of an embedded torch function: a ``jax.custom_vjp`` whose
backward is the torch backward, captured and embedded like the forward.

- forward: the embedded capture (:func:`~hlobridge._src.call_torch.embed.embedded`);
  the residuals are the flat inputs themselves;
- backward: :meth:`TorchFn.vjp` -- the torch function differentiated by
  ``torch.autograd.grad`` (torch autograd, the same derivative formulas
  eager torch uses), traced by ``make_fx`` with the backend's decompositions,
  lowered the same way and embedded into the same JAX program. It
  recomputes the forward inside the backward module; under ``jax.jit`` both
  are in one XLA program, where the recomputation is XLA's to simplify.

Only floating (and complex) inputs get gradients; integer and bool inputs,
and those the function marks as not differentiable (``torch_module``'s
buffers), get none (``None``, JAX's symbolic zero). Cotangents of integer outputs are
dropped. Under ``jax.vmap`` both the forward and the backward re-capture at
the batched shape (each is a ``custom_vmap`` function). Forward-mode
differentiation (``jax.jvp``, ``jax.jacfwd``) is not supported:
``custom_vjp`` functions have none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from hlobridge._src.call_torch.capture import TorchFn
from hlobridge._src.call_torch.embed import embedded

__all__ = ["differentiable"]


def _is_float(x: Any) -> bool:
    return bool(jnp.issubdtype(x.dtype, jnp.inexact))


def differentiable(tfn: TorchFn, keep: Any = None) -> Callable[..., tuple[Any, ...]]:
    """``f(*arrays) -> tuple of arrays`` with the torch backward as its VJP.
    Made for each call: its closures hold ``keep`` (the user's function),
    which the ``TorchFn`` references only weakly, alive for as long as the
    JAX trace that uses them (the backward is traced after the forward,
    when a function made inside the traced code may be gone otherwise)."""
    fwd_call = embedded(tfn)

    @jax.custom_vjp
    def call(*arrays: Any) -> tuple[Any, ...]:
        return fwd_call(*arrays)

    def fwd(*arrays: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        return fwd_call(*arrays), arrays

    def bwd(res: tuple[Any, ...], cts: tuple[Any, ...]) -> tuple[Any, ...]:
        primals = res
        nondiff = tfn.jax_cache.get("nondiff", frozenset())
        diff = tuple(_is_float(a) and i not in nondiff for i, a in enumerate(primals))
        out_diff = tuple(_is_float(c) and c.dtype != jax.dtypes.float0 for c in cts)
        _ = keep
        if not any(diff):
            return tuple(None for _ in primals)
        back = embedded(tfn.vjp(len(primals), diff, out_diff))
        kept = [c for c, wanted in zip(cts, out_diff) if wanted]
        grads = iter(back(*primals, *kept))
        return tuple(next(grads) if d else None for d in diff)

    call.defvjp(fwd, bwd)
    return call  # type: ignore[no-any-return]
