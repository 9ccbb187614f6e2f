"""Hybrid zoo rows (``model_zoo/hybrid.py``): one model per family (HF
decoder, HF encoder, torchvision CNN, timm) with JAX doing real work inside
it (norms and activations through ``hb.call_jax``, attention as a Pallas
kernel), through ``torch.compile`` inference and training and
``compile_train_step`` with Optax AdamW (``hb.optim.JaxOptimizer``),
compared with the eager torch original (the JAX pieces mirror the torch
modules they replace). Checks are the zoo's (``model_zoo/paths.py``,
``model_zoo/accuracy.py``: inference rtol=1e-4/atol=1e-4 vs eager float32;
each training step's loss rtol=1e-4/atol=1e-5 vs eager float64 from the
same weights; the state after the steps by the statistical check against
eager float64, with eager float32's own error as the yardstick, AdamW
atol=2e-4).
Each cell also checks, on the receipts, that every JAX function of the
hybrid (and the Optax update) is a segment of a program hlobridge ran.
Seed: ``SEED = 20240917`` (``HLOBRIDGE_TEST_SEED`` overrides it).

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_zoo_hybrid.py -q
"""

from __future__ import annotations


import pytest
import torch

from model_zoo.hybrid import HYBRIDS
from model_zoo.jax_pieces import pallas_attention
from model_zoo.paths import HYBRID_PATHS, run_hybrid
from model_zoo.results import SEED, fresh_dynamo, write_results  # noqa: F401 (fixtures)
from model_zoo.results import record_cell




# Dynamo itself reads ``.grad`` of a non-leaf tensor while tracing timm's
# ViT for training (backend="eager" too), and warns.
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.parametrize("path", HYBRID_PATHS)
@pytest.mark.parametrize("name", [h.name for h in HYBRIDS])
def test_zoo_hybrid(name: str, path: str) -> None:
    (hybrid,) = [h for h in HYBRIDS if h.name == name]
    record_cell(f"{name}/{path}", lambda: run_hybrid(hybrid, path, SEED), None, SEED)


def test_pallas_attention_matches_torch_and_its_gradient() -> None:
    """The Pallas attention kernel through ``hb.call_jax`` (grouped-query
    heads, an additive mask) equals eager torch attention, forward and
    backward (through its ``custom_vjp``), rtol=1e-5/atol=1e-5."""
    g = torch.Generator().manual_seed(SEED)
    q = torch.randn(2, 4, 5, 8, generator=g, requires_grad=True)
    k = torch.randn(2, 2, 5, 8, generator=g, requires_grad=True)
    v = torch.randn(2, 2, 5, 8, generator=g, requires_grad=True)
    mask = torch.where(torch.rand(2, 1, 5, 5, generator=g) < 0.3, -1e9, 0.0)
    mask[..., 0] = 0.0  # every row sees a key
    cot = torch.randn(2, 5, 4, 8, generator=g)

    def eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
        p = torch.softmax(q @ k.transpose(-1, -2) * 0.3 + mask, dim=-1)
        return (p @ v).transpose(1, 2)

    tol = dict(rtol=1e-5, atol=1e-5)
    got = pallas_attention(q, k, v, mask, 0.3)
    want = eager(q, k, v)
    torch.testing.assert_close(got, want, **tol, msg=lambda m: f"seed={SEED}: {m}")
    got_grads = torch.autograd.grad(got, (q, k, v), cot)
    want_grads = torch.autograd.grad(want, (q, k, v), cot)
    for name, a, b in zip("qkv", got_grads, want_grads):
        torch.testing.assert_close(a, b, **tol, msg=lambda m: f"seed={SEED} d{name}: {m}")
