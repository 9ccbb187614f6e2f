"""The first eager ``call_jax`` stays light, and what goes wrong around
``call_jax`` is named with the fix, in ``str(e)``:

- an eager ``call_jax`` never imports ``torch._dynamo`` or sympy (seconds of
  import), and ``torch.compile`` still captures ``call_jax`` as one node when
  Dynamo is imported afterwards (checked in a new process);
- a JAX shape error keeps its type, and hlobridge's note (which function,
  which input shapes) is in ``str(e)``, eagerly and under ``torch.compile``;
- ``torch.compile(dynamic=True)`` with ``call_jax`` in the graph specializes
  the JAX inputs' sizes (a JAX program has static shapes) and gives JAX's
  results for each shape;
- ``hb.compile_for("cuda:h100", kernel_fn, ...)`` on a Pallas kernel that
  JAX's Mosaic GPU lowering refuses raises
  :class:`hlobridge.pallas.PallasLoweringError` with the fix (lower it with
  Triton), not a raw ``NotImplementedError``;
- :class:`hlobridge.CapturedTensorError` pickles.

Inputs are fresh random each run (the seed is printed in failure messages;
set HLOBRIDGE_TEST_SEED to replay); results are compared with JAX on the
same inputs at rtol=1e-5, atol=1e-6 (float32, XLA CPU on both sides).

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_first_call_errors.py -q
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest
import torch

import hlobridge as hb
from jax_compare import close, fresh, jax_ref  # noqa: F401 (fresh: autouse fixture)


def test_eager_call_jax_does_not_import_dynamo_and_compile_still_captures_it() -> None:
    code = textwrap.dedent("""
        import sys
        import torch, jax.numpy as jnp
        import hlobridge as hb
        x = torch.randn(3, 4)
        out = hb.call_jax(lambda a: jnp.sin(a) * 2.0, x)
        assert torch.allclose(out, torch.sin(x) * 2.0, rtol=1e-5, atol=1e-6)
        print("dynamo", "torch._dynamo" in sys.modules, "sympy", "sympy" in sys.modules)
        # Dynamo imported only now: call_jax is still one graph node.
        c = torch.compile(lambda a: hb.call_jax(lambda u: jnp.cos(u) + 1.0, a) * 3.0,
                          backend="hlobridge", fullgraph=True)
        assert torch.allclose(c(x), (torch.cos(x) + 1.0) * 3.0, rtol=1e-5, atol=1e-6)
        print("compiled ok")
    """)
    env = {**os.environ, "PJRT_DEVICE": "CPU"}
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert "dynamo False sympy False" in lines, r.stdout
    assert lines[-1] == "compiled ok"


def test_shape_error_note_is_in_str_eager_and_compiled() -> None:
    a, b = torch.randn(3, 4), torch.randn(5, 6)

    def matmul(u: jax.Array, v: jax.Array) -> jax.Array:
        return u @ v

    with pytest.raises(TypeError) as info:
        hb.call_jax(matmul, a, b)
    msg = str(info.value)
    assert "dot_general" in msg and "hlobridge.call_jax" in msg and "matmul" in msg
    assert "[3, 4]" in msg and "[5, 6]" in msg
    with pytest.raises(Exception) as info2:
        torch.compile(lambda u, v: hb.call_jax(matmul, u, v), backend="hlobridge",
                      fullgraph=True)(a, b)
    msg = str(info2.value)
    assert "TypeError" in msg and "dot_general" in msg and "hlobridge.call_jax" in msg, msg
    assert "[3, 4]" in msg and "[5, 6]" in msg, msg


def test_dynamic_true_specializes_call_jax_inputs() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return hb.call_jax(jnp.sin, x * 2.0) + 1.0

    c = torch.compile(f, backend="hlobridge", dynamic=True)
    for shape in [(5, 3), (7, 3), (5, 3)]:
        x = torch.randn(*shape)
        got = c(x)
        close(got, jax_ref(lambda u: jnp.sin(u * 2.0) + 1.0, x), f"shape {shape}")


# JAX warns that pallas_call for Mosaic GPU is deprecated (its choice here).
@pytest.mark.filterwarnings("ignore:Using ``pl.pallas_call`` for Mosaic GPU:DeprecationWarning")
def test_compile_for_cuda_pallas_kernel_mosaic_gpu_refuses_is_named() -> None:
    from jax.experimental import pallas as pl

    def row_sum(x_ref, o_ref):  # type: ignore[no-untyped-def]
        o_ref[...] = jnp.sum(x_ref[...], axis=1)

    def kernel_fn(x: jax.Array) -> jax.Array:
        return pl.pallas_call(row_sum, out_shape=jax.ShapeDtypeStruct((x.shape[0],), x.dtype))(x)

    x = torch.randn(16, 128)
    with pytest.raises(hb.pallas.PallasLoweringError) as info:
        hb.compile_for("cuda:h100", kernel_fn, x)
    err = info.value
    assert err.kernel == "row_sum" and err.target == "cuda"
    msg = str(err)
    assert "No support for axes yet" in msg and "Mosaic GPU" in msg
    assert "triton.CompilerParams()" in msg and "backend='triton'" in msg
    # The same error pickles (errors cross process boundaries).
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and str(back) == msg and back.kernel == "row_sum"


def test_captured_tensor_error_pickles() -> None:
    t = torch.randn(3)
    with pytest.raises(hb.CapturedTensorError) as info:
        hb.call_jax(lambda a: a * t, torch.randn(3))
    back = pickle.loads(pickle.dumps(info.value))
    assert type(back) is hb.CapturedTensorError and str(back) == str(info.value)
    assert "pass it as an argument" in str(back).lower()
