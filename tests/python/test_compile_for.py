"""``hb.compile_for``: the programs hlobridge builds -- a torch.compile'd
torch+JAX model, the demo's whole training step, stitched Pallas kernels
(``trace_pallas(target=...)``), the ragged paged attention kernel, 4- and
8-device Shardy programs -- compiled by the real TPU compiler (libtpu, v5e
and v6e) and the real XLA GPU compiler (CUDA PJRT plugin, H100), deviceless,
on this CPU-only machine; and ``cpu`` through the runtime's client.

Checks are exact where the compiler's numbers are determined by the program
(argument / output bytes equal the program's parameter / result types; the
device count; the kernel custom calls and their backends), and the
CPU-only rewrites are shown absent for accelerators (no host GEMM call in
the compiled program) and present for ``cpu``.

The compilers come from ``scripts/setup.sh`` (``.venv/accel``). These tests
skip only when ``HLOBRIDGE_ACCEL=0`` left them out; otherwise a missing
compiler fails.
"""

from __future__ import annotations

import copy
import os
import re
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import hlobridge as hb
from hlobridge import _native
from hlobridge.pallas import trace_pallas
from hlobridge._src.stitching import stitch_program

from pallas_helpers import torch_segment, ttype
from pallas_kernels import pallas_add, pallas_matmul, pallas_softmax

ROOT = Path(__file__).resolve().parents[2]
TPUS = ["tpu:v5e", "tpu:v6e"]
ALL = [*TPUS, "cuda:h100"]
KINDS = {"tpu:v5e": "TPU v5 lite", "tpu:v6e": "TPU v6 lite", "cuda:h100": "NVIDIA H100 80GB HBM3"}
_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4, "i64": 8, "f64": 8, "i1": 1, "i8": 1, "ui8": 1}


def need(target: str) -> None:
    """Skip when HLOBRIDGE_ACCEL=0 left the target's compiler out; fail when
    it is missing otherwise."""
    found = _native.accelerators()
    have = found["libtpu"] if target.startswith("tpu") else (found["cuda_plugin"] and found["cuda_data_dir"])
    if have:
        return
    if os.environ.get("HLOBRIDGE_ACCEL") == "0":
        pytest.skip(f"{target}: the accelerator compilers are not installed (HLOBRIDGE_ACCEL=0 "
                    f"scripts/setup.sh leaves them out)")
    pytest.fail(f"{target}: compiler not installed ({found}); scripts/setup.sh installs it into .venv/accel")


def _type_bytes(t: str) -> int:
    m = re.fullmatch(r"tensor<((?:\d+x)*)([a-z0-9]+)>", t)
    assert m, t
    n = int(np.prod([int(d) for d in m.group(1).split("x") if d])) if m.group(1) else 1
    return n * _BYTES[m.group(2)]


def _main_io_bytes(text: str) -> tuple[int, int]:
    """Bytes of @main's parameters and results, from the module text."""
    sig = text[text.index("func.func public @main("):]
    sig = sig[:sig.index("{\n")]
    params, _, results = sig.partition(") -> ")
    ts = lambda s: re.findall(r"tensor<[^>]*>", re.sub(r"\{[^{}]*\}", "", s))  # noqa: E731
    return sum(map(_type_bytes, ts(params))), sum(map(_type_bytes, ts(results)))


def _main_results(text: str) -> int:
    sig = text[text.index("func.func public @main("):]
    sig = sig[:sig.index("{\n")]
    return len(re.findall(r"tensor<[^>]*>", re.sub(r"\{[^{}]*\}", "", sig.partition(") -> ")[2])))


def check(exe: hb.TargetExecutable, target: str, *, devices: int | None = None) -> None:
    """What every compile must show: the platform and device, exact argument
    and output bytes, memory within capacity, a serialized executable, and
    for accelerators no host GEMM custom call."""
    r = exe.receipt
    assert r.platform == target.split(":")[0]
    assert r.device_kind == KINDS.get(":".join(target.split(":")[:2]), r.device_kind)
    if devices is not None:
        assert r.partitions == devices and r.topology_devices >= devices
    assert exe.memory is not None
    if r.partitions == 1:
        args, outs = _main_io_bytes(exe.text)
        m = exe.memory
        if r.platform == "tpu":
            # TPU layouts pad the minor dims to (8, 128) tiles: at most 4x for
            # the narrowest minor dim used here (32 of 128 lanes).
            assert args <= m.arguments <= 4 * args + (64 << 10), (m, args)
            assert outs <= m.outputs <= 4 * outs + (64 << 10), (m, outs)
        else:
            # The GPU executable's output also holds the result tuple's index
            # table: one 8-byte pointer per result when there are several.
            n = _main_results(exe.text)
            table = 8 * n if r.platform == "cuda" and n > 1 else 0
            assert (m.arguments, m.outputs) == (args, outs + table), (m, args, outs, n)
    if r.platform == "cpu":
        assert exe.memory.capacity is None and exe.memory.total > 0
    else:
        assert exe.memory.capacity and 0 < exe.memory.total <= exe.memory.capacity
    assert len(exe.serialize()) > 1000
    assert exe.compile_time > 0
    if r.platform != "cpu":
        assert r.host_lowering == 0
        assert not any(t.startswith("hlobridge_") for t in exe.custom_calls), exe.custom_calls


