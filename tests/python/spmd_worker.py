"""Worker of tests/python/test_spmd.py, launched by torchrun with 2
processes on 127.0.0.1: hlobridge.distributed.initialize (2 CPU devices
each), then stitched torch + JAX programs with torch collectives, run SPMD
through JAX's runtime. Each case compares this process's outputs with a
reference in eager torch on the whole data; rank r writes
``{case: result}`` as JSON to ``<out>/rank<r>.json``.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import hlobridge.distributed as hbd

INFO = hbd.initialize(local_devices=2, timeout_s=60)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from hlobridge import spmd  # noqa: E402

dist.init_process_group("gloo")
MESH = spmd.process_mesh(("dp", "tp"))
WORLD = dist.group.WORLD
R = INFO.process_id


def _jax_text(fn: Callable[..., Any], *shapes: tuple[int, ...]) -> str:
    return jax.jit(fn).lower(*(jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes)).as_text()


class AllReduceMatmul(torch.nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return funcol.all_reduce(x @ w, "sum", WORLD)


class AllReduceMax(torch.nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return funcol.all_reduce(h, "max", WORLD)


class Gather(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return funcol.all_gather_tensor(x, 0, WORLD)


def case_all_devices() -> dict[str, Any]:
    """sum over all 4 devices of x_block @ w, then a JAX sin: x split in 4
    row blocks over (dp, tp), w replicated."""
    b, d, o = 3, 5, 4
    seg = spmd.torch_segment("mm", AllReduceMatmul(), (torch.randn(b, d), torch.randn(d, o)),
                             ["x", "w"], ["h"], mesh=MESH)
    prog = spmd.stitch_spmd([("x", f"tensor<{b}x{d}xf32>"), ("w", f"tensor<{d}x{o}xf32>")],
                            [seg, ("act", "jax", _jax_text(jnp.sin, (b, o)), "main", ["h"],
                                   ["y"])], ["y"], MESH, {"x": P(("dp", "tp"))}, [P()])
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(4 * b, d, generator=g), torch.randn(d, o, generator=g)
    (y,) = prog(x[R * 2 * b:(R + 1) * 2 * b], w)
    ref = torch.sin(sum(x[i * b:(i + 1) * b] @ w for i in range(4)))
    return {"err": (y - ref).abs().max().item(), "report": seg.report,
            "shape": list(y.shape)}


def case_mesh_axes() -> dict[str, Any]:
    """A tp sum then a dp max, in two torch segments around a JAX piece:
    x split over (dp, tp) in 2x2 blocks; the output stays split over dp."""
    b, d = 2, 3
    s1 = spmd.torch_segment("tp_sum", AllReduceMatmul(), (torch.randn(b, d), torch.randn(d, d)),
                            ["x", "w"], ["h"], mesh=MESH, axes="tp")
    s2 = spmd.torch_segment("dp_max", AllReduceMax(), (torch.randn(b, d),), ["a"], ["m"],
                            mesh=MESH, axes="dp")
    prog = spmd.stitch_spmd(
        [("x", f"tensor<{b}x{d}xf32>"), ("w", f"tensor<{d}x{d}xf32>")],
        [s1, ("act", "jax", _jax_text(jnp.tanh, (b, d)), "main", ["h"], ["a"]), s2],
        ["h", "m"], MESH, {"x": P("dp", "tp")}, [P("dp", None), P()])
    g = torch.Generator().manual_seed(2)
    # x global [2b, 2d]: block (i, j) is dp i, tp j; device (i, j) multiplies
    # its [b, d] block by w.
    x, w = torch.randn(2 * b, 2 * d, generator=g), torch.randn(d, d, generator=g)
    h, m = prog(x[R * b:(R + 1) * b], w)
    blocks = [[x[i * b:(i + 1) * b, j * d:(j + 1) * d] @ w for j in range(2)] for i in range(2)]
    ref_h = [blocks[i][0] + blocks[i][1] for i in range(2)]
    ref_m = torch.maximum(torch.tanh(ref_h[0]), torch.tanh(ref_h[1]))
    return {"err_h": (h - ref_h[R]).abs().max().item(), "err_m": (m - ref_m).abs().max().item(),
            "shape_h": list(h.shape), "channels": s1.report["channels"] + s2.report["channels"]}


def case_refuse_all_gather() -> dict[str, Any]:
    """An all_gather captured for the torch group: its shape is fixed for
    that group, so it is refused by name."""
    try:
        spmd.torch_segment("gather", Gather(), (torch.randn(2, 3),), ["x"], ["y"], mesh=MESH)
    except Exception as e:  # noqa: BLE001 -- the test checks the type
        return {"error": type(e).__name__, "message": str(e)}
    return {"error": None}


def case_bad_local_shape() -> dict[str, Any]:
    """A process passing a tensor that is not its block."""
    seg = spmd.torch_segment("mm2", AllReduceMatmul(), (torch.randn(2, 3), torch.randn(3, 3)),
                             ["x", "w"], ["h"], mesh=MESH)
    prog = spmd.stitch_spmd([("x", "tensor<2x3xf32>"), ("w", "tensor<3x3xf32>")], [seg], ["h"],
                            MESH, {"x": P(("dp", "tp"))}, [P()])
    try:
        prog(torch.randn(8, 3), torch.randn(3, 3))  # the global x, not this process's rows
    except Exception as e:  # noqa: BLE001
        return {"error": type(e).__name__, "message": str(e)}
    return {"error": None}


class Matmul(torch.nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w


def case_whole_mesh() -> dict[str, Any]:
    """A program over the whole mesh (global shapes, mode="global"): x is
    split over dp (rows) and tp (the contracted columns), w over tp (rows);
    Shardy carries the shardings through the torch matmul and the JAX tanh,
    and XLA adds the tp all-reduce the contraction needs."""
    n, d, h = 8, 6, 4
    seg = spmd.torch_segment("mm", Matmul(), (torch.randn(n, d), torch.randn(d, h)), ["x", "w"],
                             ["h"])
    prog = spmd.stitch_spmd(
        [("x", f"tensor<{n}x{d}xf32>"), ("w", f"tensor<{d}x{h}xf32>")],
        [seg, ("act", "jax", _jax_text(jnp.tanh, (n, h)), "main", ["h"], ["y"])], ["y"], MESH,
        {"x": P("dp", "tp"), "w": P("tp", None)}, [P("dp", None)], mode="global")
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(n, d, generator=g), torch.randn(d, h, generator=g)
    (y,) = prog(x[R * n // 2:(R + 1) * n // 2], w)
    ref = torch.tanh(x @ w)[R * n // 2:(R + 1) * n // 2]
    hlo = prog.lower(*prog.global_arrays(x[R * n // 2:(R + 1) * n // 2], w)).compile()
    return {"err": (y - ref).abs().max().item(), "shape": list(y.shape),
            "all_reduce": "all-reduce" in hlo.as_text()}


def case_whole_mesh_refuses_collectives() -> dict[str, Any]:
    seg = spmd.torch_segment("mm3", AllReduceMatmul(), (torch.randn(2, 3), torch.randn(3, 3)),
                             ["x", "w"], ["h"])
    try:
        spmd.stitch_spmd([("x", "tensor<2x3xf32>"), ("w", "tensor<3x3xf32>")], [seg], ["h"],
                         MESH, {}, [P()], mode="global")
    except Exception as e:  # noqa: BLE001
        return {"error": type(e).__name__, "message": str(e)}
    return {"error": None}


CASES = [case_all_devices, case_mesh_axes, case_refuse_all_gather, case_bad_local_shape,
         case_whole_mesh, case_whole_mesh_refuses_collectives]


def main() -> None:
    out_dir = sys.argv[1]
    report: dict[str, Any] = {"info": {"process_id": INFO.process_id,
                                       "num_processes": INFO.num_processes,
                                       "global_devices": INFO.global_devices,
                                       "coordinator": INFO.coordinator}}
    for case in CASES:
        name = case.__name__.removeprefix("case_")
        try:
            report[name] = case()
        except Exception:  # noqa: BLE001 -- reported to the test
            report[name] = {"crash": traceback.format_exc()}
    with open(os.path.join(out_dir, f"rank{R}.json"), "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()
    hbd.shutdown()


if __name__ == "__main__":
    main()
