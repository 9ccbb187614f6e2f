"""The CUDA run path (`hlobridge.devices`): runtime choice, the CUDA client's
options, DLPack in and out, and its named errors.

Everything that needs no GPU runs here on the CPU runtime, through the same
native DLPack import as a CUDA tensor (`_native.execute_dlpack`): a stitched
torch + JAX program on CPU tensors against hlobridge's own runtime and eager
jax (float32, rtol=1e-5, atol=1e-5), zero-copy inputs, a CUDA tensor given to
the CPU runtime refused by name, and the CUDA client failing by name without
its plugin or a GPU. The tests marked ``gpu`` skip with their reason when
``torch.cuda.is_available()`` is false; ``tests/gpu/run.sh`` runs them on a
GPU machine against torch CUDA eager.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest
import torch

import hlobridge as hb
from hlobridge import _native
from hlobridge._src.cuda_call import call_jax_cuda
from hlobridge.devices import DeviceProgram, cuda_client_options, device_of, run, runtime

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
HAS_CUDA = torch.cuda.is_available()
# tests/gpu/run.sh sets HLOBRIDGE_GPU_REQUIRED=1: there a missing GPU fails
# the GPU tests instead of skipping them.
gpu = pytest.mark.skipif(not HAS_CUDA and os.environ.get("HLOBRIDGE_GPU_REQUIRED") != "1", reason="no CUDA GPU here (torch.cuda.is_available() is False); "
                         "tests/gpu/run.sh runs these on a GPU machine")


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


def close(a: torch.Tensor, b, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    torch.testing.assert_close(a.cpu(), torch.as_tensor(b).cpu(), rtol=rtol, atol=atol,
                               msg=lambda m: f"seed={SEED}: {m}")


def _jax_fn(x, w):
    # HIGHEST: full float32 products on a GPU too (XLA's default there is
    # TF32), like torch's eager matmul, so the tolerances stay tight.
    return jnp.tanh(jnp.dot(x, w, precision=jax.lax.Precision.HIGHEST)) * 2.0, jnp.sum(x, axis=0)


def _jax_text(x: torch.Tensor, w: torch.Tensor, platform: str = "cpu") -> str:
    sds = [jax.ShapeDtypeStruct(tuple(t.shape), jnp.float32) for t in (x, w)]
    return jax.jit(_jax_fn).trace(*sds).lower(lowering_platforms=(platform,)).as_text()


def _stitched(x: torch.Tensor, w: torch.Tensor):
    """torch (x * 0.5 + 1, by torch.export) -> JAX, one stitched module."""
    from pallas_helpers import torch_segment, ttype

    class Pre(torch.nn.Module):
        def forward(self, x):
            return x * 0.5 + 1.0

    pre, pre_in = torch_segment(Pre(), ["x"], (x,))
    return hb.stitch_program(
        [("x", ttype(x)), ("w", ttype(w))],
        [("pre", "torch", pre, "main", pre_in, ["h"]),
         ("f", "jax", _jax_text(x, w), "main", ["h", "w"], ["y", "s"])],
        ["y", "s"])


# --- options (no GPU needed) ---------------------------------------------------


def test_cuda_client_options_defaults_overrides_and_env(monkeypatch):
    for k in ("HLOBRIDGE_CUDA_ALLOCATOR", "HLOBRIDGE_CUDA_MEMORY_FRACTION", "HLOBRIDGE_CUDA_PREALLOCATE",
              "HLOBRIDGE_CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(k, raising=False)
    assert cuda_client_options() == {"allocator": "bfc", "memory_fraction": 0.75, "preallocate": False}
    o = cuda_client_options(allocator="cuda_async", memory_fraction=0.5, visible_devices=[1],
                            node_id=0, num_nodes=2, collective_memory_size=1 << 20, platform_name="cuda",
                            stage_host_to_device=False)
    assert o == {"allocator": "cuda_async", "memory_fraction": 0.5, "preallocate": False,
                 "visible_devices": [1], "node_id": 0, "num_nodes": 2,
                 "collective_memory_size": 1 << 20, "platform_name": "cuda",
                 "should_stage_host_to_device_transfers": False}
    monkeypatch.setenv("HLOBRIDGE_CUDA_ALLOCATOR", "platform")
    monkeypatch.setenv("HLOBRIDGE_CUDA_VISIBLE_DEVICES", "0,2")
    assert cuda_client_options()["allocator"] == "platform"
    assert cuda_client_options()["visible_devices"] == [0, 2]
    monkeypatch.setenv("HLOBRIDGE_CUDA_MEMORY_FRACTION", "2")
    with pytest.raises(hb.ArgumentError, match="memory_fraction"):
        cuda_client_options()


@pytest.mark.parametrize("bad,match", [
    ({"allocator": "tlsf"}, "allocator"),
    ({"memory_fraction": 0.0}, "memory_fraction"),
    ({"memory_fraction": "half"}, "expected a float"),
    ({"visible_devices": [0, 0]}, "distinct"),
    ({"node_id": 1}, "together"),
    ({"node_id": 2, "num_nodes": 2}, "node_id"),
    ({"prealocate": True}, "unknown CUDA option"),
])
def test_bad_cuda_options_are_named_errors(bad, match):
    with pytest.raises(hb.ArgumentError, match=match):
        cuda_client_options(**bad)


def test_runtime_names():
    assert runtime("cpu").platform == "cpu"
    with pytest.raises(hb.ArgumentError, match="tpu_adapter"):
        runtime("tpu")
    with pytest.raises(hb.ArgumentError, match="unknown runtime"):
        runtime("metal")
    with pytest.raises(hb.ArgumentError, match="no options"):
        runtime("cpu", memory_fraction=0.5)


@pytest.mark.skipif(HAS_CUDA, reason="checks the failure without a GPU")
def test_cuda_runtime_without_gpu_is_a_named_error():
    # A subprocess: loading the CUDA plugin sets XLA_FLAGS for ptxas.
    code = ("import json, hlobridge as hb\n"
            "from hlobridge.devices import runtime\n"
            "try:\n    runtime('cuda')\n    print(json.dumps(['ok', '']))\n"
            "except hb.BridgeError as e:\n    print(json.dumps([type(e).__name__, str(e)]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    kind, msg = json.loads(out.stdout.strip().splitlines()[-1])
    assert kind in ("PluginNotFoundError", "PjrtError"), (kind, msg)
    if kind == "PjrtError":
        assert "PJRT_Client_Create" in msg, msg
    else:
        assert "CUDA" in msg, msg


# --- DLPack path on the CPU runtime ---------------------------------------------


def test_stitched_program_through_dlpack_on_cpu(gen):
    x, w = torch.randn(16, 32, generator=gen), torch.randn(32, 8, generator=gen)
    prog = _stitched(x, w)
    dp = DeviceProgram(prog)
    y, s = dp(x, w)
    r = hb.last_receipt()
    assert r is not None and r.platform == "cpu" and r.input_views == 2 and r.input_copies == 0
    assert r.output_pointers == (y.data_ptr(), s.data_ptr())
    own_y, own_s = prog.run(x, w)
    ry, rs = jax.jit(_jax_fn)(x.numpy() * 0.5 + 1.0, w.numpy())
    close(y, own_y)
    close(s, own_s)
    close(y, ry)
    close(s, rs)
    # Fresh inputs, one of them a non-contiguous view (made dense first).
    x2, w2 = torch.randn(32, 16, generator=gen).t(), torch.randn(32, 8, generator=gen)
    y2, s2 = run(prog, x2, w2)
    ry2, rs2 = jax.jit(_jax_fn)(x2.numpy() * 0.5 + 1.0, w2.numpy())
    close(y2, ry2)
    close(s2, rs2)


def test_unaligned_cpu_input_is_copied(gen):
    base = torch.randn(16 * 32 + 1, generator=gen)
    x = base[1:].view(16, 32)  # 4 bytes past a 64-byte boundary
    w = torch.randn(32, 8, generator=gen)
    y, _ = DeviceProgram(_jax_text(x, w))(x, w)
    r = hb.last_receipt()
    assert r is not None and (r.input_views, r.input_copies) == (1, 1)
    close(y, jax.jit(_jax_fn)(x.numpy(), w.numpy())[0])


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _DELETER)]


def _fake_cuda_capsule(shape: tuple[int, ...], deleted: list[int]) -> tuple[object, list[object]]:
    """A ``dltensor`` capsule claiming float32 data on CUDA device 0 at an
    address nobody may read: the import must refuse it before any access."""
    dims = (ctypes.c_int64 * len(shape))(*shape)

    @_DELETER
    def deleter(_p):  # type: ignore[no-untyped-def]
        deleted.append(1)

    mt = _DLManagedTensor()
    mt.dl_tensor = _DLTensor(ctypes.c_void_p(0x7F00DEAD0000), _DLDevice(2, 0), len(shape),
                             _DLDataType(2, 32, 1), dims, None, 0)
    mt.deleter = deleter
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    cap = new(ctypes.addressof(mt), b"dltensor", None)
    return cap, [mt, dims, deleter]


def test_a_cuda_tensor_on_the_cpu_runtime_is_a_named_error(gen):
    x, w = torch.randn(16, 32, generator=gen), torch.randn(32, 8, generator=gen)
    exe, _ = _native.compile(_jax_text(x, w))
    deleted: list[int] = []
    cap, keep = _fake_cuda_capsule((16, 32), deleted)
    from torch.utils.dlpack import to_dlpack

    with pytest.raises(hb.ArgumentError, match=r"input 0: .*cuda device 0.*cpu plugin"):
        _native.execute_dlpack(exe, [cap, to_dlpack(w)])
    assert deleted == [1], "the refused tensor's deleter ran once"
    # The capsule was consumed: handing it again is refused.
    with pytest.raises(hb.ArgumentError, match="unconsumed DLPack capsule"):
        _native.execute_dlpack(exe, [cap, to_dlpack(w)])
    with pytest.raises(hb.ArgumentError, match="unconsumed DLPack capsule"):
        _native.execute_dlpack(exe, [x, w])
    del keep


def test_device_choice_errors(gen):
    x = torch.randn(4, generator=gen)
    with pytest.raises(hb.ArgumentError, match="different devices"):
        device_of([x, torch.empty(4, device="meta")])
    text = _jax_text(torch.randn(16, 32), torch.randn(32, 8))
    with pytest.raises(hb.ArgumentError, match="runs programs on cpu and cuda"):
        DeviceProgram(text)(torch.empty(16, 32, device="meta"), torch.empty(32, 8, device="meta"))
    with pytest.raises(hb.ArgumentError, match="module text or a StitchedProgram"):
        DeviceProgram(3)


def test_a_cuda_kernel_is_refused_on_the_cpu_runtime(gen):
    from pallas_helpers import ttype
    from pallas_kernels import pallas_add

    a, c = torch.randn(8, 128, generator=gen), torch.randn(8, 128, generator=gen)
    seg = hb.trace_pallas(pallas_add, a, c, target="cuda", backend="triton")
    prog = hb.stitch_program([("a", ttype(a)), ("c", ttype(c))], [(seg, ["a", "c"], ["z"])], ["z"])
    with pytest.raises(hb.PallasLoweringError, match="cpu runtime cannot run"):
        DeviceProgram(prog)(a, c)


def test_jax_functions_lower_for_cuda_here(gen):
    """The lowering half of call_jax_cuda runs without a GPU: the module is
    lowered for the cuda platform, with no host rewrite."""
    from jax import tree_util

    from hlobridge._src.lowering import lower

    x, w = torch.randn(16, 32, generator=gen), torch.randn(32, 8, generator=gen)
    leaves, treedef = tree_util.tree_flatten(((x, w), {}))
    low = lower(_jax_fn, treedef, leaves, "cuda")
    assert "stablehlo.dot_general" in low.text and "custom_call" not in low.text
    assert low.out_tree.num_leaves == 2


# --- on a GPU (skip here) -----------------------------------------------------


@gpu
def test_gpu_stitched_program_matches_torch_cuda_eager(gen):
    pytest.importorskip("torch_xla", reason="the torch segment is exported through torch_xla")
    x, w = torch.randn(64, 128, generator=gen), torch.randn(128, 32, generator=gen)
    prog = _stitched(x, w)
    dp = DeviceProgram(prog)
    xc, wc = x.cuda(), w.cuda()
    y, s = dp(xc, wc)
    assert y.device == xc.device and s.device == xc.device
    r = hb.last_receipt()
    assert r is not None and r.platform == "cuda" and (r.input_views, r.input_copies) == (2, 0)
    h = xc * 0.5 + 1.0
    close(y, torch.tanh(h @ wc) * 2.0, rtol=1e-4, atol=1e-4)  # GEMM sum orders differ
    close(s, h.sum(0), rtol=1e-5, atol=1e-4)


@gpu
def test_gpu_inputs_from_a_pending_stream_and_freed_after(gen):
    """The input is the result of a large matmul still queued on torch's
    stream when the program is called, and is freed right after: the stream
    sync and the view lifetimes make both safe."""
    dp = DeviceProgram(_jax_text(torch.empty(1024, 1024), torch.empty(1024, 64)))
    a = torch.randn(1024, 1024, device="cuda", generator=torch.Generator("cuda").manual_seed(SEED))
    w = torch.randn(1024, 64, device="cuda", generator=torch.Generator("cuda").manual_seed(SEED + 1))
    for _ in range(3):
        x = (a @ a) / 1024.0
        y, s = dp(x, w)
        ref_y, ref_s = torch.tanh(x @ w) * 2.0, x.sum(0)
        del x
        junk = torch.full((1024, 1024), float("nan"), device="cuda")  # reuses the freed block
        close(y, ref_y, rtol=1e-3, atol=1e-3)
        close(s, ref_s, rtol=1e-4, atol=1e-3)
        del junk


@gpu
def test_gpu_call_jax(gen):
    x, w = torch.randn(64, 128, generator=gen).cuda(), torch.randn(128, 32, generator=gen).cuda()
    y, s = call_jax_cuda(_jax_fn, x, w)
    close(y, torch.tanh(x @ w) * 2.0, rtol=1e-4, atol=1e-4)
    close(s, x.sum(0), rtol=1e-5, atol=1e-4)
    y2, s2 = hb.call_jax(_jax_fn, x, w)  # routed to the CUDA path by device
    assert y2.is_cuda
    close(y2, y, rtol=0, atol=0)
    with pytest.raises(hb.ArgumentError, match="requires grad"):
        call_jax_cuda(_jax_fn, x.requires_grad_(), w)
