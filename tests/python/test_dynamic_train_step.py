"""``hb.compile_train_step(..., dynamic=True)`` (``docs/dynamic_shapes.md``):
ONE symbolic trace and ONE shape-polymorphic lowering of the whole training
step (forward, backward, optimizer) serve every batch size and sequence
length; each new shape costs one refinement and at most one XLA compile.

Counters prove "once": the dynamic step's ``traces``, the dynamic package's
``lowerings`` and ``refinements``, the runtime's ``compiles``. Numerics: the
project's method for multi-step training (``model_zoo.accuracy``): after
several steps on fresh random batches of varying shapes, every parameter is
judged against the same steps in eager float64, within a multiple of eager
float32's own RMS error (``check_statistical``); each step's loss likewise.

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_dynamic_train_step.py -q
"""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import torch
import torch.nn.functional as F

import hlobridge as hb
from hlobridge import _native, optim
from hlobridge._src import dynamic
from hlobridge._src.dynamic import step as dynamic_step
from model_zoo.accuracy import check_statistical
from test_train_step import ConvBN, ce

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
TOL = dict(rtol=1e-3, atol=1e-4)


@pytest.fixture(autouse=True)
def seeded() -> None:
    torch.manual_seed(SEED)


def snapshot() -> dict[str, int]:
    return {"traces": dynamic_step.counters["traces"],
            "lowerings": dynamic.lower_counters["lowerings"],
            "refinements": dynamic.counters["refinements"]}


def delta(before: dict[str, int]) -> dict[str, int]:
    now = snapshot()
    return {k: now[k] - before[k] for k in now}


def jax_gate(h: jax.Array) -> jax.Array:
    return jnp.tanh(h) * jax.nn.sigmoid(1.5 * h)


class JaxMLP(torch.nn.Module):
    """torch Linear -> JAX activation -> torch Linear, over any leading dims."""

    def __init__(self, d_in: int = 16, d_hidden: int = 32, d_out: int = 8) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(d_in, d_hidden)
        self.fc2 = torch.nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(hb.call_jax(jax_gate, self.fc1(x)))


def mse(model: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(model(x), y)


class Block(torch.nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyLM(torch.nn.Module):
    """A decoder LM: token and learned position embeddings (at most
    ``max_len`` positions), causal attention blocks, a vocabulary head."""

    def __init__(self, vocab: int = 64, d: int = 32, heads: int = 4, layers: int = 2,
                 max_len: int = 32) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(1, max_len, d) * 0.1)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids) + self.pos[:, :ids.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def lm_loss(model: Callable[..., torch.Tensor], ids: torch.Tensor, targets: torch.Tensor
            ) -> torch.Tensor:
    logits = model(ids)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def lm_batch(b: int, s: int, vocab: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, vocab, (b, s)), torch.randint(0, vocab, (b, s))


def train_against_eager(model: torch.nn.Module, hb_opt: Any,
                        make_torch_opt: Callable[..., torch.optim.Optimizer],
                        loss_fn: Callable[..., torch.Tensor],
                        batches: list[tuple[torch.Tensor, ...]],
                        **step_kwargs: Any) -> tuple[hb.TrainStep, int]:
    """Train ``model`` with ``compile_train_step(..., dynamic=True)`` on
    ``batches`` (an optimizer, or ``None`` for ``make_torch_opt``'s on the
    model), and copies in eager float32 and float64 with
    ``make_torch_opt``; judge every loss and the final parameters with
    :func:`check_statistical`. Returns the step and the XLA compiles its
    calls made (eager ``call_jax`` in the references compiles too)."""
    m32, m64 = copy.deepcopy(model), copy.deepcopy(model).double()
    start = {k: p.detach().clone() for k, p in model.named_parameters()}
    o32, o64 = make_torch_opt(m32.parameters()), make_torch_opt(m64.parameters())
    opt = hb_opt if hb_opt is not None else make_torch_opt(model.parameters())
    step = hb.compile_train_step(model, loss_fn, opt, dynamic=True, **step_kwargs)
    compiles = 0
    for i, batch in enumerate(batches):
        c0 = _native.stats()["compiles"]
        loss = step(*batch)
        compiles += _native.stats()["compiles"] - c0
        losses = []
        for m, o, dt in ((m32, o32, torch.float32), (m64, o64, torch.float64)):
            o.zero_grad()
            ref = loss_fn(m, *(t.to(dt) if t.is_floating_point() else t for t in batch))
            ref.backward()
            o.step()
            losses.append(ref.detach())
        shape = [tuple(t.shape) for t in batch]
        check_statistical(loss, losses[0], losses[1], TOL, f"seed={SEED} loss at step {i} {shape}")
    for (name, p), q32, q64 in zip(model.named_parameters(), m32.parameters(), m64.parameters()):
        check_statistical(p, q32, q64, TOL, f"seed={SEED} {name} after {len(batches)} steps",
                          start=start[name])
    for (name, b), c32, c64 in zip(model.named_buffers(), m32.buffers(), m64.buffers()):
        check_statistical(b, c32, c64, TOL, f"seed={SEED} buffer {name}")
    return step, compiles


def test_mlp_variable_batch_one_trace_one_lowering() -> None:
    """An MLP with a JAX activation, torch SGD with momentum, 8 batch sizes
    in random order (and repeats): one trace, one lowering, one refinement
    per size, and the training matches eager."""
    sizes = [2, 3, 5, 8, 13, 16, 31, 64]
    random.Random(SEED).shuffle(sizes)
    before = snapshot()
    step, compiles = train_against_eager(
        JaxMLP(), None, lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9), mse,
        [(torch.randn(b, 16), torch.randn(b, 8)) for b in sizes + sizes[:3]])
    d = delta(before)
    assert d["traces"] == 1 and d["lowerings"] == 1, d
    assert d["refinements"] == len(sizes), d
    assert compiles <= len(sizes), (compiles, d)
    (graph,) = step.graphs
    assert "tensor<?x16xf32>" in graph.text and "shape_assertion" in graph.text
    assert len(graph.programs) == len(sizes)