# --- programs -------------------------------------------------------------------


def jax_gelu(h):
    return jax.nn.gelu(h) * 1.5


class Hybrid(torch.nn.Module):
    """torch Linear -> JAX gelu (call_jax) -> torch Linear."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(64, 256), torch.nn.Linear(256, 32)

    def forward(self, x):
        return self.fc2(hb.call_jax(jax_gelu, self.fc1(x)))


def _whole_step():
    """The demo's whole-step program (examples/whole_step.py): model with a
    JAX activation, MSE loss, JAX momentum update; and a batch."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import whole_step as ws
    finally:
        sys.path.pop(0)
    torch.manual_seed(0)
    model = ws.Model(64, 128, 32)
    step = hb.compile_train_step(model, ws.loss_fn, hb.optim.JaxOptimizer(ws.momentum_init, ws.momentum_update))
    return model, step, (torch.randn(32, 64), torch.randn(32, 32))


def _pallas_program(target: str):
    """torch -> Pallas matmul -> Pallas softmax -> Pallas add -> torch, for ``target``."""
    g = torch.Generator().manual_seed(0)
    x, w, y = torch.randn(64, 256, generator=g), torch.randn(256, 256, generator=g), torch.randn(128, 128, generator=g)

    class Pre(torch.nn.Module):
        def forward(self, x):
            return torch.tanh(x) * 2.0

    class Mid(torch.nn.Module):
        def forward(self, m):
            return m.reshape(128, 128) * 0.1

    h = torch.tanh(x) * 2.0
    m = h @ w
    s = m.reshape(128, 128) * 0.1
    pre, pre_in = torch_segment(Pre(), ["x"], (x,))
    mid, mid_in = torch_segment(Mid(), ["m"], (m,))
    mm = trace_pallas(pallas_matmul, h, w, target=target)
    sm = trace_pallas(pallas_softmax, s, target=target)
    ad = trace_pallas(pallas_add, s, y, target=target)
    return stitch_program(
        [("x", ttype(x)), ("w", ttype(w)), ("y", ttype(y))],
        [("pre", "torch", pre, "main", pre_in, ["h"]), (mm, ["h", "w"], ["m"]),
         ("mid", "torch", mid, "main", mid_in, ["s"]), (sm, ["s"], ["p"]), (ad, ["p", "y"], ["z"])],
        ["z"])


def _rpa_program(target: str):
    """The ragged paged attention kernel, stitched between two JAX segments."""
    from hlobridge._src.ops.rpa_kernel import kernel_attention

    s = jax.ShapeDtypeStruct
    t, h, kvh, d, page, pages, seqs, max_pages = 50, 8, 2, 64, 16, 30, 3, 7
    args = [s((t, h, d), jnp.float32), s((pages, 2, kvh, page, d), jnp.float32), s((seqs,), jnp.int32),
            s((seqs, max_pages), jnp.int32), s((seqs + 1,), jnp.int32)]
    rpa = trace_pallas(kernel_attention, *args, target=target, scale=0.125, soft_cap=30.0, causal=True,
                       block_q=16, layout=target, name="ragged_paged_attention")
    q_t, kv_t, lens_t, bt_t, cu_t = rpa.input_types
    pre = jax.jit(lambda x: x * 0.5).lower(args[0]).as_text()
    post = jax.jit(lambda o: jnp.tanh(o)).lower(args[0]).as_text()
    return stitch_program(
        [("x", q_t), ("kv", kv_t), ("lens", lens_t), ("bt", bt_t), ("cu", cu_t)],
        [("scale", "jax", pre, "main", ["x"], ["q"]), (rpa, ["q", "kv", "lens", "bt", "cu"], ["o"]),
         ("post", "jax", post, "main", ["o"], ["out"])],
        ["out"])


