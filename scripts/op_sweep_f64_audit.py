"""float64 audit of the op sweep's stored rows (issue #27).

``torch.testing.assert_close`` passes float64 results to ``rtol=1e-7``, so a
lowering that computes in float32 precision passes the sweep. For float64
inputs the sweep's reference *is* eager float64, so a row's ``err`` is the
compiled result's largest difference from eager, relative to eager's
largest finite magnitude (``op_sweep_harness._rel_err``; ``own`` is 0).

This script lists every float64 row (forward and backward) of
``docs/op_numerics/hlobridge-*of8.jsonl`` whose ``err`` is above
``--threshold`` (1e-12), reruns its sample through the harness on the
current code (``now``), and measures eager's own sensitivity: the largest
relative change of eager's result (and gradients) when every floating
input is perturbed by one ulp with a random sign (``ulp``, the median
of ``--trials`` perturbations). An ``err`` far above ``ulp`` is a lowering
that is less accurate than the problem's conditioning allows (float32
constants or intermediates); ``err`` of the order of ``ulp`` is an
ill-conditioned sample where eager is no closer to the truth.

    .venv/bin/python scripts/op_sweep_f64_audit.py [--threshold 1e-12] [--no-rerun]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

import op_sweep  # noqa: E402
from op_sweep_harness import _grads, _rel_err  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def stored_rows(threshold: float) -> list[dict[str, Any]]:
    rows = []
    for f in sorted(glob.glob(str(ROOT / "docs/op_numerics/hlobridge-*of8.jsonl"))):
        for line in open(f):
            r = json.loads(line)
            if r["dtype"] == "float64" and r.get("err", 0.0) > threshold:
                rows.append(r)
    rows.sort(key=lambda r: -r["err"])
    return rows


def _eager(fn: Any, s: Any, grad: bool, seed: int, bump: int | None) -> list[torch.Tensor]:
    """Eager's outputs (and gradients of a seeded cotangent, as the
    harness draws it) with the float64 inputs perturbed by one ulp (random
    signs from ``bump``) or as they are."""
    leaves, spec = pytree.tree_flatten(((s.input, *s.args), dict(s.kwargs)))
    gen = torch.Generator().manual_seed(bump or 0)
    ins = []
    for i, v in enumerate(leaves):
        if isinstance(v, torch.Tensor) and v.dtype == torch.float64:
            t = v.detach().clone()
            if bump is not None and t.numel():
                sign = torch.randint(0, 2, t.shape, generator=gen).to(t.dtype) * 2 - 1
                t = torch.nextafter(t, sign * torch.inf)
            t.requires_grad_(grad and v.requires_grad)  # as the harness
            leaves[i] = t
            ins.append(t)
    a, k = pytree.tree_unflatten(leaves, spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fn(*a, **k)
        outs = [o for o in pytree.tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        if not grad:
            return [o.detach() for o in outs]
        need = [t for t in ins if t.requires_grad]
        lo = [o for o in outs if o.requires_grad]
        g = torch.Generator().manual_seed(seed + 1)
        ws = [torch.randn(o.shape, generator=g, dtype=torch.float64) for o in lo]
        return [o.detach() for o in outs] + [x for x in _grads(out, need, ws) if x is not None]


def sensitivity(op: Any, s: Any, grad: bool, seed: int, trials: int) -> float:
    base = _eager(op.op, s, grad, seed, None)
    errs = []
    for t in range(trials):
        pert = _eager(op.op, s, grad, seed, 1000 + t)
        errs.append(max((_rel_err(p, b) for p, b in zip(pert, base)
                         if p.is_floating_point() and p.shape == b.shape), default=0.0))
    return statistics.median(errs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threshold", type=float, default=1e-12)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--no-rerun", action="store_true")
    args = ap.parse_args()
    rows = stored_rows(args.threshold)
    ops = {(o.name, o.variant_test_name): o for o in op_sweep.load_op_db()}
    print(f"{len(rows)} float64 rows with err > {args.threshold:g}")
    print(f"{'op':28s} {'variant':8s} dir  k status  stored_err  now_err     ulp_sens")
    for r in rows:
        op = ops.get((r["op"], r["variant"]))
        now = sens = float("nan")
        status = r["status"]
        if op is not None:
            samples = op_sweep.samples_of(op, torch.float64, r["sample"] + 1)
            s = samples[r["sample"]]
            grad = r["dir"] == "bwd"
            sens = sensitivity(op, s, grad, r["sample"], args.trials)
            if not args.no_rerun:
                res = op_sweep.run_op_sample(op, s, r["sample"], r["dir"], "hlobridge")
                now, status = res.err, res.status
        print(f"{r['op'][:28]:28s} {r['variant'][:8]:8s} {r['dir']} {r['sample']} {status:7s} "
              f"{r['err']:.2e}    {now:.2e}    {sens:.2e}", flush=True)


if __name__ == "__main__":
    main()