def test_conv_batchnorm_variable_batch() -> None:
    """Convolutions and BatchNorm (running statistics written back) with
    a varying batch: one trace; parameters and buffers match eager."""
    before = snapshot()
    step, _ = train_against_eager(
        ConvBN(), None, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.5), ce,
        [(torch.randn(b, 3, 8, 8), torch.randint(0, 5, (b,))) for b in (4, 6, 3, 9)],
    )
    d = delta(before)
    assert d["traces"] == 1 and d["lowerings"] == 1 and d["refinements"] == 4, d
    assert len(step.graphs) == 1


def test_transformer_lm_variable_batch_and_sequence_with_adamw() -> None:
    """A decoder LM, torch AdamW with a learning-rate schedule, batch and
    sequence length both varying: one trace and one lowering for all
    shapes."""
    shapes = [(2, 8), (3, 5), (4, 16), (2, 31), (5, 12), (3, 24)]
    random.Random(SEED).shuffle(shapes)
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

    before = snapshot()
    m32, m64 = copy.deepcopy(model), copy.deepcopy(model).double()
    start = {k: p.detach().clone() for k, p in model.named_parameters()}
    refs = []
    for m in (m32, m64):
        o = torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.01)
        refs.append((m, o, torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)))
    step = hb.compile_train_step(model, lm_loss, opt, dynamic=(0, 1))
    for i, (b, s) in enumerate(shapes + shapes[:2]):
        ids, tg = lm_batch(b, s)
        loss = step(ids, tg)
        sched.step()
        losses = []
        for m, o, sc in refs:
            o.zero_grad()
            ref = lm_loss(m, ids, tg)
            ref.backward()
            o.step()
            sc.step()
            losses.append(ref.detach())
        check_statistical(loss, losses[0], losses[1], TOL, f"seed={SEED} loss at step {i}")
    for (name, p), q32, q64 in zip(model.named_parameters(), m32.parameters(), m64.parameters()):
        check_statistical(p, q32, q64, TOL, f"seed={SEED} {name}", start=start[name])
    d = delta(before)
    assert d["traces"] == 1 and d["lowerings"] == 1, d
    assert d["refinements"] == len(shapes), d
    (graph,) = step.graphs
    assert "tensor<?x?xi64>" in graph.text


def test_call_jax_and_optax_in_the_step() -> None:
    """A JAX activation in the model and an Optax AdamW as the optimizer
    (``optim.JaxOptimizer``), batch and sequence varying: one trace, one
    lowering; matches eager torch AdamW with the same hyperparameters."""
    optax = pytest.importorskip("optax")
    shapes = [(2, 3), (4, 7), (3, 12), (6, 5), (2, 9)]
    before = snapshot()
    train_against_eager(
        JaxMLP(), optim.JaxOptimizer(optax.adamw(1e-2, b1=0.9, b2=0.99, eps=1e-8,
                                                 weight_decay=1e-2)),
        lambda ps: torch.optim.AdamW(ps, lr=1e-2, betas=(0.9, 0.99), eps=1e-8,
                                     weight_decay=1e-2),
        mse, [(torch.randn(b, s, 16), torch.randn(b, s, 8)) for b, s in shapes])
    d = delta(before)
    assert d["traces"] == 1 and d["lowerings"] == 1, d
    assert d["refinements"] == len(shapes), d


def two_batches(model: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                w: torch.Tensor) -> torch.Tensor:
    return mse(model, x, y) + model(w).square().mean()


