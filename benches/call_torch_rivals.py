"""The other ways to call a torch model from a JAX training step, for
``benches/call_torch_bench.py``. Each maker returns ``apply(params, ids) ->
logits`` (``params``: ``hb.torch_module``'s dict) or raises; the bench
records the error as the row's reason.

- :func:`dlpack_hop`: eager torch from inside the jitted step through
  ``jax.pure_callback`` (forward; the backward is a second callback running
  torch autograd), arrays handed over without copies where possible (numpy
  views of JAX's buffers, ``torch.from_numpy``): the design of callback
  bridges (jax2torch, torch_jax_interop, the FFI-callback torch2jax);
- :func:`torchax_apply`: torchax's ``JittableModule.functional_call`` with
  ``torch_view`` / ``jax_view`` (torchax runs each aten op as its JAX
  re-implementation while JAX traces; needs flax, from
  ``benches/requirements.txt``);
- :func:`torch2jax_apply`: ``torch2jax.t2j`` (PyPI's ``torch2jax``, a
  ``__torch_function__`` re-implementation of torch functions in JAX).
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from call_torch_models import BenchModel


class _Forward(torch.nn.Module):
    """``bm.forward`` as a module's forward (what functional_call runs)."""

    def __init__(self, bm: BenchModel) -> None:
        super().__init__()
        self.inner = bm.module
        self._fwd = bm.forward

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self._fwd(self.inner, ids)


def dlpack_hop(bm: BenchModel, names: list[str]) -> Any:
    """``apply(params, ids)`` running ``bm`` in eager torch via callbacks."""
    model = _Forward(bm)

    def run(params: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
        with warnings.catch_warnings():  # read-only views of JAX's buffers: not written
            warnings.simplefilter("ignore", UserWarning)
            state = {"inner." + n: torch.from_numpy(np.asarray(params[n])) for n in names}
            ids_t = torch.from_numpy(np.asarray(ids)).long()
        with torch.no_grad():
            out = torch.func.functional_call(model, state, (ids_t,))
        return out.numpy()  # type: ignore[no-any-return]

    def grads(params: dict[str, np.ndarray], ids: np.ndarray, ct: np.ndarray
              ) -> dict[str, np.ndarray]:
        state = {"inner." + n: torch.from_numpy(np.array(params[n])).requires_grad_()
                 for n in names}
        ids_t = torch.from_numpy(np.asarray(ids)).long()
        out = torch.func.functional_call(model, state, (ids_t,))
        gs = torch.autograd.grad(out, list(state.values()), torch.from_numpy(np.asarray(ct)))
        return {n: g.numpy() for n, g in zip(names, gs)}

    @jax.custom_vjp
    def f(params: Any, ids: Any) -> Any:
        shape = jax.ShapeDtypeStruct((*ids.shape, bm.vocab), jnp.float32)
        return jax.pure_callback(run, shape, params, ids)

    def fwd(params: Any, ids: Any) -> Any:
        return f(params, ids), (params, ids)

    def bwd(res: Any, ct: Any) -> Any:
        params, ids = res
        shapes = {n: jax.ShapeDtypeStruct(v.shape, v.dtype) for n, v in params.items()}
        return jax.pure_callback(grads, shapes, params, ids, ct), None

    f.defvjp(fwd, bwd)
    return f


def torchax_apply(bm: BenchModel) -> Any:
    """torchax's ``JittableModule`` as a pure function of JAX arrays."""
    import torchax
    from torchax.interop import JittableModule, jax_view, torch_view

    env = torchax.default_env()
    jm = JittableModule(bm.module)
    fwd = bm.forward

    def apply(params: dict[str, Any], ids: Any) -> Any:
        with env:
            out = jm.functional_call(fwd, torch_view(params), {}, torch_view(ids))
        return jax_view(out)

    return apply


def torch2jax_apply(bm: BenchModel, params: dict[str, Any]) -> Any:
    """``torch2jax.t2j`` of the module, fed the full state dict (tied
    weights under every name)."""
    from torch2jax import t2j

    f = t2j(_Forward(bm))
    sd_names = list(bm.module.state_dict())
    alias = {n: n for n in params}
    for n, t in bm.module.state_dict(keep_vars=True).items():
        if n not in alias:  # a tied weight: the name it is stored under
            alias[n] = next(k for k, v in bm.module.named_parameters() if v is t)
    def apply(p: dict[str, Any], ids: Any) -> Any:
        return f(ids, state_dict={"inner." + n: p[alias[n]] for n in sd_names})

    return apply
