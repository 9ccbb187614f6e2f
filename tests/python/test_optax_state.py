"""Optax transformations through :class:`hlobridge.optim.JaxOptimizer` in a
whole-step capture (:func:`hlobridge.compile_train_step`): the optimizer
state keeps Optax's pytrees (``ScaleByAdamState`` and other named tuples,
``optax.chain``'s nested tuples, ``inject_hyperparams``' dict with a
schedule) through ``call_jax``, and three steps match a reference that takes
eager torch's gradients and applies the same transformation in pure JAX.

Inputs and initial weights are fresh random each run (the seed is printed in
failure messages; set HLOBRIDGE_TEST_SEED to replay). Tolerances (float32,
XLA vs torch kernels, gradient sums ordered differently, three steps):
losses rtol=1e-4/atol=1e-5; parameters and state rtol=1e-3/atol=2e-4 (Adam
and Lion divide by, or take the sign of, small moments).

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_optax_state.py -q
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import hlobridge as hb
from hlobridge import optim

optax = pytest.importorskip("optax")

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
LOSS_TOL = dict(rtol=1e-4, atol=1e-5)
TOL = dict(rtol=1e-3, atol=2e-4)


@pytest.fixture(autouse=True)
def seeded() -> None:
    torch.manual_seed(SEED)


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))


def mse(model: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(model(x), y)


def to_jax(tree: Any) -> Any:
    return jax.tree_util.tree_map(lambda t: jnp.asarray(t.detach().numpy()), tree)


def assert_tree_close(got: Any, want: Any, what: str) -> None:
    """Same pytree structure (named tuple types included), leaves close."""
    g_leaves, g_def = jax.tree_util.tree_flatten(got)
    w_leaves, w_def = jax.tree_util.tree_flatten(want)
    assert g_def == w_def, f"seed={SEED} {what}: structure {g_def} != {w_def}"
    for g, w in zip(g_leaves, w_leaves):
        assert isinstance(g, torch.Tensor), f"{what}: leaf {type(g)}"
        np.testing.assert_allclose(g.detach().numpy(), np.asarray(w), **TOL,
                                   err_msg=f"seed={SEED} {what}")


def run_against_jax(tx: Any, steps: int = 3) -> hb.TrainStep:
    """Compiled step with ``JaxOptimizer(tx)`` against eager torch grads +
    ``tx`` applied in pure JAX, ``steps`` steps; returns the train step."""
    model = mlp()
    ref = copy.deepcopy(model)
    ref_params = to_jax(dict(ref.named_parameters()))
    ref_state = tx.init(ref_params)
    step = hb.compile_train_step(model, mse, optim.JaxOptimizer(tx))
    assert_tree_close(step.state, ref_state, "initial state")
    for i in range(steps):
        x, y = torch.randn(12, 16), torch.randn(12, 8)
        loss = step(x, y)
        ref.zero_grad()
        ref_loss = mse(ref, x, y)
        ref_loss.backward()
        grads = to_jax({k: p.grad for k, p in ref.named_parameters()})
        updates, ref_state = tx.update(grads, ref_state, ref_params)
        ref_params = optax.apply_updates(ref_params, updates)
        with torch.no_grad():
            for k, p in ref.named_parameters():
                p.copy_(torch.from_numpy(np.array(ref_params[k])))
        torch.testing.assert_close(loss, ref_loss.detach(), **LOSS_TOL,
                                   msg=lambda m: f"seed={SEED} loss at step {i}: {m}")
        assert_tree_close(dict(model.named_parameters()), ref_params, f"params after step {i}")
        assert_tree_close(step.state, ref_state, f"state after step {i}")
    return step


def test_adamw_state_is_scale_by_adam_state() -> None:
    step = run_against_jax(optax.adamw(1e-2, weight_decay=1e-2))
    leaves = jax.tree_util.tree_leaves(step.state, is_leaf=lambda x: hasattr(x, "_fields"))
    assert any(type(s).__name__ == "ScaleByAdamState" for s in leaves), step.state
    adam = next(s for s in leaves if type(s).__name__ == "ScaleByAdamState")
    assert int(adam.count) == 3


def test_chain_clip_by_global_norm_then_adamw() -> None:
    run_against_jax(optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2)))


def test_lion() -> None:
    run_against_jax(optax.lion(1e-3, weight_decay=1e-3))


def test_cosine_schedule_through_inject_hyperparams_compiles_once() -> None:
    schedule = optax.cosine_decay_schedule(1e-2, decay_steps=10, alpha=0.1)
    tx = optax.inject_hyperparams(optax.adamw)(learning_rate=schedule, weight_decay=1e-2)
    before = hb.stats()["compiles"]
    step = run_against_jax(tx, steps=3)
    after_three = hb.stats()["compiles"]
    # The schedule's step count is state, not a constant: later steps (with a
    # different learning rate each) reuse the program.
    x, y = torch.randn(12, 16), torch.randn(12, 8)
    for _ in range(3):
        step(x, y)
    assert hb.stats()["compiles"] == after_three > before
    assert isinstance(step.state.hyperparams, dict)
    lr = float(step.state.hyperparams["learning_rate"])
    # inject_hyperparams records the rate of the last update: step 6 used
    # schedule(5) (counts start at 0).
    np.testing.assert_allclose(lr, float(schedule(5)), rtol=1e-6)
    assert int(step.state.count) == 6
