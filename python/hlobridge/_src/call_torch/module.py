"""``hb.torch_module(module)``: a torch module as a pure JAX function of its
parameters, ``(apply_fn, params)``.

- ``params`` is a dict ``{name: jax.Array}`` of the module's parameters and
  buffers (``named_parameters()`` then ``named_buffers()``, tied weights
  once). Parameters are made through DLPack: zero-copy when JAX accepts the
  tensor's layout (a contiguous, aligned CPU tensor; JAX copies otherwise).
  Such an array *aliases* the torch parameter: do not update the module's
  parameters in place (a torch optimizer step) while you use them. Buffers
  are copied (torch's own forward updates them in place). Without JAX's x64 mode, 64-bit tensors (BatchNorm's
  ``num_batches_tracked``) are narrowed to 32 bits (a copy), as JAX would.
- ``apply_fn(params, *inputs, mutable=False, **kwargs)`` runs
  ``forward(module, *inputs, **kwargs)`` (default: ``module(*inputs,
  **kwargs)``) with the module's tensors replaced by ``params``
  (``torch.func.functional_call``), through :func:`hlobridge.call_torch`.
  It is pure: usable under ``jax.jit``, ``jax.grad`` (gradients for every
  floating entry of ``params``) and ``jax.vmap``, and trainable with Optax.
- Buffers the module mutates (BatchNorm's running statistics and
  ``num_batches_tracked`` in training mode) are not written back anywhere:
  with ``mutable=True``, ``apply_fn`` returns ``(output, new_buffers)``
  where ``new_buffers`` maps every buffer name to its value after the call
  (unchanged buffers come back as the input arrays); merge it into
  ``params`` for the next step (``{**params, **new_buffers}``). With
  ``mutable=False`` the updates are dropped. The torch function mutates
  clones of the buffers, which functionalization turns into new outputs.

``apply_fn.buffer_names`` lists the buffers' keys: ``jax.grad`` and Optax
want floating leaves only, so split them off the trainable parameters
(``buffers = {n: params.pop(n) for n in apply_fn.buffer_names}``) and pass
``{**params, **buffers}``.

``module.training`` is read at each call (part of the cache key): set
``train()``/``eval()`` on the module as in torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import torch

from hlobridge._src.call_torch.call import call_torch
from hlobridge._src.errors import CallTorchError

__all__ = ["torch_module"]

_NARROW = {torch.int64: torch.int32, torch.float64: torch.float32,
           torch.complex128: torch.complex64}


def _to_jax(t: torch.Tensor) -> Any:
    from hlobridge._src.interop import pt_to_jax

    t = t.detach()
    if not jax.config.read("jax_enable_x64") and t.dtype in _NARROW:
        t = t.to(_NARROW[t.dtype])
    return pt_to_jax(t.contiguous())  # a copy only for a non-contiguous tensor


class _Apply:
    """The torch side of ``apply_fn``: one per (module, forward, mutable)."""

    def __init__(self, module: torch.nn.Module, forward: Callable[..., Any] | None,
                 buffers: list[str], mutable: bool) -> None:
        self.module = module
        self.forward = forward
        self.buffers = buffers
        self.mutable = mutable
        self._buffer_set = frozenset(buffers)
        self.__qualname__ = f"{type(module).__name__}.forward"

    def nondiff(self, path: tuple[Any, ...]) -> bool:
        """Whether the input leaf at ``path`` (of ``(args, kwargs)``) is a
        buffer: torch cannot differentiate with respect to running
        statistics, so they get no gradient."""
        return (len(path) >= 3 and getattr(path[1], "idx", None) == 0
                and getattr(path[2], "key", None) in self._buffer_set)

    @property
    def training(self) -> bool:
        """The module's mode, read by :func:`~hlobridge._src.call_torch.call.torch_fn`
        for the cache key."""
        return bool(self.module.training)

    def __call__(self, params: dict[str, torch.Tensor], *inputs: Any, **kwargs: Any) -> Any:
        state = dict(params)
        bufs = {n: state[n].clone() for n in self.buffers if n in state}
        state.update(bufs)
        fwd = self.forward
        if fwd is None:
            out = torch.func.functional_call(self.module, state, inputs, kwargs)
        else:
            module = self.module

            def call(*xs: Any, **kw: Any) -> Any:
                return fwd(module, *xs, **kw)

            out = _functional(module, state, call, inputs, kwargs)
        if self.mutable:
            return out, bufs
        return out


def _functional(module: torch.nn.Module, state: dict[str, torch.Tensor],
                call: Callable[..., Any], inputs: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``call(*inputs, **kwargs)`` with ``module``'s tensors swapped for
    ``state`` (what ``functional_call`` does around ``forward``)."""
    from torch.nn.utils.stateless import _reparametrize_module

    with _reparametrize_module(module, state, tie_weights=True):
        return call(*inputs, **kwargs)


def torch_module(module: torch.nn.Module, forward: Callable[..., Any] | None = None
                 ) -> tuple[Callable[..., Any], dict[str, Any]]:
    """``(apply_fn, params)`` of ``module`` (see the module docs).
    ``forward(module, *inputs, **kwargs)``, when given, replaces
    ``module(*inputs, **kwargs)`` (e.g. to pick the logits out of a Hugging
    Face output, or to call another method)."""
    if not isinstance(module, torch.nn.Module):
        raise CallTorchError(f"hb.torch_module: expected a torch.nn.Module, got "
                             f"{type(module).__name__}")
    params: dict[str, Any] = {}
    for n, p in module.named_parameters():
        params[n] = _to_jax(p)
    buffers: list[str] = []
    for n, b in module.named_buffers():
        if n not in params:
            # A copy: torch's own forward passes update buffers in place
            # (BatchNorm in training mode), under a JAX computation that
            # may still be reading them (JAX dispatches asynchronously).
            params[n] = _to_jax(b.clone())
            buffers.append(n)
    appliers = {m: _Apply(module, forward, buffers, m) for m in (False, True)}

    def apply_fn(params: dict[str, Any], *inputs: Any, mutable: bool = False,
                 **kwargs: Any) -> Any:
        return call_torch(appliers[bool(mutable)], params, *inputs, **kwargs)

    apply_fn.__qualname__ = f"torch_module({type(module).__name__})"
    apply_fn.buffer_names = tuple(buffers)  # type: ignore[attr-defined]
    return apply_fn, params
