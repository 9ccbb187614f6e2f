"""Pallas kernels written for GPU/TPU (no ``interpret=True``) run on the CPU
platform in interpret mode automatically (:mod:`hlobridge._src.pallas_auto`):
through ``hb.call_jax``, ``torch.compile(backend="hlobridge")`` and
``hb.compile_train_step``; receipts mark them ``backend="interpret"``,
``auto_interpret=True``. Lowering for ``tpu``/``cuda`` keeps them as written.

Kernels: an elementwise ``2*x + y`` with a BlockSpec grid over row blocks and
the tiled matmul of ``pallas_kernels`` (grid over output tiles); for training
each gets a ``jax.custom_vjp`` whose backward is plain jnp. References are
pure jnp/torch on fresh random inputs (seed printed on failure,
HLOBRIDGE_TEST_SEED replays). Tolerances (float32): elementwise rtol=1e-5,
atol=1e-6; a 256-deep matmul summed in another order than the reference's
rtol=1e-4, atol=1e-4 (its entries are ~16); training losses rtol=1e-4,
atol=1e-5 and parameters after 3 momentum-SGD steps rtol=1e-3, atol=1e-4
(as in test_train_step.py).

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_pallas_cpu_auto.py -q
"""

from __future__ import annotations

import copy
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from jax.experimental import pallas as pl

import hlobridge as hb
from hlobridge import dynamo as hbd
from hlobridge import optim
from hlobridge._src import lowering
from hlobridge.pallas import PallasLoweringError, trace_pallas
from hlobridge._src.pallas_auto import ENV
from hlobridge._src.stitching import KernelSegment

from pallas_kernels import MM_K, MM_M, MM_N, pallas_matmul

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
EW_TOL = dict(rtol=1e-5, atol=1e-6)
MM_TOL = dict(rtol=1e-4, atol=1e-4)
LOSS_TOL = dict(rtol=1e-4, atol=1e-5)
PARAM_TOL = dict(rtol=1e-3, atol=1e-4)
ROWS = 8  # rows per grid step of scale_add


@pytest.fixture(autouse=True)
def fresh() -> Any:
    torch._dynamo.reset()
    torch.manual_seed(SEED)
    yield
    torch._dynamo.reset()


def close(a: torch.Tensor, b: Any, tol: dict[str, float], what: str = "") -> None:
    b = b if isinstance(b, torch.Tensor) else torch.from_numpy(np.array(b))
    torch.testing.assert_close(a, b, **tol, msg=lambda m: f"seed={SEED} {what}: {m}")


# --- kernels written for GPU/TPU: no interpret=True -------------------------


def _scale_add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + y_ref[...]


