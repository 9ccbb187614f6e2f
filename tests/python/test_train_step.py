"""Whole-step capture (:func:`hlobridge.compile_train_step`): forward,
backward and the optimizer update of a torch model, JAX calls included, as
ONE stitched program, checked step by step against eager torch and its
``torch.optim`` optimizers.

Inputs and initial weights are fresh random each run (the seed is printed in
failure messages; set HLOBRIDGE_TEST_SEED to replay). Tolerances (float32,
XLA vs torch kernels, three steps): losses rtol=1e-4/atol=1e-5, parameters,
buffers and optimizer state rtol=1e-3/atol=1e-4 (the gradient sums are
ordered differently; Adam divides by small second moments, which is why
its check uses atol=2e-4).

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_train_step.py -q
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import torch
import torch.nn.functional as F

import hlobridge as hb
from hlobridge import optim

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
LOSS_TOL = dict(rtol=1e-4, atol=1e-5)
PARAM_TOL = dict(rtol=1e-3, atol=1e-4)


@pytest.fixture(autouse=True)
def seeded() -> None:
    torch.manual_seed(SEED)


def close(a: torch.Tensor, b: torch.Tensor, tol: dict[str, float], what: str = "") -> None:
    torch.testing.assert_close(a, b, **tol, msg=lambda m: f"seed={SEED} {what}: {m}")


def jax_gelu_gate(h: jax.Array) -> jax.Array:
    return 0.5 * h * (1 + jnp.tanh(0.79788456 * (h + 0.044715 * h**3))) * jnp.cos(0.1 * h)


class JaxMLP(torch.nn.Module):
    """torch Linear → JAX activation → torch Linear."""

    def __init__(self, d_in: int = 16, d_hidden: int = 32, d_out: int = 8) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(d_in, d_hidden)
        self.fc2 = torch.nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(hb.call_jax(jax_gelu_gate, torch.tanh(self.fc1(x))))


def mse(model: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(model(x), y)


def run_both(model: torch.nn.Module, opt_hb: Any, make_torch_opt: Callable[..., Any],
             batches: list[tuple[torch.Tensor, ...]],
             loss_fn: Callable[..., torch.Tensor] = mse,
             tol: dict[str, float] = PARAM_TOL) -> hb.TrainStep:
    """Run the compiled step and eager torch side by side on ``batches``,
    comparing the loss and every parameter and buffer after each step."""
    ref = copy.deepcopy(model)
    ref_opt = make_torch_opt(ref.parameters())
    step = hb.compile_train_step(model, loss_fn, opt_hb)
    for i, batch in enumerate(batches):
        loss = step(*batch)
        ref_opt.zero_grad()
        ref_loss = loss_fn(ref, *batch)
        ref_loss.backward()
        ref_opt.step()
        close(loss, ref_loss.detach(), LOSS_TOL, f"loss at step {i}")
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            close(p.detach(), q.detach(), tol, f"{name} after step {i}")
        for (name, b), c in zip(model.named_buffers(), ref.buffers()):
            close(b, c, tol, f"buffer {name} after step {i}")
    return step


def batches_for(n: int, shape_x: tuple[int, ...], shape_y: tuple[int, ...]
                ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.randn(*shape_x), torch.randn(*shape_y)) for _ in range(n)]


def test_sgd_momentum_matches_torch() -> None:
    run_both(JaxMLP(), optim.SGD(lr=0.05, momentum=0.9, weight_decay=1e-3),
             lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3),
             batches_for(3, (12, 16), (12, 8)))


def test_sgd_nesterov_matches_torch() -> None:
    run_both(JaxMLP(), optim.SGD(lr=0.02, momentum=0.8, nesterov=True),
             lambda ps: torch.optim.SGD(ps, lr=0.02, momentum=0.8, nesterov=True),
             batches_for(3, (12, 16), (12, 8)))


def test_adam_matches_torch() -> None:
    step = run_both(JaxMLP(), optim.Adam(lr=1e-2, weight_decay=1e-4),
                    lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=1e-4),
                    batches_for(3, (12, 16), (12, 8)),
                    tol=dict(rtol=1e-3, atol=2e-4))
    assert float(step.state["step"]) == 3.0


def jax_momentum_init(params: dict[str, jax.Array]) -> dict[str, jax.Array]:
    return {k: jnp.zeros_like(v) for k, v in params.items()}


def jax_momentum_update(params: dict[str, jax.Array], grads: dict[str, jax.Array],
                        state: dict[str, jax.Array]
                        ) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
    """Momentum SGD (torch semantics) written in JAX, Optax-style."""
    new_state = jax.tree_util.tree_map(lambda m, g: 0.9 * m + g, state, grads)
    new_params = jax.tree_util.tree_map(lambda p, m: p - 0.05 * m, params, new_state)
    return new_params, new_state


def test_jax_optimizer_update_is_a_segment_of_the_one_program() -> None:
    """A torch model with a JAX activation and a JAX optimizer update: the
    whole step is ONE executable with torch and JAX segments, it matches
    eager torch + torch.optim.SGD, and later steps compile nothing."""
    step = run_both(JaxMLP(), optim.JaxOptimizer(jax_momentum_init, jax_momentum_update),
                    lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
                    batches_for(3, (10, 16), (10, 8)))
    assert len(step.graphs) == 1
    graph = step.graphs[0]
    (program,) = graph.programs.values()
    producers = [s.producer for s in program.segments]
    assert producers.count("jax") >= 3, producers  # activation, its VJP, the update
    assert "torch" in producers
    names = " ".join(s.name for s in program.segments)
    assert "jax_momentum_update" in names and "jax_gelu_gate" in names, names
    # The stitched text is one module with one entry function.
    assert program.text.count("func.func public @main") == 1
    before = hb.stats()["compiles"]
    x, y = torch.randn(10, 16), torch.randn(10, 8)
    step(x, y)
    receipt = hb.last_receipt()
    assert receipt is not None
    assert receipt.cache == "hit" and receipt.compiles == before
    assert {s.producer for s in receipt.segments} >= {"torch", "jax"}


def test_parameters_are_updated_in_place_zero_copy() -> None:
    """The nn.Parameter objects stay the same and their data aliases the
    program's output buffers (no copy back)."""
    model = JaxMLP()
    params_before = list(model.parameters())
    step = hb.compile_train_step(model, mse, optim.SGD(lr=0.1))
    step(torch.randn(4, 16), torch.randn(4, 8))
    step(torch.randn(4, 16), torch.randn(4, 8))
    assert all(a is b for a, b in zip(params_before, model.parameters()))
    receipt = hb.last_receipt()
    assert receipt is not None
    out_ptrs = set(receipt.output_pointers)
    for name, p in model.named_parameters():
        assert p.data_ptr() in out_ptrs, name


