"""Thread-pool settings for a mixed program (issue #25, "Threads";
``docs/threads.md``): eager torch layers followed by an hlobridge program,
in a loop, in one process, under several environment settings.

Each setting runs in fresh processes (the OpenMP runtime and the XLA client
read their settings once, at start-up), the settings round-robin over
``--procs`` process rounds. In each process, after compiling and warming
up, three loops are timed interleaved (fresh random order every round):
the eager part alone, the hlobridge part alone and the two in sequence
(``mixed``). ``overhead`` = mixed / (eager + hlobridge) - 1: the time the
two pools cost each other when they alternate.

    .venv/bin/python benches/real_size/threads.py [--procs 3] [--out docs/bench/real]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SETTINGS: dict[str, dict[str, str | None]] = {
    "default": {"OMP_WAIT_POLICY": None},
    "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "OMP_WAIT_POLICY=ACTIVE": {"OMP_WAIT_POLICY": "ACTIVE"},
    "OMP_NUM_THREADS=1": {"OMP_WAIT_POLICY": None, "OMP_NUM_THREADS": "1"},
    "PJRT_NPROC=1": {"OMP_WAIT_POLICY": None, "PJRT_NPROC": "1"},
    "PASSIVE + PJRT_NPROC=1": {"OMP_WAIT_POLICY": "PASSIVE", "PJRT_NPROC": "1"},
}


def worker(rows: int, rounds: int, iters: int) -> dict[str, float]:
    """One process: the three loops' median ms per iteration."""
    import torch

    torch.manual_seed(0)

    def mlp() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(768, 2048), torch.nn.GELU(),
                                   torch.nn.Linear(2048, 768), torch.nn.LayerNorm(768)).eval()

    eager_part, hb_model = mlp(), mlp()
    hb_part = torch.compile(hb_model, backend="hlobridge", dynamic=False)
    x = torch.randn(rows, 768)

    def eager() -> torch.Tensor:
        return eager_part(x)

    def hb() -> torch.Tensor:
        return hb_part(x)

    def mixed() -> torch.Tensor:
        return hb_part(eager_part(x))

    loops = {"eager": eager, "hlobridge": hb, "mixed": mixed}
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
    from timing import interleaved  # the project's interleaved-rounds timer

    with torch.no_grad():
        stats = interleaved({k: (lambda fn=fn: float(fn()[0, 0])) for k, fn in loops.items()},
                            reps=rounds, batch=iters, warmup=3)
    out: dict[str, float] = {k: v["median_us"] / 1e3 for k, v in stats.items()}
    out["torch_threads"] = torch.get_num_threads()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=3, help="process rounds per setting")
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds inside a process")
    ap.add_argument("--iters", type=int, default=10, help="iterations per round")
    ap.add_argument("--rows", type=int, default=256, help="batch rows of the 768-wide MLPs")
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "real"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.rows, args.rounds, args.iters)))
        return 0
    names = [s for s in args.settings.split(",") if s]
    load0 = os.getloadavg()[0]
    runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    t0 = time.perf_counter()
    for p in range(args.procs):
        order = names[:]
        random.Random(p).shuffle(order)
        for name in order:
            env = dict(os.environ)
            env.setdefault("PJRT_DEVICE", "CPU")
            for k, v in SETTINGS[name].items():
                if v is None:
                    env.pop(k, None)
                else:
                    env[k] = v
            cmd = [sys.executable, __file__, "--worker", "--rows", str(args.rows),
                   "--rounds", str(args.rounds), "--iters", str(args.iters)]
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(res.stdout.strip().splitlines()[-1]))
            print(f"  {name}: {runs[name][-1]}", flush=True)
    rows = []
    for name in names:
        med = {k: statistics.median(r[k] for r in runs[name])
               for k in ("eager", "hlobridge", "mixed")}
        rows.append({"setting": name, **med, "torch_threads": runs[name][0]["torch_threads"],
                     "overhead": med["mixed"] / (med["eager"] + med["hlobridge"]) - 1})
    base = next(r for r in rows if r["setting"] == "default")["mixed"] if "default" in names \
        else None
    result = {"loadavg": [load0, os.getloadavg()[0]], "cores": os.cpu_count(),
              "procs": args.procs, "rounds": args.rounds, "iters": args.iters,
              "rows_x_768": args.rows, "wall_s": time.perf_counter() - t0, "runs": runs,
              "table": rows}
    lines = [f"Mixed program (eager MLP {args.rows}x768->2048->768 then the same MLP through "
             f"hlobridge), ms per iteration, median over {args.procs} processes per setting "
             f"(each the median of {args.rounds} interleaved rounds of {args.iters}); "
             f"{os.cpu_count()} cores; load average {load0:.2f} -> {os.getloadavg()[0]:.2f}.", "",
             *([f"**Shared machine**: load average above {0.75 * (os.cpu_count() or 1):.1f}; "
                "spinning OpenMP threads are hit hardest by other processes, so these numbers "
                "overstate the differences. Rerun on a quiet machine.", ""]
               if max(load0, os.getloadavg()[0]) > 0.75 * (os.cpu_count() or 1) else []),
             "| setting | torch threads | eager alone | hlobridge alone | mixed | "
             "mixed / (eager + hlobridge) | mixed / default's mixed |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        rel = f"{r['mixed'] / base:.2f}×" if base else "–"
        lines.append(f"| {r['setting']} | {r['torch_threads']} | {r['eager']:.2f} | "
                     f"{r['hlobridge']:.2f} | {r['mixed']:.2f} | {1 + r['overhead']:.2f}× | "
                     f"{rel} |")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "threads.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "threads.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
