"""Helpers for the Pallas tests: torch segments (torch.export -> torch_xla
StableHLO), MLIR type strings, and a structural summary of a lowered module
(op names, custom call targets, operand/result types, payload hashed) that is
compared with checked-in snapshots under ``tests/python/snapshots``
(``HLOBRIDGE_UPDATE_SNAPSHOTS=1`` rewrites them)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import torch

from hlobridge._src.pallas import _CUSTOM_CALL_BACKENDS, _ir_module, _payload, _walk

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"


def torch_segment(module: torch.nn.Module, names: list[str], examples: tuple[torch.Tensor, ...]) -> tuple[str, list[str]]:
    """StableHLO of ``module`` and the handle name each @main parameter takes
    (torch_xla may reorder parameters; ``meta.input_locations`` says how)."""
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    from torch_xla.stablehlo import exported_program_to_stablehlo

    shlo = exported_program_to_stablehlo(torch.export.export(module, examples))
    meta = shlo._bundle.stablehlo_funcs[0].meta
    order = []
    for loc in meta.input_locations:
        assert loc.type_.value == "input_arg", loc
        order.append(names[loc.position])
    return shlo.get_stablehlo_text(), order


def ttype(t: torch.Tensor) -> str:
    """``tensor<AxBxf32>`` of a float32 torch tensor."""
    assert t.dtype == torch.float32
    return "tensor<" + "".join(f"{d}x" for d in t.shape) + "f32>"


def structure(text: str) -> str:
    """A structural summary of a module: @main's signature, a count of every
    op name, and each kernel custom call with its target, operand/result
    types and payload size + SHA-256 (never the payload itself)."""
    import hashlib

    module, ctx = _ir_module(text)
    lines: list[str] = []
    ops: Counter[str] = Counter()
    calls: list[str] = []
    with ctx:
        for op in _walk(module.operation):
            name = op.operation.name
            ops[name] += 1
            if name == "func.func" and op.attributes["sym_name"].value == "main":
                ft = op.attributes["function_type"].value
                lines.append(f"main({', '.join(str(t) for t in ft.inputs)}) -> ({', '.join(str(t) for t in ft.results)})")
            if name == "stablehlo.custom_call":
                tgt = op.attributes["call_target_name"].value
                if tgt in _CUSTOM_CALL_BACKENDS:
                    p = _payload(op.operation)
                    calls.append(f"custom_call @{tgt} [{_CUSTOM_CALL_BACKENDS[tgt]}]\n"
                                 f"  operands: {', '.join(str(v.type) for v in op.operation.operands)}\n"
                                 f"  results: {', '.join(str(r.type) for r in op.operation.results)}\n"
                                 f"  payload: {len(p)} bytes, sha256:{hashlib.sha256(p).hexdigest()}")
                else:
                    calls.append(f"custom_call @{tgt} (not a kernel)")
    lines.append("ops: " + ", ".join(f"{k} x{v}" for k, v in sorted(ops.items())))
    return "\n".join(lines + calls) + "\n"


def check_snapshot(name: str, summary: str) -> None:
    """Compare ``summary`` with ``snapshots/<name>.txt`` (rewrite it when
    HLOBRIDGE_UPDATE_SNAPSHOTS=1)."""
    path = SNAPSHOTS / f"{name}.txt"
    header = "# structural snapshot (tests/python/pallas_helpers.py); HLOBRIDGE_UPDATE_SNAPSHOTS=1 rewrites\n"
    if os.environ.get("HLOBRIDGE_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.mkdir(parents=True, exist_ok=True)
        path.write_text(header + summary)
        return
    assert path.exists(), f"missing snapshot {path}; run with HLOBRIDGE_UPDATE_SNAPSHOTS=1"
    expected = path.read_text().removeprefix(header)
    assert summary == expected, f"{name}: structure changed\n--- expected\n{expected}--- got\n{summary}"
