"""``make bench-real`` (issue #25): real-size models (``models.py``) timed
through eager torch, inductor (``torch.compile``'s default backend) and
hlobridge, at inference and for one whole training step (AdamW), with each
path's peak RSS. Method and options: ``docs/bench-real.md``.

Per (model, path) group: three worker processes (``worker.py``), started
and compiled one after the other (so each compile time is measured alone),
then ``--rounds`` interleaved rounds: every round, in a fresh random order,
each worker runs one batch of calls while the others wait on their pipe.
Reported per variant: median ms per call over the rounds, the first call
(trace + compile) in seconds, the peak RSS of the whole process and the
peak during the timed rounds alone (RSS high-water mark reset after the
warm-up). Ratios are medians of per-round paired ratios.

Shared-machine guard: the 1-minute load average is checked before the run
(``--max-load``, refuse unless ``--force``), and during each group's timed
rounds the CPU time used by processes other than this bench is measured
from ``/proc/stat`` (``--max-other`` cores); a group over it is marked
``busy`` and flagged in the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import models  # noqa: E402
import report  # noqa: E402

VARIANTS = ("eager", "inductor", "hlobridge")
PATHS = ("infer", "train")
RATIOS = (("hlobridge", "eager"), ("inductor", "eager"), ("hlobridge", "inductor"))
# The setting docs/threads.md recommends for torch next to hlobridge.
DEFAULT_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


class Worker:
    """One worker process and its JSON-line pipe."""

    def __init__(self, job: dict[str, Any], env: dict[str, str], log: Path) -> None:
        self.job = job
        self.log = open(log, "w")  # noqa: SIM115 - closed in close()
        self.p = subprocess.Popen([sys.executable, str(HERE / "worker.py"), json.dumps(job)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.log, env=env, text=True, bufsize=1)

    def read(self, timeout: float) -> dict[str, Any]:
        assert self.p.stdout is not None
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"no reply within {timeout:.0f} s")
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited (status {self.p.wait()}); see {self.log.name}")
        return json.loads(line)  # type: ignore[no-any-return]

    def ask(self, timeout: float, **cmd: Any) -> dict[str, Any]:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        return self.read(timeout)

    def cpu_s(self) -> float:
        return _proc_cpu(self.p.pid)

    def close(self) -> None:
        try:
            if self.p.poll() is None:
                assert self.p.stdin is not None
                self.p.stdin.write('{"cmd": "quit"}\n')
                self.p.stdin.flush()
                self.p.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()
            self.p.wait()
        self.log.close()


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (``/proc/stat``)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle + iowait
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _ratio(a: list[float], b: list[float]) -> dict[str, float]:
    r = sorted(x / y for x, y in zip(a, b))
    return {"median": statistics.median(r), "min": r[0], "max": r[-1], "rounds": len(r)}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def _git_head() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_group(name: str, path: str, args: argparse.Namespace, env: dict[str, str],
              logs: Path) -> dict[str, Any]:
    """Compile, warm and time one (model, path) group."""
    row: dict[str, Any] = {"model": name, "path": path, "config": models.get(name).config,
                           "variants": {}, "errors": {}, "ratios": {}}
    workers: dict[str, Worker] = {}
    t_group = time.perf_counter()
    try:
        for v in args.variants:
            job = {"model": name, "path": path, "variant": v, "optimizer": args.optimizer,
                   "lr": args.lr, "threads": args.threads,
                   "save": str(logs / f"{name}-{path}-{v}.pt")}
            w = Worker(job, env, logs / f"{name}-{path}-{v}.log")
            try:
                rep = w.read(args.compile_timeout)
            except (TimeoutError, RuntimeError) as e:
                rep = {"error": f"{type(e).__name__}: {e}"}
            if "error" in rep:
                row["errors"][v] = rep["error"]
                w.close()
                print(f"  {name} {path} {v}: ERROR {rep['error']}", flush=True)
                continue
            workers[v] = w
            row["variants"][v] = {"first_call_s": rep["first_s"], "build_s": rep["build_s"],
                                  "rss_build_mib": rep["rss_build_mib"],
                                  "peak_compile_mib": rep["peak_mib"], "firsts": rep["firsts"]}
            print(f"  {name} {path} {v}: first call {rep['first_s']:.1f} s, "
                  f"peak {rep['peak_mib']:.0f} MiB", flush=True)
        if not workers:
            return row
        # Warm-up, and size the batch of calls per round on the slowest variant.
        slowest = 0.0
        for w in workers.values():
            for _ in range(args.warmup):
                slowest = max(slowest, w.ask(args.call_timeout, cmd="run", n=1)["s"])
        n = max(1, min(args.max_calls, round(args.batch_s / max(slowest, 1e-6))))
        for w in workers.values():
            w.ask(30, cmd="reset_peak")
        times: dict[str, list[float]] = {v: [] for v in workers}
        order = list(workers.items())
        rng = random.Random(0)
        ours0 = sum(w.cpu_s() for w in workers.values()) + _proc_cpu(os.getpid())
        busy0, wall0, load0 = _machine_busy_s(), time.perf_counter(), os.getloadavg()[0]
        for _ in range(args.rounds):
            rng.shuffle(order)
            for v, w in order:
                times[v].append(w.ask(args.call_timeout * n, cmd="run", n=n)["s"] / n)
        wall = time.perf_counter() - wall0
        ours = sum(w.cpu_s() for w in workers.values()) + _proc_cpu(os.getpid()) - ours0
        other = max(0.0, (_machine_busy_s() - busy0 - ours) / wall)
        row.update(calls_per_round=n, rounds=args.rounds, timed_s=wall, other_cores=other,
                   loadavg_1m=[load0, os.getloadavg()[0]], busy=other > args.max_other)
        for v, w in workers.items():
            mem = w.ask(30, cmd="mem")
            st = row["variants"][v]
            ts = sorted(times[v])
            st.update(median_ms=statistics.median(ts) * 1e3, min_ms=ts[0] * 1e3,
                      max_ms=ts[-1] * 1e3, rounds_ms=[t * 1e3 for t in times[v]],
                      peak_run_mib=mem["peak_mib"], peak_total_mib=max(mem["peak_mib"],
                                                                       st["peak_compile_mib"]))
        for a, b in RATIOS:
            if a in times and b in times:
                row["ratios"][f"{a}/{b}"] = _ratio(times[a], times[b])
        row["agreement"] = _agreement(row, path, logs, name)
    except (TimeoutError, RuntimeError, OSError) as e:
        row["error"] = f"{type(e).__name__}: {e}"
    finally:
        for w in workers.values():
            w.close()
        row["group_s"] = time.perf_counter() - t_group
    print("  " + report.line(row), flush=True)
    return row


def _agreement(row: dict[str, Any], path: str, logs: Path, name: str) -> dict[str, float]:
    """Each compiled path against eager: the first two training losses
    (absolute difference), or the largest difference of the first logits
    (up to 65536 values) relative to eager's largest magnitude."""
    out: dict[str, float] = {}
    var = row["variants"]
    if "eager" not in var:
        return out
    if path == "train":
        for v in var:
            if v != "eager":
                out[v] = max(abs(a - b) for a, b in zip(var[v]["firsts"], var["eager"]["firsts"]))
        return out
    import torch

    ref = torch.load(logs / f"{name}-{path}-eager.pt")
    scale = float(ref.abs().max()) or 1.0
    for v in var:
        if v != "eager":
            got = torch.load(logs / f"{name}-{path}-{v}.pt")
            out[v] = float((got - ref).abs().max()) / scale
    return out


