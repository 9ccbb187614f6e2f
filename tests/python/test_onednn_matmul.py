"""Matrix products on the CPU plugin's oneDNN matrix product
(``__onednn$matmul``, written by the host GEMM rewrite,
``bridge/core/src/lower/host_gemm.rs``; docs/host_gemm.md).

Each case is a JAX product exported to StableHLO, compiled by the compile
service with ``HLOBRIDGE_ONEDNN_MATMUL=1`` (which must route it to oneDNN,
or not, as stated) and run on fresh random inputs against torch in float64.
The tolerance is float32 accumulation (``2e-6 * sqrt(K)`` relative to the
result's scale): a bf16 down-conversion inside oneDNN
(``ONEDNN_DEFAULT_FPMATH_MODE``) would be about 1000 times larger, and a
transposed or misread operand is wrong by the result's own scale. Also:
``0`` keeps the host kernel or XLA, ``auto`` follows the CPU's vendor, a
program with oneDNN calls is not written to the disk cache, ``compile_for``
still serializes, and a torch.compile'd training step agrees with eager.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest
import torch

from hlobridge import _native

from onednn_helpers import check_accumulation, run_f32

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
ONEDNN = "__onednn$matmul"


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


# (name, lhs shape, rhs shape, torch form of the product, contracted size,
#  oneDNN calls). The JAX function is the same product written with einsum or
#  transposes, so the exported dot_general carries each layout.
CASES = [
    ("nn", (512, 384), (384, 256), "ab,bc->ac", 384, 1),
    ("nt-linear", (512, 384), (256, 384), "ab,cb->ac", 384, 1),
    ("tn-weight-grad", (384, 512), (384, 256), "ba,bc->ac", 384, 1),
    ("tt", (384, 512), (256, 384), "ba,cb->ac", 384, 1),
    ("batched-qk", (24, 128, 64), (24, 128, 64), "hqd,hkd->hqk", 64, 1),
    ("batched-pv", (24, 128, 128), (24, 128, 64), "hqk,hkd->hqd", 128, 1),
    ("linear-3d-input", (4, 128, 384), (256, 384), "bsd,ed->bse", 384, 1),
    ("two-batch-dims", (2, 12, 128, 64), (2, 12, 128, 64), "bhqd,bhkd->bhqk", 64, 1),
    # A right operand stored [K, N] with N >= 2560 is re-oriented
    # (docs/host_gemm.md, "Orientation"): split into 1024-column blocks
    # (1024, 1024 and 512 of 2560; three of 3072), one call each, or the
    # product run swapped when the left one is stored transposed.
    ("nn-wide-rhs-split", (1024, 384), (384, 2560), "ab,bc->ac", 384, 3),
    ("nn-wide-rhs-split-512-rows", (512, 384), (384, 3072), "ab,bc->ac", 384, 3),
    ("batched-nn-wide-split", (2, 256, 384), (2, 384, 3072), "hab,hbc->hac", 384, 3),
    ("nn-wide-few-rows", (64, 384), (384, 3072), "ab,bc->ac", 384, 1),
    ("tn-wide-swapped", (384, 256), (384, 2560), "ba,bc->ac", 384, 1),
    ("tn-wide-split", (384, 2560), (384, 2560), "ba,bc->ac", 384, 3),
    ("batched-tn-wide-swapped", (2, 384, 64), (2, 384, 2560), "hba,hbc->hac", 384, 1),
    # Below oneDNN's bound (256³): the host kernel keeps it.
    ("small", (128, 128), (128, 128), "ab,bc->ac", 128, 0),
    # A matrix-vector product stays with XLA.
    ("matvec", (1024, 1024), (1024, 1), "ab,bc->ac", 1024, 0),
]


def _stablehlo(ls, rs, eq) -> str:
    f = lambda a, b: jnp.einsum(eq, a, b, precision=jax.lax.Precision.HIGHEST)  # noqa: E731
    args = (jax.ShapeDtypeStruct(ls, jnp.float32), jax.ShapeDtypeStruct(rs, jnp.float32))
    return jax.jit(f).lower(*args).as_text()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_product_against_float64(case, monkeypatch) -> None:
    name, ls, rs, eq, k, calls = case
    monkeypatch.setenv("HLOBRIDGE_ONEDNN_MATMUL", "1")
    exe, _ = _native.compile(_stablehlo(ls, rs, eq))
    assert exe.host_kernels.get(ONEDNN, 0) == calls, exe.host_kernels
    g = _gen()
    a = torch.randn(ls, generator=g)
    b = torch.randn(rs, generator=g)
    want = torch.einsum(eq, a.double(), b.double())
    check_accumulation(run_f32(exe, a, b), want, k, f"seed {SEED}, {name}")


def test_reoriented_addmm_with_its_bias(monkeypatch) -> None:
    """``addmm(b, x, W)`` with ``W`` stored ``[K, N]`` (a GPT-2 ``Conv1D``),
    ``N = 2560`` and 512 rows: split into three column blocks, each call
    with its slice of the bias folded into its ``BIAS`` post-op (three
    calls, no separate add); checked against float64, compiled directly
    and through torch.compile."""
    monkeypatch.setenv("HLOBRIDGE_ONEDNN_MATMUL", "1")
    g = _gen()
    x, w, b = (torch.randn(s, generator=g) for s in ((512, 384), (384, 2560), (2560,)))
    want = torch.addmm(b.double(), x.double(), w.double())
    text = jax.jit(lambda x, w, b: jnp.matmul(x, w, precision=jax.lax.Precision.HIGHEST) + b).lower(
        *(jax.ShapeDtypeStruct(t.shape, jnp.float32) for t in (x, w, b))).as_text()
    exe, _ = _native.compile(text)
    assert exe.host_kernels.get(ONEDNN, 0) == 3, exe.host_kernels
    check_accumulation(run_f32(exe, x, w, b), want, 384, f"seed {SEED}, x @ w + b")
    f = torch.compile(lambda x, w, b: torch.addmm(b, x, w), backend="hlobridge", dynamic=False)
    check_accumulation(f(x, w, b), want, 384, f"seed {SEED}, addmm")


def test_switch_off_keeps_the_host_kernel(monkeypatch) -> None:
    monkeypatch.setenv("HLOBRIDGE_ONEDNN_MATMUL", "0")
    exe, _ = _native.compile(_stablehlo((512, 384), (384, 256), "ab,bc->ac"))
    assert sorted(exe.host_kernels) == ["hlobridge_gemm_nn"], exe.host_kernels


def _intel() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("vendor_id") and "GenuineIntel" in line for line in f)
    except OSError:
        return False


def test_auto_follows_the_cpu_vendor(monkeypatch) -> None:
    monkeypatch.setenv("HLOBRIDGE_ONEDNN_MATMUL", "auto")
    exe, _ = _native.compile(_stablehlo((512, 384), (384, 256), "ab,bc->ac"))
    assert (ONEDNN in exe.host_kernels) == _intel(), exe.host_kernels


def _child(code: str, **env: str) -> str:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=300, env={**os.environ, **env})
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


_PROGRAM = textwrap.dedent("""
    import jax, jax.numpy as jnp
    from hlobridge import _native
    text = jax.jit(jnp.matmul).lower(jax.ShapeDtypeStruct((512, 384), jnp.float32),
                                     jax.ShapeDtypeStruct((384, 256), jnp.float32)).as_text()