def _sharded_program(mesh_shape: tuple[int, int]):
    """A Shardy program over a 2-axis mesh: a sharded matmul+tanh segment and a
    sharded elementwise segment, stitched (JAX lowers them against an
    abstract mesh: no devices needed)."""
    from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec as P

    mesh = AbstractMesh(mesh_shape, ("x", "y"))
    ns = lambda *spec: NamedSharding(mesh, P(*spec))  # noqa: E731
    sd = jax.ShapeDtypeStruct((64, 128), jnp.float32)
    mm = jax.jit(lambda a, b: jnp.tanh(a @ b), in_shardings=(ns("x", None), ns(None, "y")),
                 out_shardings=ns("x", "y")).trace(sd, jax.ShapeDtypeStruct((128, 128), jnp.float32))
    ew = jax.jit(lambda z, c: z * c + 1.0, in_shardings=(ns("x", "y"), ns("x", "y")),
                 out_shardings=ns("x", "y")).trace(jax.ShapeDtypeStruct((64, 128), jnp.float32),
                                                  jax.ShapeDtypeStruct((64, 128), jnp.float32))
    t1 = mm.lower(lowering_platforms=("tpu",)).as_text()
    t2 = ew.lower(lowering_platforms=("tpu",)).as_text()
    return stitch_program(
        [("a", "tensor<64x128xf32>"), ("b", "tensor<128x128xf32>"), ("c", "tensor<64x128xf32>")],
        [("mm", "jax", t1, "main", ["a", "b"], ["z"]), ("ew", "jax", t2, "main", ["z", "c"], ["out"])],
        ["out"])


# --- tests ----------------------------------------------------------------------


@pytest.mark.parametrize("target", ALL)
def test_torch_compiled_torch_and_jax_model(target):
    need(target)
    torch.manual_seed(0)
    model = torch.compile(Hybrid(), backend="hlobridge", dynamic=False)
    x = torch.randn(16, 64)
    exe = hb.compile_for(target, model, x)
    check(exe, target)
    r = exe.receipt
    assert r.what == "torch.compile"
    assert {s.producer for s in r.segments} == {"torch", "jax"}
    assert exe.fusions


@pytest.mark.parametrize("target", ALL)
def test_demo_whole_step(target):
    need(target)
    model, step, batch = _whole_step()
    before = copy.deepcopy(model.state_dict())
    state = step.state
    exe = hb.compile_for(target, step, *batch)
    check(exe, target)
    assert exe.receipt.what == "compile_train_step"
    assert {s.producer for s in exe.receipt.segments} >= {"torch", "jax"}
    # Building the program ran the step once; everything is restored.
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(torch.equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(step.state),
                                                  jax.tree_util.tree_leaves(state)))


@pytest.mark.parametrize("target", ALL)
def test_stitched_pallas_kernels(target):
    need(target)
    platform = target.split(":")[0]
    prog = _pallas_program(platform)
    exe = hb.compile_for(target, prog)
    check(exe, target)
    want = ("tpu_custom_call", "Pallas TPU (Mosaic)") if platform == "tpu" else \
        ("__gpu$xla.gpu.triton", "Pallas Triton")
    # Three kernels (matmul, softmax, add), all compiled by the target's backend.
    assert [(k.custom_call_target, k.backend) for k in exe.kernels] == [want], exe.kernels
    assert sum(k.count for k in exe.kernels) == 3, exe.kernels
    assert exe.receipt.what == "stitched"


@pytest.mark.parametrize("target", ALL)
def test_ragged_paged_attention_kernel(target):
    need(target)
    platform = target.split(":")[0]
    exe = hb.compile_for(target, _rpa_program(platform))
    check(exe, target)
    want = "tpu_custom_call" if platform == "tpu" else "__gpu$xla.gpu.triton"
    assert [(k.custom_call_target, k.count) for k in exe.kernels] == [(want, 1)], exe.kernels


