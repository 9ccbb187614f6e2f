"""The dot operand rewrite (``hlobridge::lower::dot_operands``,
``HLOBRIDGE_DOT_OPERANDS``) end to end: a decode step's attention over a
static K/V cache, as ``torch.nn.functional.scaled_dot_product_attention``
and a hand-written ``q @ k.transpose(-1, -2)`` lower it (transposed,
scaled and batch-merged operands of products left to XLA), compiled with
the rewrite on and off and compared with eager torch on fresh random
inputs over several steps. The ``dot_operand_rewrites`` counter shows
that the rewrite took the products (it is not a no-op that passes).

Tolerances: float32 outputs and cache slots rtol=1e-4/atol=1e-5 (XLA's
products and exp against torch's; the moved √scale changes the rounding
of a score by an ulp).

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_dot_operands.py -q
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from hlobridge import _native
from hlobridge import dynamo as hbd

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
TOL = dict(rtol=1e-4, atol=1e-5)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


class CachedAttention(torch.nn.Module):
    """Attention of one new token per sequence over a static K/V cache
    updated with ``index_copy_`` (Hugging Face's ``StaticCache`` step)."""

    def __init__(self, sdpa: bool, b: int = 2, h: int = 3, n: int = 32, d: int = 16) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(h * d, 3 * h * d)
        self.sdpa, self.h, self.d = sdpa, h, d
        self.register_buffer("k", torch.randn(b, h, n, d))
        self.register_buffer("v", torch.randn(b, h, n, d))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        q, k, v = self.qkv(x).view(b, 1, 3, self.h, self.d).permute(2, 0, 3, 1, 4)
        self.k.index_copy_(2, pos, k)
        self.v.index_copy_(2, pos, v)
        if self.sdpa:
            out = torch.nn.functional.scaled_dot_product_attention(q, self.k, self.v)
        else:
            s = self.d ** -0.25
            att = ((q * s) @ (self.k * s).transpose(-1, -2)).softmax(-1)
            out = att @ self.v
        return out.reshape(b, -1)


def run(monkeypatch: pytest.MonkeyPatch, sdpa: bool, setting: str) -> tuple[list[torch.Tensor], int]:
    """Four decode steps of a compiled model against its eager twin; the
    compiled outputs and how many products the rewrite took."""
    monkeypatch.setenv("HLOBRIDGE_DOT_OPERANDS", setting)
    torch._dynamo.reset()
    torch.manual_seed(SEED)
    model = CachedAttention(sdpa).eval()
    ref = CachedAttention(sdpa).eval()
    ref.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend=hbd.backend, dynamic=False)
    before = _native.stats()["dot_operand_rewrites"]
    outs = []
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(2, 48, generator=g)
            pos = torch.randint(0, 32, (1,), generator=g)
            out = compiled(x, pos)
            torch.testing.assert_close(out, ref(x, pos), **TOL,
                                       msg=lambda m: f"seed={SEED} {setting}: {m}")
            for c, c_ref in ((model.k, ref.k), (model.v, ref.v)):
                torch.testing.assert_close(c, c_ref, **TOL, msg=lambda m: f"seed={SEED}: {m}")
            outs.append(out.clone())
    return outs, _native.stats()["dot_operand_rewrites"] - before


@pytest.mark.parametrize("sdpa", [True, False], ids=["sdpa", "matmul"])
def test_decode_attention_matches_eager_with_the_rewrite_on_and_off(
        monkeypatch: pytest.MonkeyPatch, sdpa: bool) -> None:
    on, taken = run(monkeypatch, sdpa, "1")
    # q·Kᵀ (transposed and scaled K) and p·V (the updated V cache).
    assert taken >= 2, taken
    off, none = run(monkeypatch, sdpa, "0")
    assert none == 0, none
    for a, b in zip(on, off):
        torch.testing.assert_close(a, b, **TOL, msg=lambda m: f"seed={SEED}: {m}")


def test_a_scaling_moved_off_a_batched_operand_without_a_reshape() -> None:
    """``q · (K · c)`` with one batch dim and no merging reshape: only the
    scaling moves (onto the small result), and the product still matches
    float64 to float32 accumulation."""
    import jax
    import jax.numpy as jnp

    from onednn_helpers import run_f32

    def f(a: Any, b: Any) -> Any:
        return jax.lax.dot_general(a, b * 0.37, (((2,), (2,)), ((0,), (0,))),
                                   precision=jax.lax.Precision.HIGHEST)

    text = jax.jit(f).lower(jax.ShapeDtypeStruct((6, 1, 16), jnp.float32),
                            jax.ShapeDtypeStruct((6, 64, 16), jnp.float32)).as_text()
    before = _native.stats()["dot_operand_rewrites"]
    exe, _ = _native.compile(text)
    assert _native.stats()["dot_operand_rewrites"] - before == 1
    g = torch.Generator().manual_seed(SEED)
    a, b = torch.randn(6, 1, 16, generator=g), torch.randn(6, 64, 16, generator=g)
    want = torch.einsum("bmk,bnk->bmn", a.double(), b.double() * 0.37)
    err = (run_f32(exe, a, b).double() - want).abs().max().item()
    assert err < 2e-6 * 4 * want.abs().max().item(), f"seed={SEED}: {err}"