class ConvBN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(6)
        self.head = torch.nn.Linear(6 * 8 * 8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.conv(x)))
        return self.head(h.flatten(1))


def ce(model: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


def test_batchnorm_running_stats_are_written_back() -> None:
    model = ConvBN()
    batches = [(torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))) for _ in range(3)]
    run_both(model, optim.SGD(lr=0.1, momentum=0.5),
             lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.5), batches, loss_fn=ce)
    assert int(model.bn.num_batches_tracked) == 3


def test_new_batch_shape_traces_again() -> None:
    model = JaxMLP()
    step = run_both(model, optim.SGD(lr=0.05), lambda ps: torch.optim.SGD(ps, lr=0.05),
                    [*batches_for(2, (6, 16), (6, 8)), *batches_for(2, (9, 16), (9, 8))])
    assert len(step.graphs) == 2


def test_transformer_layer_step_matches_torch() -> None:
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32,
                                             dropout=0.0, batch_first=True)
    batches = [(torch.randn(2, 5, 16), torch.randn(2, 5, 16)) for _ in range(2)]
    # SGD, not Adam: the key projection's bias has a zero true gradient
    # (softmax ignores a constant shift), so its gradient is rounding noise
    # that Adam would scale up to the learning rate.
    run_both(layer, optim.SGD(lr=0.05, momentum=0.9),
             lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9), batches)


def test_loss_must_be_a_scalar() -> None:
    step = hb.compile_train_step(JaxMLP(), lambda m, x: m(x), optim.SGD(lr=0.1))
    with pytest.raises(hb.ArgumentError, match="scalar"):
        step(torch.randn(3, 16))


def test_model_without_trainable_parameters_is_refused() -> None:
    frozen = torch.nn.Linear(3, 3).requires_grad_(False)
    with pytest.raises(hb.ArgumentError, match="no parameters"):
        hb.compile_train_step(frozen, mse, optim.SGD(lr=0.1))