""")


def test_not_written_to_the_disk_cache(tmp_path) -> None:
    code = _PROGRAM + (f"exe, _ = _native.compile(text); i = _native.compile_cache_info(); "
                       f"print(exe.host_kernels.get('{ONEDNN}'), i['disk_writes'], exe.from_disk_cache)")
    for _ in range(2):
        out = _child(code, HLOBRIDGE_ONEDNN_MATMUL="1", HLOBRIDGE_CACHE="1",
                     HLOBRIDGE_CACHE_DIR=str(tmp_path))
        assert out == "1 0 False", out


def test_compile_for_cpu_serializes_without_onednn() -> None:
    out = _child(_PROGRAM + ("r = _native.compile_for_target('cpu', text); "
                             "print(sorted(k for k, _ in r['custom_calls']))"),
                 HLOBRIDGE_ONEDNN_MATMUL="1")
    # Lowered again without the oneDNN route: the host kernel, no oneDNN call.
    assert "hlobridge_gemm_nn" in out and "onednn" not in out, out


def test_compiled_training_step_matches_float64(monkeypatch) -> None:
    """A Linear-GELU-Linear block's forward and gradients through
    torch.compile with every large product on oneDNN (the nt forward, the nn
    input gradients and the tn weight gradients), against float64 eager."""
    monkeypatch.setenv("HLOBRIDGE_ONEDNN_MATMUL", "1")
    torch._dynamo.reset()
    g = _gen()
    block = torch.nn.Sequential(torch.nn.Linear(384, 768), torch.nn.GELU(), torch.nn.Linear(768, 384))
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    x = torch.randn(4, 128, 384, generator=g)
    ref = __import__("copy").deepcopy(block).double()

    def loss_of(m, inp):
        return (m(inp) ** 2).mean()

    compiled = torch.compile(block, backend="hlobridge", fullgraph=True)
    _native.reset_stats()
    loss = loss_of(compiled, x)
    loss.backward()
    # Forward: two nt products; backward: two tn weight gradients and one
    # nn input gradient (the input needs none).
    assert _native.stats()["onednn_matmul_calls"] == 5, _native.stats()
    want = loss_of(ref, x.double())
    want.backward()
    assert abs(loss.item() - want.item()) <= 1e-5 * abs(want.item()), (loss.item(), want.item())
    for (name, p), q in zip(block.named_parameters(), ref.parameters(), strict=True):
        err = (p.grad.double() - q.grad).abs().max().item()
        scale = q.grad.abs().max().item()
        assert err <= 1e-4 * scale, f"seed {SEED}, grad of {name}: {err:.3g} at scale {scale:.3g}"