def main(argv: list[str] | None = None) -> int:
    cores = os.cpu_count() or 1
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(models.NAMES),
                    help=f"comma-separated (default all: {','.join(models.NAMES)})")
    ap.add_argument("--paths", default=",".join(PATHS), help="infer,train")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="eager,inductor,hlobridge")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up calls per variant after "
                    "the first (compiling) call and the second (default 1)")
    ap.add_argument("--batch-s", type=float, default=0.5,
                    help="seconds of calls per variant per round (default 0.5; at least 1 call)")
    ap.add_argument("--max-calls", type=int, default=20)
    ap.add_argument("--threads", type=int, default=cores, help="torch intra-op threads")
    ap.add_argument("--optimizer", choices=("auto", "adamw", "adam"), default="auto",
                    help="auto: AdamW if hb.optim.AdamW exists, else Adam (labelled)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--max-load", type=float, default=0.75 * cores,
                    help="refuse to start above this 1-minute load average (default 0.75 x cores)")
    ap.add_argument("--max-other", type=float, default=0.25,
                    help="mark a group busy when other processes used more than this many "
                    "cores during its timed rounds (default 0.25)")
    ap.add_argument("--force", action="store_true", help="run even above --max-load")
    ap.add_argument("--wait-quiet", type=float, default=180.0,
                    help="seconds to wait for the load average to fall under --max-load "
                    "before refusing (default 180: the 1-minute average decays slowly after "
                    "a build, e.g. make setup's)")
    ap.add_argument("--budget-min", type=float, default=25.0,
                    help="skip the groups not started after this many minutes (default 25)")
    ap.add_argument("--compile-timeout", type=float, default=900.0)
    ap.add_argument("--call-timeout", type=float, default=120.0)
    ap.add_argument("--env", action="append", default=[], metavar="K=V",
                    help=f"environment of the workers (default {DEFAULT_ENV}); repeatable")
    ap.add_argument("--warm-caches", action="store_true",
                    help="keep the user's inductor and hlobridge compile caches (default: "
                    "fresh empty ones, so first-call times are cold compiles)")
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "real"))
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows of an earlier real.json in --out for the (model, path) "
                    "groups this run does not time (a full run split over several calls)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the timed rows of an earlier real.json in --out and time only "
                    "the groups it lacks (skipped, failed or missing): a run cut by the budget "
                    "is finished by running again with --resume")
    ap.add_argument("--docs", default=None, help="also copy the JSON, table and plot here "
                    "(make bench-real: docs/bench/real)")
    args = ap.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.paths = [p for p in args.paths.split(",") if p]
    args.variants = [v for v in args.variants.split(",") if v]
    for m in args.models:
        models.get(m)
    bad = [p for p in args.paths if p not in PATHS] + [v for v in args.variants
                                                       if v not in VARIANTS]
    if bad:
        ap.error(f"unknown paths/variants {bad}")
    import hlobridge as hb

    if args.optimizer == "auto":
        args.optimizer = "adamw" if hasattr(hb.optim, "AdamW") else "adam"
    env = dict(os.environ)
    env.update(DEFAULT_ENV)
    env.update(dict(kv.split("=", 1) for kv in args.env))
    env.setdefault("PJRT_DEVICE", "CPU")
    tmp = tempfile.mkdtemp(prefix="bench-real-")
    if not args.warm_caches:
        env["HLOBRIDGE_CACHE_DIR"] = os.path.join(tmp, "hlobridge")
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
    out = Path(args.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    waited = time.perf_counter()
    while load > args.max_load and not args.force and \
            time.perf_counter() - waited < args.wait_quiet:
        time.sleep(10)
        load = os.getloadavg()[0]
    print(f"bench-real: load average {load:.2f} (limit --max-load {args.max_load:.2f}), "
          f"other-process limit --max-other {args.max_other:.2f} cores; optimizer "
          f"{args.optimizer}; torch threads {args.threads}; env "
          f"{ {k: env[k] for k in sorted(set(DEFAULT_ENV) | {kv.split('=')[0] for kv in args.env})} }",
          flush=True)
    if load > args.max_load and not args.force:
        print(f"bench-real: REFUSED: the 1-minute load average {load:.2f} is above "
              f"{args.max_load:.2f}: the machine is shared and eager torch's timings would be "
              "worthless (--force to run anyway; rows are still checked one by one)",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    done: set[tuple[str, str]] = set()
    if (args.merge or args.resume) and (out / "real.json").exists():
        todo = {(m, p) for m in args.models for p in args.paths}
        for r in json.loads((out / "real.json").read_text())["rows"]:
            key = (r["model"], r["path"])
            if args.resume and r.get("ratios") and "error" not in r:
                done.add(key)
                rows.append(r)
            elif args.merge and key not in todo:
                rows.append(r)
    # Path-major: every inference group first, then the training steps (whose
    # inductor compiles take minutes), so a budget cut drops training rows.
    for path in args.paths:
        for name in args.models:
            if path not in models.get(name).paths or (name, path) in done:
                continue
            if time.perf_counter() - t0 > args.budget_min * 60:
                rows.append({"model": name, "path": path, "config": models.get(name).config,
                             "skipped": f"time budget of {args.budget_min:g} min spent; "
                             "finish with --resume"})
                print(f"  {name} {path}: skipped (budget)", flush=True)
                continue
            rows.append(run_group(name, path, args, env, logs))
            _write(out, args, env, rows, load, t0)
    result = _write(out, args, env, rows, load, t0)
    shutil.rmtree(tmp, ignore_errors=True)
    print(report.markdown(result))
    print(f"bench-real: {result['wall_s'] / 60:.1f} min; results in {out}", flush=True)
    if args.docs:
        docs = Path(args.docs)
        docs.mkdir(parents=True, exist_ok=True)
        for f in ("real.json", "real.md", "real.png"):
            if (out / f).exists():
                shutil.copy(out / f, docs / f)
    return 0


def _write(out: Path, args: argparse.Namespace, env: dict[str, str], rows: list[dict[str, Any]],
           load: float, t0: float) -> dict[str, Any]:
    import torch
    import transformers

    result = {
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "commit": _git_head(),
                    "torch": torch.__version__, "transformers": transformers.__version__},
        "settings": {"rounds": args.rounds, "warmup": args.warmup, "batch_s": args.batch_s,
                     "threads": args.threads, "optimizer": args.optimizer, "lr": args.lr,
                     "max_load": args.max_load, "max_other": args.max_other,
                     "cold_caches": not args.warm_caches,
                     "env": {k: env[k] for k in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS",
                                                 "PJRT_NPROC", "HLOBRIDGE_SPIN_US") if k in env}},
        "loadavg_start": load, "loadavg_end": os.getloadavg()[0],
        "wall_s": time.perf_counter() - t0,
        "rows": sorted(rows, key=lambda r: (models.NAMES.index(r["model"]),
                                            PATHS.index(r["path"]))),
    }
    (out / "real.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "real.md").write_text(report.markdown(result))
    report.plot(result, out / "real.png")
    return result


if __name__ == "__main__":
    sys.exit(main())
