"""``hlobridge.trace_pallas`` and ``hlobridge.stitch_program``: Pallas kernels
(add, tiled matmul, row softmax) lowered for cpu / tpu / cuda, stitched
between torch segments into one module.

- cpu (interpret mode): the stitched torch -> Pallas -> torch program runs on
  the CPU plugin and matches the same computation in jax.jit on fresh random
  inputs (float32, rtol=1e-4, atol=1e-5; the tiled matmul, which sums in a
  different order than XLA's dot, must be as accurate as XLA's float32 dot
  against the exact float64 product: ``close_matmul``).
- tpu / cuda: the lowered modules' structure (op names, custom call target,
  operand/result types, payload size and SHA-256) matches checked-in
  snapshots, and the stitched program still holds each custom call with its
  operands (also after a ``format_module`` round-trip).

Seeds are random (HLOBRIDGE_TEST_SEED replays one) and printed on failure.
Run:  .venv/bin/python -m pytest -W error tests/python/test_pallas.py -q
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import hlobridge as hb
from hlobridge.pallas import PallasLoweringError, find_kernels, trace_pallas
from hlobridge._src.stitching import KernelSegment, stitch_program

from pallas_helpers import check_snapshot, structure, torch_segment, ttype
from pallas_kernels import KERNELS, pallas_add, pallas_matmul, pallas_softmax

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


def close(a: torch.Tensor, b: object) -> None:
    torch.testing.assert_close(a, torch.from_numpy(np.array(b)), **TOL, msg=lambda m: f"seed={SEED}: {m}")


def close_matmul(got: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> None:
    """A float32 matmul summed in another order than XLA's dot: a fixed atol
    flakes on entries near zero (K=256 terms of size ~1 leave ~1e-5 of
    rounding). Instead, against the exact (float64) product, the kernel must
    be about as accurate as XLA's own float32 dot: its largest error at most
    twice XLA's, plus one float32 ulp of the largest entry."""
    exact = x.double() @ y.double()
    xla = torch.from_numpy(np.array(jax.jit(jnp.dot)(x.numpy(), y.numpy()))).double()
    err = float((got.double() - exact).abs().max())
    err_xla = float((xla - exact).abs().max())
    slack = float(exact.abs().max()) * float(np.finfo(np.float32).eps)
    assert err <= 2 * err_xla + slack, f"seed={SEED}: max error {err:.3g} vs XLA dot {err_xla:.3g}"


# --- cpu: interpret mode, runs here -------------------------------------------


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_in_call_jax_matches_jax(name, gen):
    fn, shapes = KERNELS[name]
    args = [torch.randn(*s, generator=gen) for s in shapes]
    seg = trace_pallas(fn, *args, target="cpu")
    assert seg.producer == "pallas" and [k.backend for k in seg.kernels] == ["interpret"]
    assert "custom_call" not in seg.module_text  # interpret mode: plain StableHLO
    ref = {"add": lambda x, y: x + y, "matmul": jnp.dot, "softmax": jax.nn.softmax}[name]
    out = hb.call_jax(seg, *args)
    if name == "matmul":
        close_matmul(out, *args)
    else:
        close(out, jax.jit(ref)(*[a.numpy() for a in args]))
    # call_jax's receipt names the embedded kernel, as a pallas segment.
    r = hb.last_receipt()
    assert r is not None and [s.producer for s in r.segments] == ["pallas"]
    assert isinstance(r.segments[0], KernelSegment)
    assert [(k.name, k.backend) for k in r.segments[0].kernels] == [
        (k.name, "interpret") for k in seg.kernels]


