"""Dynamic shapes (``docs/dynamic_shapes.md``): ``torch.compile(...,
backend="hlobridge", dynamic=True)`` captures ONCE (one Dynamo trace, one
shape-polymorphic lowering, torch and ``call_jax`` segments alike) and
serves every batch size and sequence length by refining that module per
shape and compiling it through the compile cache.

Counters prove "once": Dynamo's ``unique_graphs``, the dynamic package's
``lowerings`` / ``graphs`` / ``refinements``, and the runtime's ``compiles``.
Every shape gets fresh random inputs and is compared with eager torch
(float32; XLA vs torch kernels: rtol=1e-4, atol=1e-5).

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_dynamic_shapes.py -q
"""

from __future__ import annotations

import os
import random
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import torch

import hlobridge as hb
from hlobridge import _native
from hlobridge._src import dynamic
from hlobridge._src.dynamic.refine import refine, route

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Any:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(SEED)
    yield
    torch._dynamo.reset()


def close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(a, b, **TOL, msg=lambda m: f"seed={SEED} {what}: {m}")


def snapshot() -> dict[str, int]:
    return {"dynamo_graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"],
            "lowerings": dynamic.lower_counters["lowerings"],
            "graphs": dynamic.counters["graphs"],
            "refinements": dynamic.counters["refinements"],
            "xla_compiles": _native.stats()["compiles"]}


def delta(before: dict[str, int]) -> dict[str, int]:
    now = snapshot()
    return {k: now[k] - before[k] for k in now}


def _gelu_gate(h: jax.Array) -> jax.Array:
    """A JAX segment whose shapes depend on the input's (split, concat)."""
    a, b = jnp.split(h, 2, axis=-1)
    return jnp.concatenate([jax.nn.gelu(a) * b, jnp.tanh(a)], axis=-1)


