#!/usr/bin/env python3
"""Measure target x program with ``hb.compile_for`` and write
``docs/accelerators_table.md``: compile time, generated code size,
serialized executable size, and memory used per device against the device's
capacity, for TPU v5e / v6e (libtpu) and H100 (CUDA PJRT plugin), deviceless,
plus ``cpu`` for reference.

The programs are the ones ``tests/python/test_compile_for.py`` compiles
(its builders are imported from there): a torch.compile'd torch+JAX model,
the demo's whole training step, a stitched torch + 3 Pallas kernels
program, the ragged paged attention kernel between two JAX segments, and a
4- / 8-device Shardy program.

    PJRT_DEVICE=CPU .venv/bin/python scripts/gen_accel_table.py [--out docs/accelerators_table.md]

Compile time is one ``PJRT_Compile`` per (program, target), the first for
that program in this process: libtpu serves a repeated identical compile
from an in-process cache, so repeats would not measure the compiler. Each
target first compiles a tiny warm-up program, so that loading and
initializing the compiler is not charged to the first row. Times depend on
the machine and its load: the table says which machine it was measured on.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))


def _human(b: int | None) -> str:
    if b is None:
        return "—"
    v, units = float(b), ["B", "KiB", "MiB", "GiB", "TiB"]
    i = 0
    while abs(v) >= 1024 and i + 1 < len(units):
        v /= 1024
        i += 1
    return f"{b} B" if i == 0 else f"{v:.3g} {units[i]}"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def programs() -> list[tuple[str, list[str], Callable[[str], tuple[Any, tuple[Any, ...]]]]]:
    """(name, targets, build(target) -> (what, example_inputs))."""
    import torch

    import hlobridge as hb
    import test_compile_for as t

    def hybrid(target: str) -> tuple[Any, tuple[Any, ...]]:
        torch.manual_seed(0)
        return torch.compile(t.Hybrid(), backend="hlobridge", dynamic=False), (torch.randn(16, 64),)

    def whole(target: str) -> tuple[Any, tuple[Any, ...]]:
        _, step, batch = t._whole_step()
        return step, batch

    def pallas(target: str) -> tuple[Any, tuple[Any, ...]]:
        return t._pallas_program(target.split(":")[0]), ()

    def rpa(target: str) -> tuple[Any, tuple[Any, ...]]:
        return t._rpa_program(target.split(":")[0]), ()

    def sharded(target: str) -> tuple[Any, tuple[Any, ...]]:
        return t._sharded_program((2, 2) if target.startswith("tpu") else (2, 4)), ()

    def matmul(target: str) -> tuple[Any, tuple[Any, ...]]:
        import jax.numpy as jnp

        return (lambda a, b: jnp.tanh(a @ b)), (torch.randn(256, 512), torch.randn(512, 128))

    del hb
    accel = ["tpu:v5e", "tpu:v6e", "cuda:h100"]
    return [
        ("matmul 256×512·512×128 + tanh (call_jax)", ["cpu", *accel], matmul),
        ("torch.compile: Linear → JAX gelu → Linear", ["cpu", *accel], hybrid),
        ("whole step (examples/whole_step.py)", ["cpu", *accel], whole),
        ("torch + 3 Pallas kernels, stitched", accel, pallas),
        ("ragged paged attention kernel, stitched", accel, rpa),
        ("Shardy 2-axis mesh, stitched", ["tpu:v5e:2x2", "cuda:h100:8"], sharded),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "docs" / "accelerators_table.md"))
    args = ap.parse_args()
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import hlobridge as hb

    import torch

    rows = []
    warm: set[str] = set()
    for name, targets, build in programs():
        for target in targets:
            if target not in warm:
                hb.compile_for(target, lambda a: a * 3.0 + 1.0, torch.ones(8, 128))
                warm.add(target)
            what, inputs = build(target)
            try:
                exe = hb.compile_for(target, what, *inputs)
            except hb.BridgeError as e:
                rows.append((name, target, f"{type(e).__name__}: {str(e)[:80]}", "", "", "", ""))
                print(f"{name} / {target}: {type(e).__name__}", file=sys.stderr)
                continue
            m = exe.memory
            mem = "—" if m is None else (
                f"{_human(m.total)} / {_human(m.capacity)}" if m.capacity else _human(m.total))
            kernels = ", ".join(f"{k.backend} ×{k.count}" for k in exe.kernels) or "—"
            devices = exe.receipt.partitions
            rows.append((name, target + (f" ({devices} dev)" if devices > 1 else ""),
                         f"{exe.compile_time:.2f} s", _human(exe.generated_code_bytes),
                         _human(len(exe.serialize())), mem, kernels))
            print(f"{name} / {target}: {rows[-1][2:]}", file=sys.stderr)
    lines = [
        "# Compile for accelerators: measured table",
        "",
        "Generated by `scripts/gen_accel_table.py` with `hb.compile_for` (deviceless for TPU/GPU: libtpu "
        "0.0.42.1, jax-cuda12-pjrt 0.10.2; `cpu` on xla-cpu-pjrt 0.0.1 with hlobridge's host lowering). "
        f"Machine: {_cpu_model()}, {os.cpu_count()} cores, no GPU/TPU. Compile = wall time of one "
        "`PJRT_Compile` (the program's first in the process, after a warm-up compile per target; "
        "machine- and load-dependent, indicative); code = "
        "`SizeOfGeneratedCodeInBytes` (the GPU plugin reports 0: its cubin is inside the serialized "
        "executable); memory = compiled memory stats per device (arguments + outputs − aliased + "
        "temporaries + code) against the device's HBM.",
        "",
        "| program | target | compile | code | serialized | memory / capacity | kernels |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