def scale_add(x: jax.Array, y: jax.Array, interpret: bool = False) -> jax.Array:
    """2*x + y, ROWS rows per program (grid over row blocks)."""
    r, c = x.shape
    spec = pl.BlockSpec((ROWS, c), lambda i: (i, 0))
    return pl.pallas_call(_scale_add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(r // ROWS,),
                          in_specs=[spec, spec], out_specs=spec, name="scale_add", interpret=interpret)(x, y)


@jax.custom_vjp
def scale_add_vjp(x: jax.Array, y: jax.Array) -> jax.Array:
    return scale_add(x, y)


def _scale_add_fwd(x: jax.Array, y: jax.Array) -> tuple[jax.Array, None]:
    return scale_add(x, y), None


def _scale_add_bwd(_: None, g: jax.Array) -> tuple[jax.Array, jax.Array]:
    return 2.0 * g, g


scale_add_vjp.defvjp(_scale_add_fwd, _scale_add_bwd)


@jax.custom_vjp
def matmul_vjp(x: jax.Array, w: jax.Array) -> jax.Array:
    return pallas_matmul(x, w)


def _matmul_fwd(x: jax.Array, w: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    return pallas_matmul(x, w), (x, w)


def _matmul_bwd(res: tuple[jax.Array, jax.Array], g: jax.Array) -> tuple[jax.Array, jax.Array]:
    x, w = res
    return g @ w.T, x.T @ g


matmul_vjp.defvjp(_matmul_fwd, _matmul_bwd)


# Plain functions around the custom_vjp objects (Dynamo takes a function as
# call_jax's first argument, not a custom_vjp instance).
def kernel_scale_add(x: jax.Array, y: jax.Array) -> jax.Array:
    return scale_add_vjp(x, y)


def kernel_matmul(x: jax.Array, w: jax.Array) -> jax.Array:
    return matmul_vjp(x, w)


def check_auto_kernels(segments: Any, names: list[str]) -> None:
    """The receipt's Pallas segment(s) list exactly ``names`` (in order),
    each interpreted on cpu because it was written without interpret=True."""
    kernels = [k for s in segments if isinstance(s, KernelSegment) for k in s.kernels]
    assert [(k.name, k.target, k.backend, k.auto_interpret, k.custom_call_target) for k in kernels] == [
        (n, "cpu", "interpret", True, None) for n in names], segments


# --- (1) hb.call_jax ----------------------------------------------------------


def test_call_jax_elementwise_kernel_runs_in_interpret_mode() -> None:
    x, y = torch.randn(32, 128), torch.randn(32, 128)
    out = hb.call_jax(scale_add, x, y)
    close(out, 2.0 * x + y, EW_TOL)
    r = hb.last_receipt()
    assert r is not None and r.platform == "cpu" and [s.producer for s in r.segments] == ["pallas"]
    check_auto_kernels(r.segments, ["scale_add"])
    # Fresh inputs, same signature: served from the cache, still right.
    x2, y2 = torch.randn(32, 128), torch.randn(32, 128)
    close(hb.call_jax(scale_add, x2, y2), 2.0 * x2 + y2, EW_TOL)


def test_call_jax_matmul_kernel_inside_a_jax_function() -> None:
    def fn(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.tanh(jax.jit(pallas_matmul)(x, w) + b)  # kernel in a nested jit

    x, w, b = torch.randn(MM_M, MM_K), torch.randn(MM_K, MM_N) / 16, torch.randn(MM_N)
    out = hb.call_jax(fn, x, w, b)
    ref = jnp.tanh(jnp.dot(x.numpy(), w.numpy(), precision="highest") + b.numpy())
    close(out, ref, MM_TOL)
    r = hb.last_receipt()
    assert r is not None
    check_auto_kernels(r.segments, ["tiled_matmul"])


def test_auto_lowering_is_the_explicit_interpret_lowering() -> None:
    """The module call_jax lowers for a kernel without interpret=True is the
    one it lowers for the same kernel with interpret=True (and has no
    custom call); only the receipt's ``auto_interpret`` differs."""
    x, y = torch.randn(16, 256), torch.randn(16, 256)
    leaves, treedef = jax.tree_util.tree_flatten(((x, y), {}))
    auto = lowering.lower(lambda a, b: scale_add(a, b), treedef, leaves, "cpu")
    explicit = lowering.lower(lambda a, b: scale_add(a, b, interpret=True), treedef, leaves, "cpu")
    assert auto.text == explicit.text
    assert "custom_call" not in auto.text
    seg = trace_pallas(scale_add, x, y, target="cpu")
    assert [(k.backend, k.auto_interpret) for k in seg.kernels] == [("interpret", False)]


def test_fallback_off_raises_a_named_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """HLOBRIDGE_PALLAS_AUTO_INTERPRET=0: the kernel is refused with a
    PallasLoweringError that names it and the fix, not JAX's bare ValueError."""
    monkeypatch.setenv(ENV, "0")
    x, y = torch.randn(24, 128), torch.randn(24, 128)  # a signature nothing compiled yet
    with pytest.raises(PallasLoweringError, match="interpret=True") as info:
        hb.call_jax(scale_add, x, y)
    assert info.value.kernel == "scale_add" and info.value.target == "cpu"
    assert isinstance(info.value, hb.BridgeError)
    # A kernel that asks for interpret mode itself still runs.
    close(hb.call_jax(lambda a, b: scale_add(a, b, interpret=True), x, y), 2.0 * x + y, EW_TOL)
    monkeypatch.setenv(ENV, "1")
    close(hb.call_jax(scale_add, x, y), 2.0 * x + y, EW_TOL)


def test_plain_jax_outside_hlobridge_is_unchanged() -> None:
    """The fallback is a parameter of hlobridge's own lowerings, not a global
    patch: plain jax.jit on cpu still refuses the kernel, also after
    hlobridge lowered the very same function."""
    x, y = torch.randn(32, 128), torch.randn(32, 128)
    hb.call_jax(scale_add, x, y)
    sds = jax.ShapeDtypeStruct((32, 128), jnp.float32)
    with pytest.raises(ValueError, match="interpret mode"):
        jax.jit(scale_add).trace(sds, sds).lower(lowering_platforms=("cpu",))


# --- cross-lowering keeps the kernel as written -----------------------------


@pytest.mark.parametrize("target,backend,call", [
    ("tpu", None, "tpu_custom_call"),
    ("cuda", "triton", "__gpu$xla.gpu.triton"),
])
def test_cross_lowering_keeps_the_custom_call(target: str, backend: str | None, call: str) -> None:
    sds = jax.ShapeDtypeStruct((32, 128), jnp.float32)
    seg = trace_pallas(scale_add, sds, sds, target=target, backend=backend)
    assert seg.fallback is None
    assert [(k.backend != "interpret", k.auto_interpret, k.custom_call_target) for k in seg.kernels] == [
        (True, False, call)]
    assert f"@{call}" in seg.module_text or f'@"{call}"' in seg.module_text


def test_cross_lowering_of_an_unlowerable_kernel_is_a_named_error() -> None:
    """No silent fallback off cpu: a kernel Mosaic GPU cannot lower raises."""
    x = jax.ShapeDtypeStruct((MM_M, MM_K), jnp.float32)
    w = jax.ShapeDtypeStruct((MM_K, MM_N), jnp.float32)
    with pytest.raises(PallasLoweringError, match="tiled_matmul"):
        trace_pallas(pallas_matmul, x, w, target="cuda", backend="mosaic_gpu")


# --- (2) torch.compile(backend="hlobridge") ------------------------------------


class KernelBlock(torch.nn.Module):
    """torch Linear -> Pallas matmul (call_jax) -> Pallas 2*m + b -> torch.
    ``kernels=False`` is the pure-torch reference."""

    def __init__(self, kernels: bool = True) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(64, MM_K)
        self.w = torch.nn.Parameter(torch.randn(MM_K, MM_N) / 16)
        self.b = torch.nn.Parameter(torch.randn(MM_M, MM_N) * 0.1)
        self.head = torch.nn.Linear(MM_N, 8)
        self.kernels = kernels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.inp(x))
        if self.kernels:
            m = hb.call_jax(kernel_matmul, h, self.w)
            z = hb.call_jax(kernel_scale_add, m, self.b)
        else:
            z = 2.0 * (h @ self.w) + self.b
        return self.head(torch.relu(z))


def test_torch_compile_runs_the_kernels_in_interpret_mode() -> None:
    model = KernelBlock()
    ref = copy.deepcopy(model)
    ref.kernels = False
    compiled = torch.compile(model, backend=hbd.backend, dynamic=False)
    x = torch.randn(MM_M, 64)
    n0 = hbd.graphs_compiled()
    out = compiled(x)
    expected = ref(x)
    close(out, expected, MM_TOL, "output")
    producers = [s.producer for s in hb.last_receipt().segments]  # type: ignore[union-attr]
    assert producers.count("pallas") == 2 and "torch" in producers, producers
    g = torch.randn_like(expected)
    out.backward(g)
    expected.backward(g)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.grad is not None, name
        close(p.grad, q.grad, PARAM_TOL, f"grad of {name}")
    graphs = [g for g in hbd.compiled_graphs(since=n0) if g.gm is not None]
    assert len(graphs) == 2, graphs  # forward, backward: no graph break
    # Fresh input, same signature: the compiled program again.
    x2 = torch.randn(MM_M, 64)
    with torch.no_grad():
        close(compiled(x2), ref(x2), MM_TOL, "second output")


# --- (3) hb.compile_train_step --------------------------------------------------


def test_compile_train_step_runs_the_kernels_in_interpret_mode() -> None:
    model = KernelBlock()
    ref = copy.deepcopy(model)
    ref.kernels = False
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)

    def loss_fn(m: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(m(x), y)

    step = hb.compile_train_step(model, loss_fn, optim.SGD(lr=0.05, momentum=0.9))
    for i in range(3):
        x, y = torch.randn(MM_M, 64), torch.randn(MM_M, 8)
        loss = step(x, y)
        ref_opt.zero_grad()
        ref_loss = loss_fn(ref, x, y)
        ref_loss.backward()
        ref_opt.step()
        close(loss, ref_loss.detach(), LOSS_TOL, f"loss at step {i}")
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            close(p.detach(), q.detach(), PARAM_TOL, f"{name} after step {i}")
    assert len(step.graphs) == 1
    (program,) = step.graphs[0].programs.values()
    assert program.text.count("func.func public @main") == 1  # ONE program
    assert "custom_call @tpu_custom_call" not in program.text and "triton" not in program.text
    producers = [s.producer for s in program.segments]
    # forward kernels and their VJPs (which recompute the forward kernels)
    assert producers.count("pallas") >= 2 and "torch" in producers, producers
    r = hb.last_receipt()
    assert r is not None and r.cache == "hit" and "pallas" in {s.producer for s in r.segments}