@pytest.mark.parametrize("target,devices", [("tpu:v5e:2x2", 4), ("cuda:h100:8", 8)])
def test_sharded_shardy_program(target, devices):
    need(target)
    prog = _sharded_program((2, 2) if devices == 4 else (2, 4))
    assert prog.text.count("sdy.mesh @") == 1 and f"mhlo.num_partitions = {devices}" in prog.text
    exe = hb.compile_for(target, prog)
    check(exe, target, devices=devices)
    # Per-device arguments: a [64,128] (x-sharded rows) + b [128,128] (y-sharded
    # columns) + c [64,128] sharded on both axes, f32.
    x, y = (2, 2) if devices == 4 else (2, 4)
    shards = [(64 // x, 128), (128, 128 // y), (64 // x, 128 // y)]
    logical = 4 * sum(r * c for r, c in shards)
    if target.startswith("tpu"):
        # TPU layouts may pad a shard's minor dims to (8, 128) tiles (the
        # compiler picks each layout): between the logical and padded sizes.
        padded = 4 * sum(-(-r // 8) * 8 * -(-c // 128) * 128 for r, c in shards)
        assert logical <= exe.memory.arguments <= padded, exe.memory
    else:
        assert exe.memory.arguments == logical, exe.memory


def test_call_jax_function_with_a_pallas_kernel_lowers_for_the_target():
    need("tpu:v5e")
    x, y = torch.randn(*(16, 128)), torch.randn(16, 128)
    exe = hb.compile_for("tpu:v6e", lambda a, b: pallas_add(a, b) * 2.0, x, y)
    check(exe, "tpu:v6e")
    assert [k.custom_call_target for k in exe.kernels] == ["tpu_custom_call"]
    assert exe.receipt.what == "call_jax" and exe.receipt.segments[0].producer == "pallas"


def test_over_hbm_program_is_out_of_memory_error():
    need("tpu:v5e")
    # Meta tensors: only shapes and dtypes are needed to lower and compile.
    a = torch.empty(40000, 40000, device="meta")
    fn = lambda a: jnp.exp(a) + jnp.exp(a).T  # noqa: E731
    with pytest.raises(hb.OutOfMemoryError, match=r"does not fit HBM on tpu:v5e: .*available 15\.75G"):
        hb.compile_for("tpu:v5e", fn, a)
    exe = hb.compile_for("tpu:v5p", fn, a)  # 95 GiB of HBM: fits
    assert exe.memory.total > 16 << 30
    assert issubclass(hb.OutOfMemoryError, hb.TargetError) and issubclass(hb.TargetError, hb.BridgeError)


def test_cpu_target_applies_the_host_lowering_and_accelerators_do_not():
    a, b = torch.randn(256, 512), torch.randn(512, 256)
    fn = lambda a, b: jnp.tanh(a @ b)  # noqa: E731
    cpu = hb.compile_for("cpu", fn, a, b)
    check(cpu, "cpu")
    if os.environ.get("HLOBRIDGE_HOST_GEMM", "") not in ("0", "off", "false", "no"):
        assert cpu.receipt.host_lowering == 1
        assert any(t.startswith("hlobridge_gemm") for t in cpu.custom_calls), cpu.custom_calls
    need("tpu:v5e")
    tpu = hb.compile_for("tpu:v5e", fn, a, b)
    check(tpu, "tpu:v5e")
    assert tpu.receipt.host_lowering == 0  # and check(): no hlobridge_gemm call in the program


def test_unknown_target_and_bad_input_are_named_errors():
    with pytest.raises(hb.UnknownTargetError, match="known targets: .*tpu:v5e"):
        hb.compile_for("tpu:v99", lambda a: a, torch.ones(2))
    with pytest.raises(hb.UnknownTargetError):
        hb.compile_for("gpu:h100", lambda a: a, torch.ones(2))
    with pytest.raises(hb.ArgumentError, match="cannot compile a int"):
        hb.compile_for("cpu", 3)


def test_mosaic_gpu_kernel_compiles_with_the_mosaic_gpu_runtime():
    """A Pallas kernel lowered through Mosaic GPU (jax 0.10.2's default GPU
    backend) compiles for the H100: hlobridge loads jax-cuda12-plugin's
    Mosaic GPU runtime, whose host symbols the kernel's custom call needs."""
    need("cuda:h100")
    if not _native.accelerators().get("mosaic_gpu_runtime"):
        need_msg = "jax-cuda12-plugin (the Mosaic GPU runtime) is not installed"
        if os.environ.get("HLOBRIDGE_ACCEL") == "0":
            pytest.skip(need_msg + " (HLOBRIDGE_ACCEL=0)")
        pytest.fail(need_msg + "; scripts/setup.sh installs it into .venv/accel")
    x, y = torch.randn(16, 128), torch.randn(16, 128)
    seg = trace_pallas(pallas_add, x, y, target="cuda", backend="mosaic_gpu")
    prog = stitch_program([("x", ttype(x)), ("y", ttype(y))], [(seg, ["x", "y"], ["z"])], ["z"])
    exe = hb.compile_for("cuda:h100", prog)
    check(exe, "cuda:h100")
    assert [(k.custom_call_target, k.backend) for k in exe.kernels] == [("mosaic_gpu_v2", "Pallas Mosaic GPU")]


def test_a_plain_module_is_compiled_for_the_target() -> None:
    """An ``nn.Module`` that is not ``torch.compile``'d is compiled as one
    graph; a model compiled with another backend is refused by name."""
    need("tpu:v5e")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.GELU())
    x = torch.randn(4, 16)
    exe = hb.compile_for("tpu:v5e", m, x)
    assert exe.receipt.what == "torch.compile" and exe.receipt.platform == "tpu"
    assert exe.memory is not None and exe.memory.arguments >= (16 * 8 + 8 + 4 * 16) * 4
    with pytest.raises(hb.ArgumentError, match="built no hlobridge program"):
        hb.compile_for("cpu", torch.compile(m, backend="eager"), x)
