"""Matrix products on the CPU plugin through hlobridge's host GEMM kernels
(``hlobridge_gemm_*`` FFI custom calls, see ``pjrt-client/src/host_kernels``
and ``bridge/core/src/lower/host_gemm.rs``).

Every test checks numerics against torch eager on fresh random inputs
(seed printed on failure, ``HLOBRIDGE_TEST_SEED`` replays), and that the
kernels were actually used (the ``host_gemm_calls`` counter). Tolerances:
float32 products of length K ≤ 128 are compared with rtol=1e-4,
atol=1e-4·sqrt(128) (two different summation orders of K terms of magnitude ~1).
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax.numpy as jnp
import pytest
import torch

import hlobridge as hb
from hlobridge import _native

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))


def gen() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


def close(got: torch.Tensor, want: torch.Tensor, k: int) -> None:
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * k**0.5,
                               msg=lambda m: f"seed {SEED}: {m}")


def gemm_calls() -> int:
    return _native.stats()["host_gemm_calls"]


@pytest.mark.parametrize(
    "fn, tfn, shapes",
    [
        (lambda a, b: a @ b, lambda a, b: a @ b, [(96, 80), (80, 112)]),
        (lambda a, b: a.T @ b, lambda a, b: a.T @ b, [(80, 96), (80, 112)]),
        (lambda a, b: a @ b.T, lambda a, b: a @ b.T, [(96, 80), (112, 80)]),
        (lambda a, b: a.T @ b.T, lambda a, b: a.T @ b.T, [(80, 96), (112, 80)]),
        (jnp.matmul, torch.matmul, [(3, 64, 40), (3, 40, 72)]),
        (lambda a, b: jnp.einsum("bkm,bnk->bmn", a, b),
         lambda a, b: torch.einsum("bkm,bnk->bmn", a, b), [(2, 48, 64), (2, 56, 48)]),
        # torch Linear on a 3-D activation: [B, S, D] . [D, E]
        (lambda a, b: a @ b, lambda a, b: a @ b, [(4, 32, 64), (64, 48)]),
        # its weight gradient: contract over batch and sequence
        (lambda a, b: jnp.einsum("bsd,bse->de", a, b),
         lambda a, b: torch.einsum("bsd,bse->de", a, b), [(4, 32, 64), (4, 32, 48)]),
        (lambda a, b: jnp.einsum("sd,dhk->shk", a, b),
         lambda a, b: torch.einsum("sd,dhk->shk", a, b), [(96, 64), (64, 6, 8)]),
    ],
    ids=["nn", "tn", "nt", "tt", "batched", "batched-tt", "linear-3d", "weight-grad-3d", "two-free-dims"],
)
def test_products_match_torch_and_use_the_kernels(fn, tfn, shapes) -> None:
    g = gen()
    a, b = (torch.randn(*s, generator=g) for s in shapes)
    before = gemm_calls()
    got = hb.call_jax(fn, a, b)
    close(got, tfn(a, b), 128)  # the largest contraction among the cases
    assert gemm_calls() > before, "the product was not compiled as a host GEMM call"


def test_gradients_of_a_layer_match_torch_autograd() -> None:
    g = gen()
    x = torch.randn(64, 128, generator=g, requires_grad=True)
    w = torch.randn(128, 96, generator=g, requires_grad=True)

    def layer(x, w):
        return jnp.tanh(x @ w).sum() * 0.5

    before = gemm_calls()
    y = hb.call_jax(layer, x, w)
    y.backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    (torch.tanh(x2 @ w2).sum() * 0.5).backward()
    close(x.grad, x2.grad, 96)
    close(w.grad, w2.grad, 64)
    assert gemm_calls() >= before + 3, "forward and both backward products should use the kernel"


def test_turning_the_rewrite_off_compiles_a_separate_program() -> None:
    """The lowering is part of the compile-cache key: the same module with
    HLOBRIDGE_HOST_GEMM=off compiles again (no cache hit) and gives the same
    numbers."""
    g = gen()
    a, b = torch.randn(128, 128, generator=g), torch.randn(128, 128, generator=g)
    text = (
        "func.func public @main(%a: tensor<128x128xf32>, %b: tensor<128x128xf32>) -> tensor<128x128xf32> {\n"
        "  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : "
        "(tensor<128x128xf32>, tensor<128x128xf32>) -> tensor<128x128xf32>\n"
        "  return %0 : tensor<128x128xf32>\n}"
    )
    ptrs, shapes, codes = [a.data_ptr(), b.data_ptr()], [(128, 128)] * 2, [_native.ELEMENT_TYPES["f32"]] * 2
    outs = []
    old = os.environ.get("HLOBRIDGE_HOST_GEMM")
    try:
        for mode in ("on", "off"):
            os.environ["HLOBRIDGE_HOST_GEMM"] = mode
            before = gemm_calls()
            exe, hit = _native.compile(text)
            assert not hit or mode == "on", "the un-lowered program was served from the lowered one's cache entry"
            rewrote = gemm_calls() - before
            if not exe.from_disk_cache and not hit:
                assert rewrote == (1 if mode == "on" else 0), (mode, rewrote)
            caps, *_ = _native.execute(exe, ptrs, shapes, codes, [a, b])
            outs.append(torch.from_dlpack(caps[0]).clone())
    finally:
        if old is None:
            os.environ.pop("HLOBRIDGE_HOST_GEMM", None)
        else:
            os.environ["HLOBRIDGE_HOST_GEMM"] = old
    close(outs[0], a @ b, 128)
    close(outs[1], a @ b, 128)


def test_the_kernels_can_be_disabled_for_the_process() -> None:
    """HLOBRIDGE_HOST_KERNELS=0: nothing is registered and no product is rewritten."""
    code = (
        "import torch, hlobridge as hb\n"
        "from hlobridge import _native\n"
        "a = torch.randn(128, 128); b = torch.randn(128, 128)\n"
        "y = hb.call_jax(lambda x, w: x @ w, a, b)\n"
        "torch.testing.assert_close(y, a @ b, rtol=1e-4, atol=2e-3)\n"
        "print(_native.stats()['host_gemm_calls'])\n"
    )
    env = dict(os.environ, HLOBRIDGE_HOST_KERNELS="0", HLOBRIDGE_CACHE="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out.strip().splitlines()[-1] == "0"


def test_the_mkl_kernel_matches_float64() -> None:
    """HLOBRIDGE_GEMM_KERNEL=mkl with every product on the host kernel: the process finds
    PyTorch's MKL, and products split over the cores (MKL's own threads), batched ones
    (single-threaded MKL calls), transposed operands and f64 match float64 torch."""
    code = (
        "import torch, jax, hlobridge as hb\n"
        "from hlobridge import _native\n"
        "jax.config.update('jax_enable_x64', True)\n"
        "assert _native.host_gemm_kernel() == 'mkl', _native.host_gemm_kernel()\n"
        "g = torch.Generator().manual_seed(1234)\n"
        "cases = [((512, 768), (768, 640), False), ((512, 768), (640, 768), True),\n"
        "         ((6, 128, 64), (6, 64, 96), False), ((300, 200), (200, 100), False)]\n"
        "for (sa, sb, t) in cases:\n"
        "    for dt in (torch.float32, torch.float64):\n"
        "        a = torch.randn(*sa, generator=g, dtype=dt); b = torch.randn(*sb, generator=g, dtype=dt)\n"
        "        f = (lambda x, w: x @ w.T) if t else (lambda x, w: x @ w)\n"
        "        y = hb.call_jax(f, a, b)\n"
        "        want = f(a.double(), b.double())\n"
        "        k = sa[-1]\n"
        "        eps = 2.0 ** (-24 if dt == torch.float32 else -53)\n"
        "        err = ((y.double() - want).abs().max() / want.abs().max()).item()\n"
        "        assert err <= 4 * eps * k ** 0.5, (sa, sb, t, dt, err)\n"
        "print(_native.stats()['host_gemm_calls'])\n"
    )
    env = dict(os.environ, HLOBRIDGE_GEMM_KERNEL="mkl", HLOBRIDGE_HOST_GEMM="all",
               HLOBRIDGE_ONEDNN_MATMUL="0", HLOBRIDGE_CACHE="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.strip().splitlines()[-1]) >= 8


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_half_precision_products_match_torch(dtype) -> None:
    """bf16/f16 products are widened to f32 and rounded once (as XLA:CPU
    and torch's CPU kernels do); tolerance: two units in the last place of
    the result type (bf16 2^-7, f16 2^-10, relative) plus summation-order
    noise of f32 over K=96."""
    g = gen()
    a = torch.randn(64, 96, generator=g).to(dtype)
    b = torch.randn(96, 80, generator=g).to(dtype)
    before = gemm_calls()
    got = hb.call_jax(lambda x, y: x @ y, a, b)
    assert got.dtype == dtype
    want = (a.float() @ b.float()).to(dtype)
    ulp = 2.0**-7 if dtype == torch.bfloat16 else 2.0**-10
    torch.testing.assert_close(got.float(), want.float(), rtol=2 * ulp, atol=1e-3,
                               msg=lambda m: f"seed {SEED}: {m}")
    assert gemm_calls() > before


def test_skinny_product_with_a_large_transposed_weight_runs_swapped() -> None:
    """A decode step's LM head, ``x · Wᵀ`` with 4 rows and a weight of 2²⁴
    elements, runs on the kernel as ``(W · xᵀ)ᵀ`` (XLA's dot is several
    times slower there); under torch.compile as in a model. K = 512:
    tolerance atol 1e-4·sqrt(512)."""
    g = gen()
    x = torch.randn(4, 512, generator=g)
    w = torch.randn(1 << 15, 512, generator=g)
    fn = torch.compile(lambda x, w: x @ w.t(), backend="hlobridge", dynamic=False)
    before = gemm_calls()
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(fn(x, w), (x.double() @ w.double().t()).float(),
                                       rtol=1e-4, atol=1e-4 * 512**0.5,
                                       msg=lambda m: f"seed {SEED}: {m}")
            x = torch.randn(4, 512, generator=g)
    assert gemm_calls() > before, "the product was not compiled as a host GEMM call"
