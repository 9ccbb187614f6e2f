#!/usr/bin/env python3
"""Which ops change results because XLA:CPU flushes subnormals (FTZ/DAZ)
where eager torch keeps them.

For every comparable op of op_db in float32, sample 0 of the sweep (same
seed) runs through ``scripts/op_sweep_harness.run_sample`` (forward) twice:
as is, and with every floating input scaled by ``2**-130`` (exact in
float64, then rounded to float32: most values become subnormal; eager and
the backend see the same inputs). An op is listed when it passes on the
normal sample and fails on the subnormal one (beyond torch.testing's
tolerance, or a NaN/Inf/integer difference), and counted as *flushed within
tolerance* when it passes but its result is off by more than 10% relative
to the float64 result (a flushed result, smaller than ``atol``).

    .venv/bin/python scripts/op_sweep_denormals.py --out docs/op_numerics/denormals.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import op_sweep  # noqa: E402


def _tiny(v: Any) -> Any:
    import torch

    if isinstance(v, torch.Tensor) and v.dtype == torch.float32:
        return (v.detach().double() * 2.0 ** -130).float().requires_grad_(v.requires_grad)
    return v


def main() -> None:
    import torch
    import torch.utils._pytree as pytree

    import hlobridge  # noqa: F401

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(op_sweep.DEFAULT_OUT / "denormals.jsonl"))
    ap.add_argument("--ops", default="")
    args = ap.parse_args()
    wanted = set(args.ops.split(",")) - {""}
    torch.set_num_threads(1)
    done = {(r["op"], r["variant"]) for r in op_sweep.read_rows(Path(args.out))}
    with Path(args.out).open("a") as f:
        for op in op_sweep.load_op_db():
            if not op_sweep.comparable(op.name) or (op.name, op.variant_test_name) in done:
                continue
            if wanted and op.name not in wanted:
                continue
            if torch.float32 not in op.supported_dtypes("cpu"):
                continue
            t0 = time.time()
            try:
                s = op_sweep.samples_of(op, torch.float32, 1)[0]
            except Exception:  # noqa: BLE001
                continue
            a = op_sweep.run_op_sample(op, s, 0, "fwd", "hlobridge")
            tiny_in, tiny_args, tiny_kw = pytree.tree_map(_tiny, (s.input, s.args, s.kwargs))
            b = op_sweep.run_sample(op.op, (tiny_in, *tiny_args), dict(tiny_kw), seed=0)
            r = {"op": op.name, "variant": op.variant_test_name, "normal": a.status,
                 "subnormal": b.status, "err": b.err, "own": b.own, "detail": b.detail[:200],
                 "s": round(time.time() - t0, 2)}
            f.write(json.dumps(r) + "\n")
            f.flush()
            print(f"{op.name} {a.status} {b.status} {b.err:.2g} {b.detail[:80]}", flush=True)


if __name__ == "__main__":
    main()
