"""Shared pieces of the hybrid torch + JAX training step.

Used by ``examples/hybrid_train_step.py`` (the demo) and by the end-to-end
benchmark ``benches/e2e/``: the JAX math (activation + loss gradient, momentum
SGD), the torch modules, the per-segment StableHLO export, the step inputs,
and the stitch of the four segments into ONE program.

The module imports only jax and torch at the top, so that torch_xla's worker
(running under a different jax) can import the math from it as well.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import torch

LR, BETA = 0.05, 0.9
INPUT_NAMES = ("x", "y", "w", "b", "mw", "mb", "ones")
OUTPUT_NAMES = ("loss", "w2", "b2", "mw2", "mb2")


def act(h: Any) -> Any:
    return jnp.sin(h) * jnp.exp(-0.1 * h * h)


def act_loss(h: Any, y: Any) -> tuple[Any, Any]:
    """Loss ``mean((act(h) - y)^2)`` and its gradient with respect to ``h``."""

    def loss_of(h: Any) -> Any:
        return jnp.mean((act(h) - y) ** 2)

    loss, vjp = jax.vjp(loss_of, h)
    (dh,) = vjp(jnp.ones((), h.dtype))
    return loss, dh


def sgd(w: Any, b: Any, mw: Any, mb: Any, dw: Any, db: Any) -> tuple[Any, Any, Any, Any]:
    """Momentum SGD (torch.optim.SGD semantics, dampening 0)."""
    mw = BETA * mw + dw
    mb = BETA * mb + db
    return w - LR * mw, b - LR * mb, mw, mb


def pure_jax_step(x: Any, y: Any, w: Any, b: Any, mw: Any, mb: Any,
                  ones: Any) -> tuple[Any, ...]:
    """The whole step in JAX (the linear layer and its weight gradient too)."""
    h = x @ w.T + b
    loss, dh = act_loss(h, y)
    dw, db = dh.T @ x, dh.T @ ones
    return (loss, *sgd(w, b, mw, mb, dw, db))


class Linear(torch.nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return x @ w.T + b


class LinearGrad(torch.nn.Module):
    def forward(self, dh: torch.Tensor, x: torch.Tensor,
                ones: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return dh.T @ x, dh.T @ ones


def make_inputs(n: int, d_in: int, d_out: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """The step's inputs, keyed by ``INPUT_NAMES`` (contiguous float32)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d_in, generator=g)
    y = torch.randn(n, d_out, generator=g) * 0.5
    w = torch.randn(d_out, d_in, generator=g) / d_in**0.5
    mw = torch.randn(d_out, d_in, generator=g) * 0.01
    return {"x": x, "y": y, "w": w, "b": torch.zeros(d_out), "mw": mw,
            "mb": torch.zeros(d_out), "ones": torch.ones(n)}


def torch_segment(module: torch.nn.Module,
                  examples: tuple[torch.Tensor, ...]) -> tuple[str, list[int]]:
    """StableHLO of `module` via torch.export + torch_xla, and for each
    parameter of its @main the index of the user input it takes."""
    from torch_xla.stablehlo import exported_program_to_stablehlo

    shlo = exported_program_to_stablehlo(torch.export.export(module, examples))
    meta = shlo._bundle.stablehlo_funcs[0].meta
    order = []
    for loc in meta.input_locations:
        if loc.type_.value != "input_arg":
            raise SystemExit(f"unexpected torch_xla input kind {loc.type_}")
        order.append(loc.position)
    return shlo.get_stablehlo_text(), order


def jax_segment(fn: Callable[..., Any], *examples: torch.Tensor) -> str:
    sds = [jax.ShapeDtypeStruct(tuple(t.shape), jnp.float32) for t in examples]
    return jax.jit(fn).lower(*sds).as_text()


def ttype(t: torch.Tensor) -> str:
    return "tensor<" + "".join(f"{d}x" for d in t.shape) + "f32>"


@dataclass
class FusedStep:
    """The stitched program, compiled, with a zero-copy runner."""

    text: str
    report: dict[str, Any]
    exe: Any
    run: Callable[[], list[torch.Tensor]]
    plan: tuple[list[Any], list[Any], list[str]]
    """The ``_native.stitch`` arguments: inputs, segments, outputs."""


def write_plan(directory: str, plan: tuple[list[Any], list[Any], list[str]]) -> str:
    """Write ``plan`` (the ``_native.stitch`` arguments) as a stitch plan
    directory: ``plan.toml`` plus one ``.mlir`` per segment, for
    ``hlobridge stitch`` / ``hlobridge viz``. Returns the plan's path."""
    import os

    inputs, segments, outputs = plan
    os.makedirs(directory, exist_ok=True)
    lines: list[str] = []
    for name, ty, donate in inputs:
        lines += ["[[input]]", f'name = "{name}"', f'type = "{ty}"', f"donate = {str(donate).lower()}"]
    for name, producer, text, entry, ins, outs in segments:
        with open(os.path.join(directory, f"{name}.mlir"), "w") as f:
            f.write(text)
        lines += ["[[segment]]", f'name = "{name}"', f'module = "{name}.mlir"',
                  f'producer = "{producer}"', f'entry = "{entry}"', f"inputs = {json.dumps(ins)}",
                  f"outputs = {json.dumps(outs)}"]
    for handle in outputs:
        lines += ["[[output]]", f'handle = "{handle}"']
    path = os.path.join(directory, "plan.toml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def build_fused(inp: dict[str, torch.Tensor]) -> FusedStep:
    """Stitch linear [torch] -> act_loss [jax] -> linear_grad [torch] ->
    sgd [jax] into one module, compile it, and return a runner over `inp`."""
    from torch.utils.dlpack import from_dlpack

    from hlobridge import _native

    x, y, w, b, mw, mb, ones = (inp[k] for k in INPUT_NAMES)
    h = x @ w.T + b
    lin_text, lin_order = torch_segment(Linear(), (x, w, b))
    lg_text, lg_order = torch_segment(LinearGrad(), (h, x, ones))
    names_lin = ["x", "w", "b"]
    names_lg = ["dh", "x", "ones"]
    segments = [
        ("linear", "torch", lin_text, "main", [names_lin[i] for i in lin_order], ["h"]),
        ("act_loss", "jax", jax_segment(act_loss, h, y), "main", ["h", "y"], ["loss", "dh"]),
        ("linear_grad", "torch", lg_text, "main", [names_lg[i] for i in lg_order], ["dw", "db"]),
        ("sgd", "jax", jax_segment(sgd, w, b, mw, mb, w, b), "main",
         ["w", "b", "mw", "mb", "dw", "db"], ["w2", "b2", "mw2", "mb2"]),
    ]
    plan_inputs = [(n, ttype(inp[n]), False) for n in INPUT_NAMES]
    fused_text, report_json = _native.stitch(plan_inputs, segments, list(OUTPUT_NAMES))
    exe, _ = _native.compile(fused_text)
    tensors = [inp[n].contiguous() for n in INPUT_NAMES]
    ptrs = [t.data_ptr() for t in tensors]
    shapes = [tuple(t.shape) for t in tensors]
    codes = [_native.ELEMENT_TYPES["f32"]] * len(tensors)

    def run() -> list[torch.Tensor]:
        caps, *_ = _native.execute(exe, ptrs, shapes, codes, tensors)
        return [from_dlpack(c) for c in caps]

    return FusedStep(fused_text, json.loads(report_json), exe, run,
                     (plan_inputs, segments, list(OUTPUT_NAMES)))
