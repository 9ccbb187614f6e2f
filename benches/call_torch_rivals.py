"""The other ways to call a torch model from a JAX training step, for
``benches/call_torch_bench.py``. Each maker returns ``apply(params, ids) ->
logits`` (``params``: ``hb.torch_module``'s dict) or raises; the bench
records the error as the row's reason.

- :func:`dlpack_hop`: eager torch from inside the jitted step through
  ``jax.pure_callback`` (forward; the backward is a second callback running
  torch autograd), arrays handed over without copies where possible (numpy
  views of JAX's buffers, ``torch.from_numpy``): the design of callback
  bridges (jax2torch, torch_jax_interop);
- :func:`torchax_apply`: torchax's ``JittableModule.functional_call`` with
  ``torch_view`` / ``jax_view`` (torchax runs each aten op as its JAX
  re-implementation while JAX traces; needs flax, from
  ``benches/requirements.txt``);
- :func:`torch2jax_apply`: rdyro/torch2jax (PyPI ``wrap-torch2jax``):
  ``torch2jax(fn, *example_args, depth=1)`` runs eager torch from inside the
  jitted step through an XLA FFI custom call of its own C++ extension
  (buffers handed to torch without copies), with a custom VJP whose
  backward is a second FFI call running ``torch.func.vjp``. The extension
  is compiled with torch's ``cpp_extension`` (ninja and a C++ compiler) on
  first use and cached under ``~/.cache/torch2jax``.
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


def torch2jax_apply(bm: BenchModel, params: dict[str, Any], ids: Any) -> Any:
    """rdyro/torch2jax's ``torch2jax`` of ``functional_call`` over the
    module, its VJP (first order: ``depth=1``) from ``torch.func.vjp``.
    ``ids``: an example input (its shape and dtype are baked in)."""
    import os
    import sys

    # cpp_extension runs `ninja` (a bench-only dependency installed into the
    # venv's bin): make it findable when the venv is not activated.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    from wrap_torch2jax import torch2jax

    model = _Forward(bm)
    names = list(params)

    def fn(p: dict[str, torch.Tensor], ids_t: torch.Tensor) -> torch.Tensor:
        state = {"inner." + n: p[n] for n in names}
        return torch.func.functional_call(model, state, (ids_t.long(),))

    example = ({n: torch.from_numpy(np.array(v)) for n, v in params.items()},
               torch.from_numpy(np.array(ids)))
    return torch2jax(fn, *example, depth=1)
