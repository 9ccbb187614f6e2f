"""What ``benches/call_torch_bench.py`` reports about each compiled training
step: op counts of the optimized HLO (``dot`` s in every computation, the
entry computation's fusions, transposes and copies anywhere) and XLA's cost
analysis (FLOPs, bytes accessed); with a directory, the HLO text too.

Equal ``dot`` counts (and ``exponential`` / ``tanh`` counts) between the
``call_torch`` and ``pure_jax`` steps show that the forward the torch
backward recomputes was merged with the forward by XLA's CSE.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path
from typing import Any

__all__ = ["census", "hlo_summary"]

KINDS = ("dot", "fusion", "transpose", "copy", "concatenate", "gather", "scatter", "select",
         "exponential", "tanh", "custom-call", "call")
_OP = re.compile(r"^\s*(?:ROOT )?%?[\w.\-]+ = [^=]*? ([a-z][\w\-]*)\(", re.M)


def census(text: str) -> dict[str, int]:
    """Op counts of an optimized HLO module's text: ``fusion`` in the
    entry computation (what runs one after another), the rest anywhere."""
    entry = text[text.index("ENTRY"):]
    entry = entry[:entry.index("\n}\n")]
    top = collections.Counter(_OP.findall(entry))
    every = collections.Counter(_OP.findall(text))
    out = {k: every[k] for k in KINDS}
    out["fusion"] = top["fusion"]
    return out


def hlo_summary(compiled: Any, name: str, dump: Path | None = None) -> dict[str, Any]:
    """:func:`census` of a ``jax.stages.Compiled`` plus its cost analysis."""
    text = compiled.as_text()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        (dump / f"{name}.hlo.txt").write_text(text)
    return {**census(text), "gflops": float(cost.get("flops", 0.0)) / 1e9,
            "gb_accessed": float(cost.get("bytes accessed", 0.0)) / 1e9}
