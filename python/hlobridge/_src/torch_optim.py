"""``torch.optim`` optimizers inside :func:`hlobridge.compile_train_step`.

:class:`TorchOptimizer` wraps a ``torch.optim.SGD``, ``Adam``, ``AdamW`` or
``RMSprop`` (the exact classes; a subclass or any other optimizer raises
:class:`~hlobridge.errors.UnsupportedOptimizerError`, since its ``step`` is
not what is captured here). Its update is written in torch ops following
torch's single-tensor implementation line by line, and traced into the
step's one program:

- **state stays in the optimizer**: each call reads ``optimizer.state[p]``
  (``step``, ``exp_avg``, ``momentum_buffer``... as torch names them),
  passes the tensors to the program, and stores the program's new tensors
  back, so ``optimizer.state_dict()`` / ``load_state_dict`` work and a
  resumed run takes the same next step as eager torch. Missing state is
  created as torch's first ``step`` creates it;
- **scalar hyperparameters are program inputs**: ``lr``, ``betas``,
  ``eps``, ``weight_decay``, ``momentum``, ``dampening``, ``alpha`` are read
  from ``optimizer.param_groups`` on every call, so
  an ``lr_scheduler`` (or any edit of a group) never recompiles (one
  float32 vector holds them all: one input). Scalars
  torch computes in double on the host (``1 - beta``, ``log(beta)`` for
  the bias corrections, ``1 - lr * weight_decay``) are computed in double
  here too and passed in;
- **flags are structure**: ``nesterov``, ``maximize``, ``amsgrad``,
  ``centered``, ``decoupled_weight_decay`` and whether ``momentum`` is
  zero select the traced code; changing one traces a new program.
  ``foreach`` and ``fused`` pick torch kernels, not math: ignored.

Parameter groups map to the model's parameters by identity; parameters
without a gradient in the step (unused by the loss, or frozen with
``requires_grad=False``) are left alone, parameter and state, as torch
skips them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from hlobridge._src.errors import ArgumentError, UnsupportedOptimizerError

__all__ = ["TorchOptimizer", "SUPPORTED"]

SUPPORTED: tuple[type[torch.optim.Optimizer], ...] = (
    torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.RMSprop)

_NAMES = ", ".join(f"torch.optim.{c.__name__}" for c in SUPPORTED)

# Hyperparameters (per group, in this order) each kind passes to the program.
_HYPER = {
    "sgd": ("lr", "weight_decay", "momentum", "one_minus_dampening"),
    "adam": ("lr", "weight_decay", "decay", "one_minus_beta1", "beta2", "one_minus_beta2",
             "log_beta1", "log_beta2", "eps"),
    "rmsprop": ("lr", "weight_decay", "alpha", "one_minus_alpha", "eps", "momentum"),
}


def optimizer_kind(opt: torch.optim.Optimizer) -> str:
    t = type(opt)
    if t is torch.optim.SGD:
        return "sgd"
    if t is torch.optim.Adam or t is torch.optim.AdamW:
        return "adam"
    if t is torch.optim.RMSprop:
        return "rmsprop"
    raise UnsupportedOptimizerError(
        f"compile_train_step: {t.__module__}.{t.__qualname__} has no captured update (its "
        f"step() is arbitrary Python); supported torch optimizers: {_NAMES} (exact classes), "
        f"or an hlobridge.optim optimizer (SGD, Adam, AdamW, JaxOptimizer, ClipGradNorm)")


def _f(v: Any) -> float:
    return float(v.item()) if isinstance(v, torch.Tensor) else float(v)


class TorchOptimizer:
    """A supported ``torch.optim`` optimizer seen as program inputs and a
    traceable update (see the module docstring)."""

    def __init__(self, opt: torch.optim.Optimizer, params: dict[str, torch.Tensor],
                 frozen: Sequence[torch.Tensor] = ()) -> None:
        self.kind = optimizer_kind(opt)
        self.opt = opt
        self._by_id = {id(p): k for k, p in params.items()}
        # Frozen parameters (requires_grad=False) never get a gradient:
        # torch's step skips them, so does this one.
        self._frozen = {id(p) for p in frozen}
        self._hyper_cache: tuple[Any, list[torch.Tensor]] | None = None
        self.layout()

    # -- host side --------------------------------------------------------------
    def layout(self) -> tuple[Any, ...]:
        """``(group index, name, param)`` of every managed parameter, and the
        structure key (flags per group); recomputed on each call."""
        entries: list[tuple[int, str, torch.Tensor]] = []
        flags: list[tuple[Any, ...]] = []
        for gi, g in enumerate(self.opt.param_groups):
            n_managed = len(entries)
            if g.get("differentiable"):
                raise UnsupportedOptimizerError(
                    "compile_train_step: differentiable=True torch optimizers are not captured")
            for p in g["params"]:
                name = self._by_id.get(id(p))
                if name is None and id(p) in self._frozen:
                    continue
                if name is None:
                    raise ArgumentError(
                        "compile_train_step: the optimizer holds a tensor that is not a "
                        "trainable parameter of the model (build it from model.parameters())")
                if p.is_complex() or p.is_sparse:
                    raise UnsupportedOptimizerError(
                        "compile_train_step: complex or sparse parameters are not supported "
                        "with a torch optimizer")
                entries.append((gi, name, p))
            flags.append((len(entries) - n_managed, bool(g.get("maximize", False)),
                          bool(g.get("nesterov", False)), bool(g.get("amsgrad", False)),
                          bool(g.get("centered", False)),
                          bool(g.get("decoupled_weight_decay", False)),
                          _f(g.get("momentum", 0.0)) != 0.0))
        self.entries = entries
        self.flags = tuple(flags)
        return self.flags

    def _state_keys(self, gi: int) -> list[str]:
        mom = self.flags[gi][6]
        if self.kind == "sgd":
            return ["momentum_buffer"] if mom else []
        if self.kind == "adam":
            return ["step", "exp_avg", "exp_avg_sq"] + (
                ["max_exp_avg_sq"] if self.flags[gi][3] else [])
        return ["step", "square_avg"] + (["momentum_buffer"] if _f(
            self.opt.param_groups[gi]["momentum"]) > 0 else []) + (
            ["grad_avg"] if self.flags[gi][4] else [])

    def state(self) -> tuple[list[dict[str, torch.Tensor]], torch.Tensor | None]:
        """Per managed parameter, its state tensors (created as torch creates
        them when missing) and, for SGD with momentum, a float vector that is
        1 where ``momentum_buffer`` did not exist yet (torch's first step
        sets the buffer to the gradient)."""
        out: list[dict[str, torch.Tensor]] = []
        fresh: list[float] = []
        any_mom = False
        for gi, _, p in self.entries:
            st = self.opt.state.get(p, {})
            d: dict[str, torch.Tensor] = {}
            for k in self._state_keys(gi):
                v = st.get(k)
                if k == "momentum_buffer" and self.kind == "sgd":
                    any_mom = True
                    fresh.append(1.0 if v is None else 0.0)
                if v is None:
                    v = (torch.zeros((), dtype=torch.float32) if k == "step"
                         else torch.zeros_like(p, memory_format=torch.preserve_format))
                d[k] = v.detach() if k == "step" else v
            out.append(d)
        vec = torch.tensor(fresh, dtype=torch.float32) if any_mom else None
        return out, vec

    def hyper(self) -> list[torch.Tensor]:
        """Every group's scalar hyperparameters, as ONE float32 vector input
        (one transfer, not one per scalar; the same tensor while the values
        do not change)."""
        groups = self.opt.param_groups
        vals: list[tuple[float, ...]] = []
        for g in groups:
            lr, wd = _f(g["lr"]), _f(g.get("weight_decay", 0.0))
            if self.kind == "sgd":
                vals.append((lr, wd, _f(g["momentum"]), 1.0 - _f(g["dampening"])))
            elif self.kind == "adam":
                b1, b2 = (_f(b) for b in g["betas"])
                decoupled = type(self.opt) is torch.optim.AdamW or g.get(
                    "decoupled_weight_decay", False)
                vals.append((lr, 0.0 if decoupled else wd, 1.0 - lr * wd if decoupled else 1.0,
                             1.0 - b1, b2, 1.0 - b2, math.log(b1) if b1 > 0 else -math.inf,
                             math.log(b2) if b2 > 0 else -math.inf, _f(g["eps"])))
            else:
                a = _f(g["alpha"])
                vals.append((lr, wd, a, 1.0 - a, _f(g["eps"]), _f(g["momentum"])))
        key = tuple(vals)
        cached = self._hyper_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        tensors = [torch.tensor([v for vs in vals for v in vs], dtype=torch.float32)]
        self._hyper_cache = (key, tensors)
        return tensors

    def store(self, new_state: list[dict[str, torch.Tensor]], unused: frozenset[str]) -> None:
        """Write the program's new state tensors into ``optimizer.state``
        (parameters without a gradient keep theirs, as in torch), and mark
        the optimizer as stepped, as ``optimizer.step()`` does for the
        ``lr_scheduler`` order check."""
        self.opt._opt_called = True  # type: ignore[attr-defined]
        for (_, name, p), d in zip(self.entries, new_state):
            if name in unused or not d:
                continue
            st = self.opt.state[p]
            for k, v in d.items():
                st[k] = v

    # -- traced side ------------------------------------------------------------
    def update(self, params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor | None],
               state: list[dict[str, torch.Tensor]], fresh: torch.Tensor | None,
               hyper: list[torch.Tensor]) -> tuple[dict[str, torch.Tensor],
                                                   list[dict[str, torch.Tensor]]]:
        """The update in torch ops (traced into the step's program)."""
        names = _HYPER[self.kind]
        n = len(names)
        vec = hyper[0]
        groups = [{k: vec[i * n + j] for j, k in enumerate(names)}
                  for i in range(len(self.flags))]
        new_params = dict(params)
        new_state: list[dict[str, torch.Tensor]] = []
        mi = 0  # index into fresh
        for (gi, name, _), st in zip(self.entries, state):
            h, fl = groups[gi], self.flags[gi]
            uses_fresh = self.kind == "sgd" and "momentum_buffer" in st
            g = grads.get(name)
            if g is None:
                new_state.append(dict(st))
                mi += uses_fresh
                continue
            p = params[name]
            if fl[1]:  # maximize
                g = -g
            if self.kind == "sgd":
                p2, s2 = _sgd(p, g, st, h, fl, fresh[mi] if uses_fresh and fresh is not None
                              else None)
            elif self.kind == "adam":
                p2, s2 = _adam(p, g, st, h, fl)
            else:
                p2, s2 = _rmsprop(p, g, st, h)
            mi += uses_fresh
            new_params[name] = p2
            new_state.append(s2)
        return new_params, new_state


def _sgd(p: torch.Tensor, g: torch.Tensor, st: dict[str, torch.Tensor],
         h: dict[str, torch.Tensor], fl: tuple[Any, ...], fresh: torch.Tensor | None
         ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    g = g + h["weight_decay"] * p
    out: dict[str, torch.Tensor] = {}
    if "momentum_buffer" in st:
        later = st["momentum_buffer"] * h["momentum"] + h["one_minus_dampening"] * g
        buf = torch.where(fresh > 0.5, g, later) if fresh is not None else later
        out["momentum_buffer"] = buf
        g = g + h["momentum"] * buf if fl[2] else buf
    return p - h["lr"] * g, out


def _adam(p: torch.Tensor, g: torch.Tensor, st: dict[str, torch.Tensor],
          h: dict[str, torch.Tensor], fl: tuple[Any, ...]
          ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    step = st["step"] + 1
    p = p * h["decay"]  # AdamW's decoupled decay (1.0 for Adam)
    g = g + h["weight_decay"] * p  # Adam's L2 term (0.0 for AdamW)
    m = torch.lerp(st["exp_avg"], g, h["one_minus_beta1"].to(g.dtype))
    v = st["exp_avg_sq"] * h["beta2"] + h["one_minus_beta2"] * (g * g)
    out = {"step": step, "exp_avg": m, "exp_avg_sq": v}
    # 1 - beta**step as -expm1(step * log(beta)): exact in float32 where
    # 1 - beta**step would cancel.
    bc1 = -torch.expm1(step * h["log_beta1"])
    bc2 = -torch.expm1(step * h["log_beta2"])
    step_size = h["lr"] / bc1
    vv = v
    if fl[3]:  # amsgrad
        vv = torch.maximum(st["max_exp_avg_sq"], v)
        out["max_exp_avg_sq"] = vv
    denom = torch.sqrt(vv) / torch.sqrt(bc2) + h["eps"]
    return p - step_size * (m / denom), out


def _rmsprop(p: torch.Tensor, g: torch.Tensor, st: dict[str, torch.Tensor],
             h: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    step = st["step"] + 1
    g = g + h["weight_decay"] * p
    sq = st["square_avg"] * h["alpha"] + h["one_minus_alpha"] * (g * g)
    out = {"step": step, "square_avg": sq}
    if "grad_avg" in st:
        ga = torch.lerp(st["grad_avg"], g, h["one_minus_alpha"].to(g.dtype))
        out["grad_avg"] = ga
        avg = torch.sqrt(sq - ga * ga)
    else:
        avg = torch.sqrt(sq)
    avg = avg + h["eps"]
    if "momentum_buffer" in st:
        buf = st["momentum_buffer"] * h["momentum"] + g / avg
        out["momentum_buffer"] = buf
        return p - h["lr"] * buf, out
    return p - h["lr"] * (g / avg), out
