"""The reduction stages (``hlobridge::lower::reduce_stages``,
``HLOBRIDGE_REDUCE_STAGES``) end to end: large float reductions as JAX and
torch lower them (batch norm's statistics, NCHW and channels-last, a bias
gradient's column sum, a layer norm's row sum, a max, a float64 sum),
compiled with the rewrite on and off and compared with float64 on fresh
random inputs. The ``reduce_stages`` counter shows that the rewrite took
each reduction it should (it is not a no-op that passes) and left the ones
it should leave (a long elementwise chain, which XLA would recompute inside
the stage).

Tolerances: each result of a float32 sum is checked against float64 to
``1e-5`` of the sum of its terms' magnitudes (``1e-14`` in float64). On
the 2-core Xeon the staged sums were 0.7–5e-7 off (chains of at most 32
terms, then XLA's tree), XLA's own up to 1.5e-6 (chains of up to 8192 in
its ``reduce-window``); one term of ``n`` dropped would be about ``1/n``,
4e-5 or more here, and a sum rounded through bf16 1e-3. A max is exact. The torch modules are compared
with eager float32 at rtol=1e-4/atol=1e-5.

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_reduce_stages.py -q
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import torch

from hlobridge import _native
from hlobridge import dynamo as hbd

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _sum_sq_centered(x: Any, axes: tuple[int, ...]) -> Any:
    """Batch norm's variance numerator: the sum of squares about one
    element of each reduced slice (the shifted form hlobridge traces)."""
    import jax.numpy as jnp

    shift = x
    for a in axes:
        shift = jnp.take(shift, jnp.array([0]), axis=a)
    return jnp.sum((x - shift) ** 2, axis=axes)


# name: (shape, dtype, function of x, reduced axes, whether it is staged)
CASES: dict[str, tuple[tuple[int, ...], str, Callable[[Any], Any], tuple[int, ...], bool]] = {
    "batch_norm_nchw": ((8, 16, 56, 56), "float32",
                        lambda x: _sum_sq_centered(x, (0, 2, 3)), (0, 2, 3), True),
    "batch_norm_14x14": ((8, 64, 14, 14), "float32",
                         lambda x: _sum_sq_centered(x, (0, 2, 3)), (0, 2, 3), True),
    "batch_norm_channels_last": ((8, 28, 28, 48), "float32",
                                 lambda x: _sum_sq_centered(x, (0, 1, 2)), (0, 1, 2), True),
    "bias_gradient": ((1024, 96), "float32", lambda x: (x * 1.5).sum(axis=0), (0,), True),
    "layer_norm_row": ((256, 768), "float32", lambda x: (x * x).sum(axis=1), (1,), True),
    "float64_row": ((64, 1024), "float64", lambda x: (x * x).sum(axis=1), (1,), True),
    "small": ((64, 128), "float32", lambda x: (x * x).sum(axis=1), (1,), False),
}


def _lower(f: Callable[[Any], Any], shape: tuple[int, ...], dtype: str) -> str:
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(dtype == "float64"):
        return jax.jit(f).lower(jax.ShapeDtypeStruct(shape, getattr(jnp, dtype))).as_text()


def _run(text: str, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Compile ``text`` (a fresh compile: the setting is in the cache key),
    run it on ``x``; its first result and how many reductions were staged."""
    before = _native.stats()["reduce_stages"]
    exe, _ = _native.compile(text)
    staged = _native.stats()["reduce_stages"] - before
    code = _native.ELEMENT_TYPES["f64" if x.dtype == torch.float64 else "f32"]
    outs, *_ = _native.execute(exe, [x.data_ptr()], [list(x.shape)], [code], [x])
    return torch.from_dlpack(outs[0]), staged


