"""Per-call overhead of ``torch.compile(backend="hlobridge")`` at inference,
against eager torch and inductor, on every model of the tiny model zoo
(``tests/python/model_zoo``: Hugging Face, torchvision and timm models, tiny
random configurations).

For each model, in one process: ``eval()`` under ``no_grad``, the eager
module, ``torch.compile(model, backend="hlobridge", dynamic=False)`` and
``torch.compile(model, dynamic=False)`` (inductor) are first called once
(trace and compile, not timed), then timed interleaved
(``benches/e2e/timing.py``: rounds in which every variant runs one batch of
calls, in a fresh random order each round); the medians per call are
reported, with hlobridge / inductor and hlobridge / eager.

hlobridge's per-call time is then split, in a separate short loop (the
split wraps ``CompiledGraph.__call__``, which the timed loop does not):

- ``pjrt``: seconds inside the native runtime per call, summed over the
  programs a call runs (the receipts' ``run_time_s``: input views, the
  execution and the wait for it, output export);
- ``native``: the rest of the native call (the receipts' ``total_time_s``
  minus ``run_time_s``: mode and argument checks, DLPack import of the
  outputs, the receipt);
- ``host``: everything but ``pjrt`` (Dynamo's guards and frame, AOTAutograd's
  runtime wrappers, the model's own Python outside the graph, the
  ``CompiledGraph`` call and ``native``). Inductor pays the same Dynamo
  and AOTAutograd costs; its kernels run inside its wrapper code, so its
  time is not split. Measured per call in the same loop (median of wall
  minus ``pjrt``); the wrapper that reads the receipts adds a little.

The 1-, 5- and 15-minute load averages are printed before and after: on a
shared machine the numbers are noise (eager torch's OpenMP threads suffer
most).

Run:  PJRT_DEVICE=CPU .venv/bin/python benches/backend_overhead.py
      [--models hf-gpt2,tv-resnet18] [--reps 15] [--batch-s 0.05] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "python"))
sys.path.insert(0, str(HERE / "e2e"))

import hlobridge as hb  # noqa: E402
from hlobridge import _native  # noqa: E402
from hlobridge.dynamo import CompiledGraph  # noqa: E402
from model_zoo import MODELS, by_name  # noqa: E402
from model_zoo.spec import ZooModel, calibrate_batchnorm  # noqa: E402
from timing import interleaved  # noqa: E402  (benches/e2e/timing.py)

HB, EAGER, INDUCTOR = "hlobridge", "eager", "inductor"
SEED = 20240917


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _split(fn: Callable[[], Any], calls: int) -> dict[str, float]:
    """Per-call seconds of ``fn`` (one hlobridge model call): ``pjrt`` /
    ``native`` summed over the receipts of the programs it runs (see the
    module docs), and ``host``, the median over calls of the call's wall time
    minus its ``pjrt``; ``programs``: executions per call."""
    acc = [0.0, 0.0, 0.0]
    hosts: list[float] = []
    call = CompiledGraph.__call__

    def counted(self: CompiledGraph, *args: Any) -> Any:
        before = _native.stats()["executions"]
        out = call(self, *args)
        if _native.stats()["executions"] != before:
            rec = hb.last_receipt()
            if rec is not None:
                acc[0] += rec.run_time_s
                acc[1] += rec.total_time_s - rec.run_time_s
                acc[2] += 1
        return out

    CompiledGraph.__call__ = counted  # type: ignore[method-assign]
    try:
        for _ in range(3):
            fn()
        acc[:] = [0.0, 0.0, 0.0]
        for _ in range(calls):
            before = acc[0]
            t0 = time.perf_counter()
            fn()
            hosts.append(time.perf_counter() - t0 - (acc[0] - before))
    finally:
        CompiledGraph.__call__ = call  # type: ignore[method-assign]
    return {"pjrt": acc[0] / calls, "native": acc[1] / calls, "programs": acc[2] / calls,
            "host": statistics.median(hosts)}


def bench_model(spec: ZooModel, reps: int, batch_s: float) -> dict[str, Any]:
    # Each model starts from a fresh Dynamo: the Hugging Face models share
    # wrapper frames whose recompile limit (8) would otherwise leave the
    # later ones running eagerly under both backends.
    torch._dynamo.reset()
    torch.manual_seed(SEED)
    model = spec.build()
    calibrate_batchnorm(spec, model)
    model.eval()
    xs = spec.inputs()
    fns: dict[str, Callable[[], Any]] = {}
    errors: dict[str, str] = {}
    slowest = 0.0
    with torch.no_grad():
        eager_m = copy.deepcopy(model)
        fns[EAGER] = lambda: spec.logits(eager_m, *xs)
        for name, backend in ((HB, "hlobridge"), (INDUCTOR, "inductor")):
            m = torch.compile(copy.deepcopy(model), backend=backend, dynamic=False)
            f = (lambda m=m: spec.logits(m, *xs))
            try:
                f()
            except Exception as e:  # noqa: BLE001 - reported in the row
                errors[name] = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
                continue
            fns[name] = f
        for f in fns.values():
            f()
            t0 = time.perf_counter()
            f()
            slowest = max(slowest, time.perf_counter() - t0)
        batch = max(1, min(200, int(batch_s / max(slowest, 1e-6))))
        stats = interleaved(fns, reps=reps, batch=batch, warmup=3)
        row: dict[str, Any] = {"model": spec.name, "batch": batch, "errors": errors}
        for k, s in stats.items():
            row[k] = s["median_us"]
        if HB in fns:
            split = _split(fns[HB], max(20, batch * 3))
            row["pjrt_us"] = split["pjrt"] * 1e6
            row["native_us"] = split["native"] * 1e6
            row["programs"] = split["programs"]
            row["host_us"] = split["host"] * 1e6
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated zoo names (default: all)")
    ap.add_argument("--reps", type=int, default=15, help="interleaved rounds")
    ap.add_argument("--batch-s", type=float, default=0.05,
                    help="seconds per batch of the slowest variant")
    ap.add_argument("--json", default="", help="write the rows here")
    ap.add_argument("--torch-threads", type=int, default=0,
                    help="torch intra-op threads (default: torch's, the core count)")
    a = ap.parse_args()
    if a.torch_threads:
        torch.set_num_threads(a.torch_threads)
    specs = [by_name(n) for n in a.models.split(",")] if a.models else list(MODELS)
    print(f"torch.compile inference, per-call medians in us (torch {torch.__version__}, "
          f"{torch.get_num_threads()} torch threads, {os.cpu_count()} cores); "
          f"load average at start: {_load()}", flush=True)
    hdr = (f"{'model':<24} {'eager':>8} {'inductor':>9} {'hlobridge':>9} {'hb/ind':>7} "
           f"{'hb/eager':>8} {'pjrt':>8} {'host':>7} {'native':>7} {'progs':>5}")
    print(hdr, flush=True)
    rows = []
    for spec in specs:
        try:
            row = bench_model(spec, a.reps, a.batch_s)
        except Exception as e:  # noqa: BLE001 - one model's failure is not the run's
            row = {"model": spec.name, "errors": {"all": f"{type(e).__name__}: {e}"[:200]}}
        rows.append(row)
        if HB in row and INDUCTOR in row and EAGER in row:
            print(f"{spec.name:<24} {row[EAGER]:8.0f} {row[INDUCTOR]:9.0f} {row[HB]:9.0f} "
                  f"{row[HB] / row[INDUCTOR]:7.2f} {row[HB] / row[EAGER]:8.2f} "
                  f"{row['pjrt_us']:8.0f} {row['host_us']:7.0f} {row['native_us']:7.1f} "
                  f"{row['programs']:5.1f}", flush=True)
        else:
            print(f"{spec.name:<24} errors: {row['errors']}", flush=True)
    ok = [r for r in rows if HB in r and INDUCTOR in r]
    if ok:
        gm = math.exp(statistics.fmean(math.log(r[HB] / r[INDUCTOR]) for r in ok))
        faster = sum(r[INDUCTOR] < r[HB] for r in ok)
        print(f"geomean hlobridge/inductor {gm:.3f} over {len(ok)} models "
              f"(inductor faster on {faster}); median host {statistics.median(r['host_us'] for r in ok):.0f} us, "
              f"median native {statistics.median(r['native_us'] for r in ok):.1f} us")
    print(f"load average at end: {_load()}")
    if a.json:
        Path(a.json).write_text(json.dumps({"load_end": _load(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
