"""Softmax on the CPU plugin's oneDNN softmax (``__onednn$softmax``,
written by the host lowering, ``bridge/core/src/lower/onednn_softmax.rs``;
docs/host_gemm.md, "Softmax").

torch.compile'd softmaxes (torch_xla's lowering) and JAX's ``jax.nn.softmax``
(kept dims through a reshape) must be routed to oneDNN, and agree with
float64 torch on fresh random inputs to float32 rounding (``1e-6``
absolute, 16 units in the last place at 1.0: softmax values are at most 1;
oneDNN's exponential along a non-innermost axis was measured 6e-7 off; a
wrong axis or a missing max subtraction is wrong by far more). NaN and all-``-inf`` rows must come out
as eager's (NaN rows), masked (``-inf``) entries as zeros, and gradients must
match eager's. The cases run with ``HLOBRIDGE_ONEDNN_SOFTMAX=all`` (every
size); by default only softmaxes of at least 2**17 elements are routed, and
``0`` keeps XLA's softmax.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import pytest
import torch

from hlobridge import _native

from onednn_helpers import run_f32

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
ONEDNN = "__onednn$softmax"
TOL = 1e-6


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="hlobridge", fullgraph=True)


@pytest.mark.parametrize("shape,dim", [((8, 12, 128, 128), -1), ((4, 64, 33), 1), ((5, 7), 0), ((3, 1000), -1)])
def test_torch_softmax_matches_float64(shape, dim, monkeypatch) -> None:
    monkeypatch.setenv("HLOBRIDGE_ONEDNN_SOFTMAX", "all")
    x = torch.randn(shape, generator=_gen()) * 4
    f = _compiled(lambda t: torch.softmax(t, dim))
    with torch.no_grad():
        got = f(x)
    want = torch.softmax(x.double(), dim)
    err = (got.double() - want).abs().max().item()
    assert err <= TOL, f"seed {SEED}: {err:.3g}"


def test_attention_softmax_with_mask_scale_nan_and_masked_rows(monkeypatch) -> None:
    """BERT's ``softmax(s * scale + mask)``: the additive mask's ``-inf``
    entries give zeros; a row of only ``-inf`` and a row with a NaN give NaN
    rows, as eager's do."""
    monkeypatch.setenv("HLOBRIDGE_ONEDNN_SOFTMAX", "all")
    g = _gen()
    s = torch.randn(2, 3, 16, 16, generator=g)
    mask = torch.zeros(2, 1, 1, 16)
    mask[0, ..., 10:] = float("-inf")
    s[1, 2, 5, :] = float("-inf")
    s[1, 0, 3, 7] = float("nan")
    fn = lambda t, m: torch.softmax(t * 0.125 + m, -1)  # noqa: E731
    with torch.no_grad():
        got = _compiled(fn)(s, mask)
    want = fn(s.double(), mask.double())
    assert torch.equal(got.isnan(), want.isnan()), "NaN rows differ from eager's"
    ok = ~want.isnan()
    assert (got[0, ..., 10:] == 0).all()
    err = (got.double()[ok] - want[ok]).abs().max().item()
    assert err <= TOL, f"seed {SEED}: {err:.3g}"


def test_the_compiled_program_calls_onednn(monkeypatch) -> None:
    monkeypatch.setenv("HLOBRIDGE_ONEDNN_SOFTMAX", "all")
    text = jax.jit(lambda x: jax.nn.softmax(x, axis=1)).lower(
        jax.ShapeDtypeStruct((4, 64, 33), jnp.float32)).as_text()
    exe, _ = _native.compile(text)
    assert exe.host_kernels.get(ONEDNN) == 1, exe.host_kernels
    x = torch.randn(4, 64, 33, generator=_gen()) * 4
    got = run_f32(exe, x)
    err = (got.double() - torch.softmax(x.double(), 1)).abs().max().item()
    assert err <= TOL, f"seed {SEED}: {err:.3g}"
    for env in ("0", "1"):  # off; on, but below the default bound
        monkeypatch.setenv("HLOBRIDGE_ONEDNN_SOFTMAX", env)
        exe, _ = _native.compile(text)
        assert ONEDNN not in exe.host_kernels, (env, exe.host_kernels)
    monkeypatch.setenv("HLOBRIDGE_ONEDNN_SOFTMAX", "1")
    big = jax.jit(lambda x: jax.nn.softmax(x, axis=-1)).lower(
        jax.ShapeDtypeStruct((8, 12, 128, 128), jnp.float32)).as_text()
    exe, _ = _native.compile(big)
    assert exe.host_kernels.get(ONEDNN) == 1, exe.host_kernels


def test_gradients_match_eager(monkeypatch) -> None:
    monkeypatch.setenv("HLOBRIDGE_ONEDNN_SOFTMAX", "all")
    g = _gen()
    x = torch.randn(4, 6, 32, 32, generator=g, requires_grad=True)
    w = torch.randn(4, 6, 32, 32, generator=g)
    fn = lambda t: (torch.softmax(t, -1) * w).sum()  # noqa: E731
    _compiled(fn)(x).backward()
    x64 = x.detach().double().requires_grad_()
    (torch.softmax(x64, -1) * w.double()).sum().backward()
    err = (x.grad.double() - x64.grad).abs().max().item()
    scale = x64.grad.abs().max().item()
    assert err <= 1e-5 * scale, f"seed {SEED}: {err:.3g} at {scale:.3g}"
