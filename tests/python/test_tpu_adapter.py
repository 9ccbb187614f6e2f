"""The TPU adapter (`hlobridge.tpu_adapter`): a stitched torch + JAX + Pallas
program handed to torch_xla's runtime, here torch_xla's CPU client
(``PJRT_DEVICE=CPU``), on ``xla:0`` tensors.

Checked against hlobridge's own runtime (the same stitched module,
``StitchedProgram.run`` on CPU tensors) and against eager jax on the same
fresh random inputs (float32, rtol=1e-5, atol=1e-5; the tiled Pallas matmul's
sum order differs from XLA's dot, so 1e-4 there), plus the named errors.
On a TPU the same calls run on torch_xla's TPU client: see
docs/accelerators.md for what only a TPU can show.
"""

from __future__ import annotations

import os

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

torch_xla = pytest.importorskip("torch_xla")

import hlobridge as hb  # noqa: E402
from hlobridge.tpu_adapter import TorchXlaProgram, run_on_torch_xla, torch_xla_stablehlo_version  # noqa: E402
from pallas_helpers import torch_segment, ttype  # noqa: E402
from pallas_kernels import pallas_matmul  # noqa: E402

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
DEV = torch_xla.device()


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


def close(a: torch.Tensor, b, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    torch.testing.assert_close(a.cpu(), torch.as_tensor(b), rtol=rtol, atol=atol,
                               msg=lambda m: f"seed={SEED}: {m}")


class Pre(torch.nn.Module):
    def forward(self, x, b):
        return torch.tanh(x) * 2.0 + b


def _jax_mid(h):
    return jax.nn.softmax(h * 0.5, axis=-1), jnp.sum(h, axis=0)


def _reference(x, b, w):
    h = jnp.tanh(x) * 2.0 + b
    s, col = _jax_mid(h)
    return s @ w, col


def _program(gen):
    """torch ``Pre`` -> JAX softmax/sum -> Pallas matmul (interpret mode),
    stitched into one module. Returns (program, inputs)."""
    x = torch.randn(64, 128, generator=gen)
    b = torch.randn(64, 128, generator=gen)
    w = torch.randn(128, 128, generator=gen) / 8
    pre, pre_in = torch_segment(Pre(), ["x", "b"], (x, b))
    h = torch.tanh(x) * 2.0 + b
    mid = jax.jit(_jax_mid).lower(jax.ShapeDtypeStruct(h.shape, jnp.float32)).as_text()
    s = torch.softmax(h * 0.5, dim=-1)
    mm = hb.trace_pallas(pallas_matmul, s, w, target="cpu")
    prog = hb.stitch_program(
        [("x", ttype(x)), ("b", ttype(b)), ("w", ttype(w))],
        [("pre", "torch", pre, "main", pre_in, ["h"]),
         ("mid", "jax", mid, "main", ["h"], ["s", "col"]),
         (mm, ["s", "w"], ["z"])],
        ["z", "col"])
    return prog, (x, b, w)


def test_stitched_program_runs_on_torch_xla_like_hlobridge_and_eager(gen):
    prog, (x, b, w) = _program(gen)
    assert [s["producer"] for s in prog.report["segments"]] == ["torch", "jax", "pallas"]
    adapter = TorchXlaProgram(prog)
    z, col = adapter(x.to(DEV), b.to(DEV), w.to(DEV))
    assert z.device.type == "xla" and col.device.type == "xla"
    own_z, own_col = prog.run(x, b, w)
    rz, rcol = jax.jit(_reference)(x.numpy(), b.numpy(), w.numpy())
    close(z, own_z, rtol=1e-5, atol=1e-5)
    close(col, own_col)
    close(z, rz, rtol=1e-4, atol=1e-4)
    close(col, rcol, rtol=1e-4, atol=1e-4)
    # Fresh inputs, one of them a pending lazy graph; outputs continue lazily.
    x2, b2, w2 = torch.randn(64, 128, generator=gen), torch.randn(64, 128, generator=gen), torch.randn(128, 128, generator=gen) / 8
    lazy_x = x2.to(DEV) * 1.0 + 0.0
    z2, col2 = adapter(lazy_x, b2.to(DEV), w2.to(DEV))
    after = (z2 * 2.0).cpu()
    rz2, rcol2 = jax.jit(_reference)(x2.numpy(), b2.numpy(), w2.numpy())
    close(after, 2.0 * torch.as_tensor(rz2), rtol=1e-4, atol=2e-4)
    close(col2, rcol2, rtol=1e-4, atol=1e-4)


def test_module_text_and_version(gen):
    text = """module @m {
  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.sine %a : tensor<4xf32>
    %1 = stablehlo.multiply %0, %b : tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}"""
    a, b = torch.randn(4, generator=gen), torch.randn(4, generator=gen)
    (out,) = run_on_torch_xla(text, a.to(DEV), b.to(DEV))
    close(out, torch.sin(a) * b)
    major, minor, patch = (int(p) for p in torch_xla_stablehlo_version().split("."))
    assert major >= 1 and minor >= 0 and patch >= 0


def test_named_errors(gen):
    prog, (x, b, w) = _program(gen)
    adapter = TorchXlaProgram(prog)
    with pytest.raises(hb.ArgumentError, match="xla tensors"):
        adapter(x, b, w)
    with pytest.raises(hb.ArgumentError, match="takes 3 inputs, got 2"):
        adapter(x.to(DEV), b.to(DEV))
    with pytest.raises(hb.ArgumentError, match="shape"):
        adapter(x.to(DEV), b.to(DEV), w[:64].to(DEV))
    with pytest.raises(hb.DtypeError, match="dtype"):
        adapter(x.to(DEV), b.to(DEV), w.double().to(DEV))
    with pytest.raises(hb.ArgumentError, match="StitchedProgram or module text"):
        TorchXlaProgram(42)
    with pytest.raises(hb.CompileError, match="portable artifact"):
        run_on_torch_xla("module { this is not mlir }", x.to(DEV))


def test_a_tpu_kernel_is_refused_on_the_cpu_runtime(gen):
    from pallas_kernels import pallas_add

    a, c = torch.randn(8, 128, generator=gen), torch.randn(8, 128, generator=gen)
    seg = hb.trace_pallas(pallas_add, a, c, target="tpu")
    prog = hb.stitch_program([("a", ttype(a)), ("c", ttype(c))], [(seg, ["a", "c"], ["z"])], ["z"])
    with pytest.raises(hb.PallasLoweringError, match="torch_xla's cpu runtime"):
        TorchXlaProgram(prog)(a.to(DEV), c.to(DEV))


def test_stitched_program_run_dispatches_xla_tensors(gen):
    """``StitchedProgram.run`` on xla tensors goes through the adapter
    (``hb.devices.DeviceProgram``), not the CPU runtime."""
    prog, (x, b, w) = _program(gen)
    z, col = prog.run(x.to(DEV), b.to(DEV), w.to(DEV))
    assert z.device.type == "xla"
    rz, rcol = jax.jit(_reference)(x.numpy(), b.numpy(), w.numpy())
    close(z, rz, rtol=1e-4, atol=1e-4)
    close(col, rcol, rtol=1e-4, atol=1e-4)
    assert hb.devices.DeviceProgram is not None and hb.tpu_adapter.TorchXlaProgram is TorchXlaProgram