class Pre(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2.0


class Mid(torch.nn.Module):
    def forward(self, m):
        return m.reshape(128, 128) * 0.1


class Post(torch.nn.Module):
    def forward(self, z, x):
        return z.sum(dim=0) + x[0, :128]


def _program(target: str, backend: str | None, gen: torch.Generator):
    """torch Pre -> pallas matmul -> torch Mid -> pallas softmax -> pallas add
    -> torch Post, stitched for ``target``. Returns (program, inputs)."""
    x, w, y = torch.randn(64, 256, generator=gen), torch.randn(256, 256, generator=gen) / 16, torch.randn(128, 128, generator=gen)
    h = torch.tanh(x) * 2.0
    m = h @ w
    s = m.reshape(128, 128) * 0.1
    pre, pre_in = torch_segment(Pre(), ["x"], (x,))
    mid, mid_in = torch_segment(Mid(), ["m"], (m,))
    post, post_in = torch_segment(Post(), ["z", "x"], (s, x))
    mm = trace_pallas(pallas_matmul, h, w, target=target, backend=backend)
    sm = trace_pallas(pallas_softmax, s, target=target, backend=backend)
    ad = trace_pallas(pallas_add, s, y, target=target, backend=backend)
    prog = stitch_program(
        [("x", ttype(x)), ("w", ttype(w)), ("y", ttype(y))],
        [("pre", "torch", pre, "main", pre_in, ["h"]), (mm, ["h", "w"], ["m"]),
         ("mid", "torch", mid, "main", mid_in, ["s"]), (sm, ["s"], ["p"]), (ad, ["p", "y"], ["z"]),
         ("post", "torch", post, "main", post_in, ["out"])],
        ["z", "out"])
    return prog, (x, w, y)


def _jax_program(x, w, y):
    h = jnp.tanh(x) * 2.0
    z = jax.nn.softmax((h @ w).reshape(128, 128) * 0.1) + y
    return z, z.sum(axis=0) + x[0, :128]


def test_cpu_stitched_between_torch_matches_jax(gen):
    prog, (x, w, y) = _program("cpu", None, gen)
    assert [s["producer"] for s in prog.report["segments"]] == ["torch", "pallas", "torch", "pallas", "pallas", "torch"]
    assert prog.text.count("func.func") == 1 or all(s["inlined"] for s in prog.report["segments"])
    z, out = prog.run(x, w, y)
    rz, rout = jax.jit(_jax_program)(x.numpy(), w.numpy(), y.numpy())
    close(z, rz)
    close(out, rout)
    # fresh inputs through the same compiled program
    x2, w2, y2 = torch.randn(64, 256, generator=gen), torch.randn(256, 256, generator=gen) / 16, torch.randn(128, 128, generator=gen)
    z2, out2 = prog.run(x2, w2, y2)
    rz2, rout2 = jax.jit(_jax_program)(x2.numpy(), w2.numpy(), y2.numpy())
    close(z2, rz2)
    close(out2, rout2)
    rec = hb.last_receipt()
    assert rec is not None and rec.cache == "hit"
    ks = [s for s in rec.segments if isinstance(s, KernelSegment)]
    assert [(s.name, s.producer) for s in ks] == [("pallas_matmul", "pallas"), ("pallas_softmax", "pallas"),
                                                  ("pallas_add", "pallas")]
    assert [(k.name, k.target, k.backend) for s in ks for k in s.kernels] == [
        ("tiled_matmul", "cpu", "interpret"), ("row_softmax", "cpu", "interpret"), ("add", "cpu", "interpret")]


# --- tpu / cuda: cross-lowered here, structure checked ---------------------

CROSS = [("tpu", None), ("cuda", "triton")]


@pytest.mark.parametrize("target,backend", CROSS + [("cuda", "mosaic_gpu")], ids=lambda v: str(v))
@pytest.mark.parametrize("name", list(KERNELS))
def test_cross_lowering_structure_snapshot(name, target, backend):
    fn, shapes = KERNELS[name]
    sds = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    if backend == "mosaic_gpu" and name != "add":
        # Mosaic GPU lowers neither a pallas_call dot nor a row reduction (jax 0.10.2)
        with pytest.raises(PallasLoweringError) as ei:
            trace_pallas(fn, *sds, target=target, backend=backend)
        assert ei.value.kernel in ("tiled_matmul", "row_softmax") and ei.value.target == "cuda"
        return
    seg = trace_pallas(fn, *sds, target=target, backend=backend)
    (k,) = seg.kernels
    expected_call = {"tpu": "tpu_custom_call", "triton": "__gpu$xla.gpu.triton", "mosaic_gpu": "mosaic_gpu_v2"}
    assert k.custom_call_target == expected_call[backend or target]
    assert k.backend == (backend or "mosaic_tpu") and k.target == target
    assert k.payload_hash is not None and k.payload_bytes > 500
    assert k.operand_types == tuple(f"tensor<{s[0]}x{s[1]}xf32>" for s in shapes)
    check_snapshot(f"pallas_{name}_{target}_{backend or 'mosaic_tpu'}", structure(seg.module_text))
    # lowering again gives the same payload (no source locations in it)
    assert trace_pallas(fn, *sds, target=target, backend=backend).kernels == seg.kernels


@pytest.mark.parametrize("target,backend", CROSS, ids=lambda v: str(v))
def test_cross_stitched_between_torch_keeps_custom_calls(target, backend, gen):
    prog, _ = _program(target, backend, gen)
    assert len(prog.kernels) == 3 and all(k.backend != "interpret" for k in prog.kernels)
    call = prog.kernels[0].custom_call_target
    assert prog.text.count(f"stablehlo.custom_call @{call}(") == 3
    # the stitched module itself: one custom call per kernel, same payload and types
    found = find_kernels(prog.text)
    assert sorted((k.payload_hash, k.operand_types, k.result_types) for k in found) == sorted(
        (k.payload_hash, k.operand_types, k.result_types) for k in prog.kernels)
    # a kernel whose payload is not in the module is reported missing
    bogus = prog.kernels[0].__class__(**{**prog.kernels[0].__dict__, "payload_hash": "sha256:0"})
    with pytest.raises(PallasLoweringError, match="missing"):
        find_kernels(prog.text, [bogus])
    with pytest.raises(PallasLoweringError, match="cannot run"):
        prog.run(*_program_inputs(gen))


def _program_inputs(gen):
    return torch.randn(64, 256, generator=gen), torch.randn(256, 256, generator=gen), torch.randn(128, 128, generator=gen)


# --- errors and fallback ---------------------------------------------------


def test_unlowerable_kernel_raises_named_error_or_falls_back_explicitly(gen):
    sds = [jax.ShapeDtypeStruct(s, jnp.float32) for s in KERNELS["matmul"][1]]
    with pytest.raises(PallasLoweringError, match="tiled_matmul.*cuda.*dot_general") as ei:
        trace_pallas(pallas_matmul, *sds, target="cuda", backend="mosaic_gpu")
    assert isinstance(ei.value, hb.BridgeError)
    seg = trace_pallas(pallas_matmul, *sds, target="cuda", backend="mosaic_gpu", fallback="interpret")
    assert seg.fallback == "interpret" and "dot_general" in (seg.fallback_reason or "")
    assert [k.backend for k in seg.kernels] == ["interpret"] and "custom_call" not in seg.module_text
    x, y = torch.randn(*KERNELS["matmul"][1][0], generator=gen), torch.randn(*KERNELS["matmul"][1][1], generator=gen)
    close_matmul(hb.call_jax(seg, x, y), x, y)


def test_errors_are_clear():
    x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    with pytest.raises(PallasLoweringError, match="contains no pallas_call"):
        trace_pallas(lambda a: a * 2, x)
    with pytest.raises(ValueError, match="target must be one of"):
        trace_pallas(pallas_add, x, x, target="rocm")
    with pytest.raises(PallasLoweringError, match="not a CUDA backend"):
        trace_pallas(pallas_add, x, x, target="cuda", backend="mosaic_tpu")
    tpu = trace_pallas(pallas_add, x, x, target="tpu")
    with pytest.raises(PallasLoweringError, match="cannot run on the cpu runtime"):
        hb.call_jax(tpu, torch.zeros(8, 128), torch.zeros(8, 128))
    with pytest.raises(PallasLoweringError, match="takes 2 inputs"):
        tpu.stitch_segment(["a"], ["b"])