class Mixer(torch.nn.Module):
    """torch -> call_jax -> torch over (batch, seq, features), with a
    sequence reduction (softmax over seq) so that both sizes matter."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(12, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.out = torch.nn.Linear(32, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.inp(x))
        h = hb.call_jax(_gelu_gate, h)
        w = torch.softmax(h.mean(-1), dim=-1).unsqueeze(-1)
        return self.out(h * w + h.cumsum(1) / x.shape[1])


def test_one_capture_serves_many_shapes_with_call_jax() -> None:
    """32 (batch, seq) shapes in random order, one Dynamo trace, one
    lowering, one refinement and at most one XLA compile per shape; every
    shape matches eager on fresh inputs; repeats compile nothing."""
    model = Mixer().eval()
    compiled = torch.compile(model, backend="hlobridge", dynamic=True)
    shapes = [(b, s) for b in (2, 3, 5, 8) for s in (4, 7, 9, 16, 21, 33, 40, 64)]
    random.Random(SEED).shuffle(shapes)
    before = snapshot()
    compiles = 0  # the runtime's, by the compiled model (eager call_jax compiles too)
    with torch.no_grad():
        for b, s in shapes + shapes[:4]:
            x = torch.randn(b, s, 12)
            c0 = _native.stats()["compiles"]
            out = compiled(x)
            compiles += _native.stats()["compiles"] - c0
            close(out, model(x), f"shape {(b, s)}")
    d = delta(before)
    assert d["dynamo_graphs"] == 1, d
    assert d["lowerings"] == 1 and d["graphs"] == 1, d
    assert d["refinements"] == len(shapes), d
    assert compiles <= len(shapes), (compiles, d)
    g = dynamic.dynamic_graphs()[-1]
    assert "?x?x12xf32" in g.text and "shape_assertion" in g.text
    assert len(g.programs) == len(shapes)


def test_dynamic_none_with_marked_dims() -> None:
    """Default ``dynamic=None`` with the batch and sequence dims marked
    dynamic (``torch._dynamo.mark_dynamic``; importing torch_xla turns
    Dynamo's automatic dynamic shapes off, see docs/dynamic_shapes.md): one
    trace, one lowering, one refinement per shape."""
    model = Mixer().eval()
    compiled = torch.compile(model, backend="hlobridge")
    before = snapshot()
    with torch.no_grad():
        for b, s in [(2, 5), (3, 6), (4, 9), (6, 3), (3, 6)]:
            x = torch.randn(b, s, 12)
            torch._dynamo.mark_dynamic(x, 0)
            torch._dynamo.mark_dynamic(x, 1)
            close(compiled(x), model(x), f"shape {(b, s)}")
    d = delta(before)
    assert d["dynamo_graphs"] == 1, d
    assert d["lowerings"] == 1 and d["refinements"] == 4, d


def test_shape_assertion_violation_names_the_dimension() -> None:
    """Inputs whose sizes Dynamo proved equal share one symbol; calling the
    dynamic program with them unequal violates the shape assertion and
    raises ShapeAssertionError naming the dimension (the process goes on)."""
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * hb.call_jax(jnp.sin, y) + 1.0

    compiled = torch.compile(f, backend="hlobridge", dynamic=True)
    x, y = torch.randn(3, 5), torch.randn(3, 5)
    close(compiled(x, y), f(x, y), "(3, 5)")
    g = dynamic.dynamic_graphs()[-1]
    phs = [n for n in g.gm.graph.nodes if n.op == "placeholder"]
    tensors = iter([torch.randn(3, 5), torch.randn(3, 6)])
    args = [next(tensors) if isinstance(n.meta.get("val"), torch.Tensor) else 5 for n in phs]
    with pytest.raises(hb.errors.ShapeAssertionError) as info:
        g(args)
    assert info.value.dim in ("x.shape[1]", "y.shape[1]"), info.value
    assert "shape" in str(info.value)
    close(compiled(x, y), f(x, y), "after the error")


def test_symbolic_int_without_a_tensor_dimension_is_named() -> None:
    """A dynamic Python int that no input tensor carries as a size cannot be
    a dimension variable: DynamicShapeError, not a raw TorchRuntimeError."""
    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return hb.call_jax(jnp.cos, x).reshape(n, -1) * 2

    compiled = torch.compile(f, backend="hlobridge", dynamic=True)
    with pytest.raises((hb.errors.DynamicShapeError, hb.errors.CompileBackendError),
                       match="dynamic=False"):
        compiled(torch.randn(4, 6), 3)


def test_dynamic_false_is_unchanged() -> None:
    """``dynamic=False``: one static graph per shape, no dynamic capture."""
    model = Mixer().eval()
    compiled = torch.compile(model, backend="hlobridge", dynamic=False)
    before = snapshot()
    with torch.no_grad():
        for b, s in [(2, 5), (3, 6)]:
            x = torch.randn(b, s, 12)
            close(compiled(x), model(x), f"shape {(b, s)}")
    d = delta(before)
    assert d["dynamo_graphs"] == 2 and d["lowerings"] == 0 and d["graphs"] == 0, d


def test_refine_specialises_and_checks_assertions() -> None:
    """The one refinement entry point: a jax.export module with symbolic
    dims becomes static; a violated constraint is ShapeAssertionError."""
    b, s = jax.export.symbolic_shape("b, s", constraints=["s >= 2"])
    exp = jax.export.export(jax.jit(lambda x, w: jnp.tanh(x @ w)))(
        jax.ShapeDtypeStruct((b, s, 8), jnp.float32), jax.ShapeDtypeStruct((8, 4), jnp.float32))
    text = exp.mlir_module()
    out = refine(text, [[3, 5, 8], [8, 4]])
    assert "?" not in out.split("func.func public @main", 1)[1].split("{", 1)[0]
    assert "tensor<3x5x4xf32>" in out
    with pytest.raises(hb.errors.ShapeAssertionError):
        refine(text, [[3, 1, 8], [8, 4]])
    with pytest.raises((hb.errors.ShapeAssertionError, hb.errors.ShapeRefinementError)):
        refine(text, [[3, 5, 9], [8, 4]])  # a static size that differs
    assert route() == ("native" if hasattr(_native, "refine_shapes") else "jaxlib")


def test_decoder_lm_variable_batch_and_seq() -> None:
    """A zoo decoder LM (Hugging Face Llama, tiny random config) over batch
    and sequence lengths: one trace, one lowering, eager logits each time."""
    pytest.importorskip("transformers")
    from model_zoo.hf import MODELS

    zoo = next(m for m in MODELS if m.name == "hf-llama")
    model = zoo.build().eval()
    compiled = torch.compile(model, backend="hlobridge", dynamic=True)
    before = snapshot()
    with torch.no_grad():
        for b, s in [(2, 8), (3, 13), (4, 5)]:
            x = torch.randint(3, 128, (b, s))
            close(zoo.logits(compiled, x), zoo.logits(model, x), f"shape {(b, s)}")
    d = delta(before)
    assert d["dynamo_graphs"] == 1 and d["lowerings"] == 1 and d["refinements"] == 3, d


def test_training_with_call_jax_one_forward_and_one_backward_lowering() -> None:
    """Forward and backward (the call_jax VJP included) under dynamic=True:
    two dynamic graphs, lowered once each, gradients match eager per shape."""
    model = Mixer()
    ref = Mixer()
    ref.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="hlobridge", dynamic=True)
    before = snapshot()
    for b, s in [(2, 5), (4, 9), (3, 6)]:
        x = torch.randn(b, s, 12)
        compiled(x).square().sum().backward()
        ref(x).square().sum().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-4,
                                       msg=lambda m: f"seed={SEED} {name} {(b, s)}: {m}")
        model.zero_grad()
        ref.zero_grad()
    d = delta(before)
    assert d["dynamo_graphs"] == 1 and d["lowerings"] == 2 and d["graphs"] == 2, d