def test_dropout_masks_come_from_torch_generator() -> None:
    """Dropout inside the captured step: the mask is drawn by torch's
    generator each step (a program input), so under the same seed the step
    matches eager torch exactly, and steps get fresh masks."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                torch.nn.Linear(16, 4))
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    step = hb.compile_train_step(model, mse, optim.SGD(lr=0.1))
    for i in range(3):
        x, y = torch.randn(5, 8), torch.randn(5, 4)
        torch.manual_seed(SEED + i)
        loss = step(x, y)
        torch.manual_seed(SEED + i)
        ref_opt.zero_grad()
        ref_loss = mse(ref, x, y)
        ref_loss.backward()
        ref_opt.step()
        close(loss, ref_loss.detach(), LOSS_TOL, f"loss at step {i}")
        for p, q in zip(model.parameters(), ref.parameters()):
            close(p.detach(), q.detach(), PARAM_TOL, f"after step {i}")
    (graph,) = step.graphs
    assert len(graph.random_inputs) == 1
    x, y = torch.randn(5, 8), torch.randn(5, 4)
    losses = {float(step(x, y)) for _ in range(4)}
    assert len(losses) > 1, "every step used the same dropout mask"


def test_value_dependent_random_ops_are_refused_by_name() -> None:
    def loss_fn(m: Callable[..., torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        h = m(x)
        return (torch.poisson(torch.exp(h)) * h).sum()

    step = hb.compile_train_step(torch.nn.Linear(4, 4), loss_fn, optim.SGD(lr=0.1))
    with pytest.raises(hb.BridgeError, match="random op.*poisson"):
        step(torch.randn(2, 4))


def test_optimizer_changing_state_structure_is_refused() -> None:
    class Bad:
        def init(self, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {}

        def update(self, params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor],
                   state: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], Any]:
            return {k: p - g for k, (p, g) in zip(params, zip(params.values(),
                                                                 grads.values()))}, \
                {"extra": next(iter(grads.values()))}

    step = hb.compile_train_step(JaxMLP(), mse, Bad())
    with pytest.raises(hb.ArgumentError, match="structure"):
        step(torch.randn(2, 16), torch.randn(2, 8))


def test_frozen_parameters_are_inputs_and_stay_fixed() -> None:
    """Fine-tuning: a frozen layer is a program input, not a baked constant,
    and is left alone; the trainable layers match eager torch."""
    model = JaxMLP()
    model.fc1.requires_grad_(False)
    frozen = model.fc1.weight.detach().clone()
    run_both(model, optim.SGD(lr=0.05, momentum=0.9),
             lambda ps: torch.optim.SGD([p for p in ps if p.requires_grad], lr=0.05,
                                        momentum=0.9),
             batches_for(3, (8, 16), (8, 8)))
    assert torch.equal(model.fc1.weight, frozen)


def test_aux_outputs_and_gradient_clipping() -> None:
    """``has_aux``: logits come back from the same program; ``ClipGradNorm``
    matches ``torch.nn.utils.clip_grad_norm_`` + SGD (a small max_norm, so
    the clipping is active every step)."""
    model = JaxMLP()
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.5)

    def loss_aux(m: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor
                 ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        out = m(x)
        return F.mse_loss(out, y), {"out": out, "max": out.max()}

    step = hb.compile_train_step(model, loss_aux,
                                 optim.ClipGradNorm(0.05, optim.SGD(lr=0.1, momentum=0.5)),
                                 has_aux=True)
    for i in range(3):
        x, y = torch.randn(6, 16), torch.randn(6, 8)
        loss, aux = step(x, y)
        ref_opt.zero_grad()
        ref_loss, ref_aux = loss_aux(ref, x, y)
        ref_loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.05)
        assert float(norm) > 0.05, "the test needs active clipping"
        ref_opt.step()
        close(loss, ref_loss.detach(), LOSS_TOL, f"loss at step {i}")
        close(aux["out"], ref_aux["out"].detach(), LOSS_TOL, f"aux at step {i}")
        close(aux["max"], ref_aux["max"].detach(), LOSS_TOL, f"aux max at step {i}")
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            close(p.detach(), q.detach(), PARAM_TOL, f"{name} after step {i}")


@pytest.mark.parametrize("optimizer", ["torch", "hlobridge"])
def test_parameters_buffers_and_state_change_in_place_as_torch_optim_does(optimizer) -> None:
    """Parameters and buffers are updated in the tensors' own memory on
    every step, the first included, as ``torch.optim`` and BatchNorm update
    them: a view taken before the first step sees each step's values (the
    program writes into donated inputs; XLA honours the aliases). A torch
    optimizer's ``optimizer.state`` is updated in place too; ``step.state``
    of an hlobridge optimizer is a snapshot that later steps leave alone."""
    model = ConvBN()
    tensors = dict([*model.named_parameters(), *model.named_buffers()])
    views = {n: t.detach() for n, t in tensors.items()}
    ptrs = {n: t.data_ptr() for n, t in tensors.items()}
    batches = [(torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))) for _ in range(3)]
    if optimizer == "torch":
        opt: Any = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        step = run_both(model, opt, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
                        batches[:2], loss_fn=ce)
        held = {id(p): opt.state[p]["momentum_buffer"] for p in model.parameters()}
        step(*batches[2])
        assert all(opt.state[p]["momentum_buffer"] is held[id(p)] for p in model.parameters())
    else:
        # (SGD: Adam would move the conv bias, whose gradient before
        # BatchNorm is rounding noise, by ±lr in either direction.)
        step = run_both(model, optim.SGD(lr=0.1, momentum=0.9),
                        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
                        batches[:2], loss_fn=ce)
        snapshot = step.state
        kept = [t.clone() for t in jax.tree_util.tree_leaves(snapshot)]
        step(*batches[2])
        after = jax.tree_util.tree_leaves(step.state)
        assert all(torch.equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(snapshot), kept))
        assert not all(torch.equal(a, b) for a, b in zip(after, kept))
        step.state = snapshot  # a rollback restores exactly the snapshot
        assert all(torch.equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(step.state), kept))
    for n, t in dict([*model.named_parameters(), *model.named_buffers()]).items():
        assert t.data_ptr() == ptrs[n], f"{n} moved to new memory"
        assert torch.equal(views[n], t), n
    assert int(model.bn.num_batches_tracked) == 3