def _terms(name: str, x: torch.Tensor, axes: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """The float64 reference and, per result, the sum of the terms'
    magnitudes."""
    xd = x.double()
    if name.startswith("batch_norm"):
        shift = xd
        for a in axes:
            shift = shift.narrow(a, 0, 1)
        t = (xd - shift) ** 2
    elif name == "bias_gradient":
        t = xd * 1.5
    else:
        t = xd * xd
    return t.sum(axes), t.abs().sum(axes)


@pytest.mark.parametrize("name", list(CASES))
def test_sums_match_float64_with_the_stages_on_and_off(monkeypatch: pytest.MonkeyPatch,
                                                       name: str) -> None:
    shape, dtype, f, axes, staged = CASES[name]
    text = _lower(f, shape, dtype)
    g = torch.Generator().manual_seed(SEED)
    x = (torch.randn(*shape, generator=g, dtype=torch.float64) * 3 + 1).to(getattr(torch, dtype))
    want, magnitude = _terms(name, x, axes)
    bound = 1e-5 if dtype == "float32" else 1e-14
    for setting in ("1", "0"):
        monkeypatch.setenv("HLOBRIDGE_REDUCE_STAGES", setting)
        got, count = _run(text, x)
        assert count == int(staged and setting == "1"), (name, setting, count)
        err = ((got.double() - want).abs() / magnitude).max().item()
        assert err <= bound, f"seed={SEED} {name} stages={setting}: relative error {err:.3g}"


def test_a_max_is_staged_and_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """A max over rows of 4096 (a softmax's): exact, NaN rows included."""
    text = _lower(lambda x: x.max(axis=1), (64, 4096), "float32")
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(64, 4096, generator=g)
    x[3, 1000] = float("nan")
    monkeypatch.setenv("HLOBRIDGE_REDUCE_STAGES", "1")
    got, count = _run(text, x)
    assert count == 1
    want = x.max(dim=1).values
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got[~want.isnan()], want[~want.isnan()]), f"seed={SEED}"


def test_a_long_elementwise_chain_is_left_to_xla(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sum at the end of 24 elementwise layers (a residual stream): XLA
    would recompute the chain inside the staged reduction, so it is left
    as it is, and still right."""
    import jax.numpy as jnp

    def chain(x: Any) -> Any:
        h = x
        for i in range(24):
            h = jnp.tanh(h * (1.0 + 0.01 * i)) + x
        return h.sum(axis=1)

    text = _lower(chain, (64, 1024), "float32")
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(64, 1024, generator=g)
    monkeypatch.setenv("HLOBRIDGE_REDUCE_STAGES", "1")
    got, count = _run(text, x)
    assert count == 0
    h = x.double()
    for i in range(24):
        h = torch.tanh(h * (1.0 + 0.01 * i)) + x.double()
    torch.testing.assert_close(got.double(), h.sum(1), rtol=1e-5, atol=1e-4,
                               msg=lambda m: f"seed={SEED}: {m}")


class ConvNormBlock(torch.nn.Module):
    """Batch norm (NCHW) then a channels-last layer norm, with GELU
    (smooth, so no activation flips sign between float32 programs)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(c)
        self.ln = torch.nn.LayerNorm(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.gelu(self.bn(x))
        return self.ln(y.permute(0, 2, 3, 1))


def test_training_norms_match_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forward and backward of a training batch norm and a layer norm
    through ``torch.compile``, with the stages on: the outputs, the input
    gradient and the weight gradients match eager float32, and the
    statistics and gradient sums were staged."""
    monkeypatch.setenv("HLOBRIDGE_REDUCE_STAGES", "1")
    torch.manual_seed(SEED)
    model = ConvNormBlock(32).train()
    ref = ConvNormBlock(32).train()
    ref.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend=hbd.backend, dynamic=False)
    g = torch.Generator().manual_seed(SEED + 1)
    x = torch.randn(8, 32, 28, 28, generator=g) * 2 + 0.5
    before = _native.stats()["reduce_stages"]
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = compiled(xa)
    r = torch.randn(out.shape, generator=g)  # a loss whose gradients are not ~0
    (out * r).sum().backward()
    want = ref(xb)
    (want * r).sum().backward()
    assert _native.stats()["reduce_stages"] - before >= 4
    tol = dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out, want, **tol, msg=lambda m: f"seed={SEED}: {m}")
    assert xa.grad is not None and xb.grad is not None
    scale = xb.grad.abs().max().item()
    torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-4, atol=1e-5 * scale,
                               msg=lambda m: f"seed={SEED}: {m}")
    for (name, p), p_ref in zip(model.named_parameters(), ref.parameters()):
        assert p.grad is not None and p_ref.grad is not None
        s = p_ref.grad.abs().max().item()
        torch.testing.assert_close(p.grad, p_ref.grad, rtol=1e-4, atol=1e-5 * s,
                                   msg=lambda m, name=name: f"seed={SEED} {name}: {m}")
