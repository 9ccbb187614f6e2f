"""Loopback load test of ``hlobridge serve`` (for ``make bench``, not CI).

Exports the hybrid test model (torch + JAX + Pallas interpret; batch sizes
1/8/32), then for ``hlobridge serve`` without and with ``--batching`` and
1, 8 and 64 concurrent clients (threads, one gRPC channel each, batch-1
requests) measures throughput and p50/p99 latency, against the same program
run in-process (``torch.compile(backend="hlobridge")``, one thread). Every
request's output is checked against eager torch (no request lost or wrong);
the server's RSS is read before and after each run (flat = no growth beyond
noise). Bounded in count (``--requests`` per client count) and time
(``--seconds`` per run).

    .venv/bin/python benches/serve_load.py [--requests 2000] [--seconds 20] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import hlobridge as hb  # noqa: E402
from serve_helpers import Hybrid, start_server, stop_server  # noqa: E402


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def run_clients(addr: str, model: Hybrid, clients: int, total: int, seconds: float) -> dict[str, float]:
    per = max(1, total // clients)
    lat: list[float] = []
    bad = [0]
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds
    sent = [0]

    def worker(seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        mine: list[float] = []
        with hb.serve.Client(addr) as c, torch.no_grad():  # grad mode is per thread
            for _ in range(per):
                if time.perf_counter() > stop_at:
                    break
                x = torch.randn(1, 16, generator=g)
                t0 = time.perf_counter()
                try:
                    y = c.predict(x=x)["output"]
                    ok = torch.allclose(y, model(x), atol=1e-5, rtol=0)
                except hb.serve.ServeError:
                    ok = False
                mine.append(time.perf_counter() - t0)
                with lock:
                    sent[0] += 1
                    bad[0] += 0 if ok else 1
        with lock:
            lat.extend(mine)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"clients": clients, "requests": sent[0], "failed_or_wrong": bad[0],
            "throughput_rps": sent[0] / wall, "p50_ms": 1e3 * pct(lat, 0.5), "p99_ms": 1e3 * pct(lat, 0.99)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--json", type=Path, default=ROOT / "bench-results" / "serve_load.json")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = Hybrid().eval()
    torch.set_grad_enabled(False)
    out: dict[str, object] = {"cpu_count": os.cpu_count()}
    with tempfile.TemporaryDirectory() as d:
        art = Path(d) / "hybrid"
        hb.export(model, torch.randn(8, 16), path=art, batch_dim=0, batch_sizes=[1, 8, 32])
        compiled = torch.compile(model, backend="hlobridge", dynamic=False)
        x = torch.randn(1, 16)
        compiled(x)
        n, t0 = 0, time.perf_counter()
        lat = []
        while n < a.requests and time.perf_counter() - t0 < a.seconds:
            s = time.perf_counter()
            compiled(x)
            lat.append(time.perf_counter() - s)
            n += 1
        out["in_process"] = {"requests": n, "throughput_rps": n / (time.perf_counter() - t0),
                             "p50_ms": 1e3 * pct(lat, 0.5), "p99_ms": 1e3 * pct(lat, 0.99)}
        runs = []
        for batching in (False, True):
            flags = ["--batching", "--max-delay-us", "1000"] if batching else []
            proc, addr = start_server(art, "--max-queue", "1024", *flags)
            try:
                run_clients(addr, model, 1, 20, a.seconds)  # warm-up
                for clients in (1, 8, 64):
                    before = rss_kib(proc.pid)
                    r = run_clients(addr, model, clients, a.requests, a.seconds)
                    r.update(batching=batching, rss_before_kib=before, rss_after_kib=rss_kib(proc.pid))
                    runs.append(r)
                    print(json.dumps(r), flush=True)
            finally:
                stop_server(proc)
        out["served"] = runs
    print(json.dumps(out["in_process"]))
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
