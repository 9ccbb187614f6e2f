"""Functional optimizers for :func:`hlobridge.compile_train_step`.

An optimizer here is a pair of pure functions over dicts of tensors (the
model's parameters by name), so that the update can be traced into the same
program as the forward and backward pass:

- ``init(params) -> state``: the initial state, a pytree of tensors;
- ``update(params, grads, state) -> (new_params, new_state)``.

:class:`SGD`, :class:`Adam` and :class:`AdamW` are written in torch ops and
follow ``torch.optim.SGD`` / ``Adam`` / ``AdamW`` exactly (tests compare them
step by step; ``Adam(weight_decay=)`` is torch's L2 term, ``AdamW``'s is
decoupled). Their hyperparameters are Python floats baked into the
program; to change them between steps (an ``lr_scheduler``), pass a
``torch.optim`` optimizer to :func:`hlobridge.compile_train_step` instead. :class:`JaxOptimizer` runs a JAX update function (Optax-style)
through :func:`hlobridge.call_jax`: inside a compiled train step it becomes a
JAX segment of the one stitched program.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "JaxOptimizer", "ClipGradNorm"]

Params = dict[str, torch.Tensor]


class Optimizer(Protocol):
    """What :func:`hlobridge.compile_train_step` needs of an optimizer."""

    def init(self, params: Params) -> Any:
        """Initial optimizer state for these parameters (a pytree of tensors)."""
        ...

    def update(self, params: Params, grads: Params, state: Any) -> tuple[Params, Any]:
        """New parameters and new state; must not mutate its arguments."""
        ...


@dataclass(frozen=True)
class SGD:
    """``torch.optim.SGD`` (momentum, dampening 0, weight decay, Nesterov)."""

    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False

    def init(self, params: Params) -> dict[str, torch.Tensor]:
        if self.momentum == 0.0:
            return {}
        return {k: torch.zeros_like(v) for k, v in params.items()}

    def update(self, params: Params, grads: Params, state: dict[str, torch.Tensor]
               ) -> tuple[Params, dict[str, torch.Tensor]]:
        new_params: Params = {}
        new_state: dict[str, torch.Tensor] = {}
        for k, p in params.items():
            g = grads[k]
            if self.weight_decay:
                g = g + self.weight_decay * p
            if self.momentum:
                buf = self.momentum * state[k] + g
                new_state[k] = buf
                g = g + self.momentum * buf if self.nesterov else buf
            new_params[k] = p - self.lr * g
        return new_params, new_state


@dataclass(frozen=True)
class Adam:
    """``torch.optim.Adam`` (no AMSGrad; L2 ``weight_decay`` as torch adds it
    to the gradient)."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0

    def init(self, params: Params) -> dict[str, Any]:
        some = next(iter(params.values()))
        return {"step": torch.zeros((), dtype=torch.float32, device=some.device),
                "m": {k: torch.zeros_like(v) for k, v in params.items()},
                "v": {k: torch.zeros_like(v) for k, v in params.items()}}

    def update(self, params: Params, grads: Params, state: dict[str, Any]
               ) -> tuple[Params, dict[str, Any]]:
        b1, b2 = self.betas
        step = state["step"] + 1
        # beta**step as exp(step * log(beta)): torch_xla turns a tensor
        # exponent of pow into a traced constant.
        bc1 = 1 - torch.exp(step * math.log(b1))
        bc2 = 1 - torch.exp(step * math.log(b2))
        new_params: Params = {}
        m2: Params = {}
        v2: Params = {}
        for k, p in params.items():
            g = grads[k]
            if self.weight_decay:
                g = g + self.weight_decay * p
            m = b1 * state["m"][k] + (1 - b1) * g
            v = b2 * state["v"][k] + (1 - b2) * g * g
            m2[k], v2[k] = m, v
            denom = torch.sqrt(v) / torch.sqrt(bc2) + self.eps
            new_params[k] = p - (self.lr / bc1) * m / denom
        return new_params, {"step": step, "m": m2, "v": v2}