def test_size_one_and_first_call_coincidences_trace_apart() -> None:
    """Sizes equal at the first call on the same axis share a symbol (as
    Dynamo's duck shaping), and sizes 1 are specialised: a call that breaks
    either gets a new symbolic trace, never a program traced for other
    sizes; every step matches eager."""
    before = snapshot()
    train_against_eager(
        JaxMLP(), None, lambda ps: torch.optim.SGD(ps, lr=0.05), two_batches,
        [(torch.randn(b, 16), torch.randn(b, 8), torch.randn(bw, 16))
         for b, bw in [(4, 4), (5, 5), (2, 7), (3, 6), (1, 5), (6, 6)]])
    d = delta(before)
    # (4, 4), (5, 5) and later (6, 6): one trace (the two batches of one
    # size); (2, 7) and (3, 6): a second; (1, 5): a third.
    assert d["traces"] == 3 and d["lowerings"] == 3, d


def test_shape_assertion_names_the_dimension() -> None:
    """A sequence longer than the model's position table (32) violates the
    trace's range for that size: ShapeAssertionError naming
    ``batch.0.shape[1]``; the step keeps working afterwards."""
    model = TinyLM(layers=1)
    step = hb.compile_train_step(model, lm_loss, torch.optim.SGD(model.parameters(), lr=0.1),
                                 dynamic=True)
    step(*lm_batch(2, 8))
    with pytest.raises(hb.errors.ShapeAssertionError, match="<= 32") as info:
        step(*lm_batch(2, 40))
    assert info.value.dim == "batch.0.shape[1]"
    before = snapshot()
    loss = step(*lm_batch(3, 32))
    assert torch.isfinite(loss)
    assert delta(before)["traces"] == 0


def test_dropout_masks_are_drawn_per_call_at_the_call_shape() -> None:
    """Dropout in a dynamic step: the mask is drawn by torch's generator at
    each call's shape (a program input), so under the same seed the step
    matches eager, for every batch size, from one trace."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                torch.nn.Linear(16, 4))
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    step = hb.compile_train_step(model, mse, torch.optim.SGD(model.parameters(), lr=0.1),
                                 dynamic=True)
    before = snapshot()
    for i, b in enumerate([5, 9, 3, 12]):
        x, y = torch.randn(b, 8), torch.randn(b, 4)
        torch.manual_seed(SEED + i)
        loss = step(x, y)
        torch.manual_seed(SEED + i)
        ref_opt.zero_grad()
        ref_loss = mse(ref, x, y)
        ref_loss.backward()
        ref_opt.step()
        torch.testing.assert_close(loss, ref_loss.detach(), rtol=1e-4, atol=1e-5)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.detach(), q.detach(), **TOL)
    assert delta(before)["traces"] == 1


def test_aux_clipping_and_accumulation() -> None:
    """``has_aux`` (outputs of symbolic shape), ``max_grad_norm`` and
    ``accumulate=2`` (micro-batches of half the symbolic batch, through a
    JAX activation) in a dynamic step match eager; a batch that does not
    split raises the static path's ArgumentError."""
    def loss_aux(m: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor
                 ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        out = m(x)
        return F.mse_loss(out, y), {"out": out}

    model = JaxMLP()
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.5)
    step = hb.compile_train_step(model, loss_aux,
                                 torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5),
                                 has_aux=True, max_grad_norm=0.05, dynamic=True)
    for b, s in [(2, 3), (4, 5), (3, 7)]:
        x, y = torch.randn(b, s, 16), torch.randn(b, s, 8)
        loss, aux = step(x, y)
        ref_opt.zero_grad()
        ref_loss, ref_aux = loss_aux(ref, x, y)
        ref_loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.05)
        ref_opt.step()
        torch.testing.assert_close(loss, ref_loss.detach(), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(aux["out"], ref_aux["out"].detach(), rtol=1e-4, atol=1e-5)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.detach(), q.detach(), **TOL)
    assert len(step.graphs) == 1

    model = JaxMLP()
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    step = hb.compile_train_step(model, mse, torch.optim.SGD(model.parameters(), lr=0.1),
                                 accumulate=2, dynamic=True)
    for b in [4, 6, 10]:
        x, y = torch.randn(b, 16), torch.randn(b, 8)
        loss = step(x, y)
        ref_opt.zero_grad()
        for half in (slice(0, b // 2), slice(b // 2, b)):
            (mse(ref, x[half], y[half]) / 2).backward()
        ref_opt.step()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.detach(), q.detach(), **TOL)
    assert len(step.graphs) == 1
    with pytest.raises(hb.ArgumentError, match=r"multiple of 2; got shape \(5, 16\)"):
        step(torch.randn(5, 16), torch.randn(5, 8))


def test_bad_dynamic_arguments_are_refused_by_name() -> None:
    with pytest.raises(hb.ArgumentError, match="dynamic"):
        hb.compile_train_step(JaxMLP(), mse, optim.SGD(lr=0.1), dynamic="batch")
    step = hb.compile_train_step(JaxMLP(), lambda m, x, w: w * m(x).sum(), optim.SGD(lr=0.1),
                                 dynamic=True)
    with pytest.raises(hb.ArgumentError, match="must be a tensor"):
        step(torch.randn(3, 16), 0.5)