@dataclass(frozen=True)
class AdamW:
    """``torch.optim.AdamW``: Adam with decoupled weight decay (the
    parameter is first scaled by ``1 - lr * weight_decay``; the gradient is
    left alone). State as :class:`Adam`'s."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 1e-2

    def init(self, params: Params) -> dict[str, Any]:
        return Adam.init(self, params)  # type: ignore[arg-type]

    def update(self, params: Params, grads: Params, state: dict[str, Any]
               ) -> tuple[Params, dict[str, Any]]:
        b1, b2 = self.betas
        step = state["step"] + 1
        # 1 - beta**step as -expm1(step * log(beta)) (no float32 cancellation).
        bc1 = -torch.expm1(step * math.log(b1))
        bc2 = -torch.expm1(step * math.log(b2))
        decay = 1.0 - self.lr * self.weight_decay
        new_params: Params = {}
        m2: Params = {}
        v2: Params = {}
        for k, p in params.items():
            g = grads[k]
            m = torch.lerp(state["m"][k], g, 1 - b1)
            v = b2 * state["v"][k] + (1 - b2) * (g * g)
            m2[k], v2[k] = m, v
            denom = torch.sqrt(v) / torch.sqrt(bc2) + self.eps
            new_params[k] = p * decay - (self.lr / bc1) * (m / denom)
        return new_params, {"step": step, "m": m2, "v": v2}


@dataclass(frozen=True)
class JaxOptimizer:
    """An optimizer whose math is JAX: ``init_fn(params) -> state`` and
    ``update_fn(params, grads, state) -> (new_params, new_state)`` over dicts
    of ``jax.Array`` (e.g. an Optax transformation followed by
    ``optax.apply_updates``). Both run through :func:`hlobridge.call_jax`, so
    inside a compiled train step the update is a JAX segment of the same
    program.

    ``JaxOptimizer(tx)`` with no ``update_fn`` takes an Optax
    ``GradientTransformation`` (``optax.adamw(...)``, ``optax.chain(...)``,
    ``optax.inject_hyperparams(...)``): its state keeps Optax's pytree
    (:mod:`hlobridge._src.optax_state`)."""

    init_fn: Callable[..., Any]
    update_fn: Callable[..., Any] | None = None

    def init(self, params: Params) -> Any:
        from hlobridge._src import optax_state
        from hlobridge._src.jax_bridge import call_jax

        detached = {k: v.detach() for k, v in params.items()}
        with torch.no_grad():
            if self.update_fn is None:
                return call_jax(optax_state.init, self.init_fn, detached)
            return call_jax(self.init_fn, detached)

    def update(self, params: Params, grads: Params, state: Any) -> tuple[Params, Any]:
        from hlobridge._src import optax_state
        from hlobridge._src.jax_bridge import call_jax

        if self.update_fn is None:
            new_params, new_state = call_jax(optax_state.update, self.init_fn, params, grads, state)
            return dict(new_params), new_state
        new_params, new_state = call_jax(self.update_fn, params, grads, state)
        return dict(new_params), new_state


@dataclass(frozen=True)
class ClipGradNorm:
    """Clip the gradients to a global L2 norm of at most ``max_norm`` (as
    ``torch.nn.utils.clip_grad_norm_``: scale by ``min(1, max_norm /
    (norm + 1e-6))``), then apply ``inner``."""

    max_norm: float
    inner: Any

    def init(self, params: Params) -> Any:
        return self.inner.init(params)

    def update(self, params: Params, grads: Params, state: Any) -> tuple[Params, Any]:
        norms = torch.stack([torch.linalg.vector_norm(g) for g in grads.values()])
        total = torch.linalg.vector_norm(norms)
        coef = torch.clamp(self.max_norm / (total + 1e-6), max=1.0)
        return self.inner.update(params, {k: g * coef for k, g in grads.items()}, state)
