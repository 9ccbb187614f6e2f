"""f32 matrix products at real-size shapes: torch eager (MKL/oneDNN sgemm)
against hlobridge's host GEMM kernel and against XLA's own dot, end to end
through ``hb.call_jax``.

Variants, timed interleaved (a random order each round) in one process:

- ``eager``: ``torch.mm`` / ``torch.bmm`` (the anchor);
- ``host``: ``hb.call_jax(jnp.matmul ...)`` compiled with
  ``HLOBRIDGE_HOST_GEMM=all``, so the product runs in the host kernel;
- ``xla``: the same compiled with ``HLOBRIDGE_HOST_GEMM=off`` (XLA:CPU's dot).

The host kernel's library is chosen once per process
(``HLOBRIDGE_GEMM_KERNEL``), so each library runs in its own worker process
(``gemm``, then ``matrixmultiply``), each with its own eager anchor; the
ratios against eager are the comparable figures. ``uptime``'s load average
is printed with every table: on a shared machine eager torch's OpenMP
threads suffer most, so a loaded run flatters hlobridge.

Layouts: ``nn`` is ``a @ b``; ``nt`` is ``a @ b.T`` with ``b`` stored
``[n, k]`` (a ``Linear``: ``x @ W.T``); ``tn`` is ``a.T @ b`` (a weight
gradient). Shapes are ``batch x m x k x n``.

Run:  .venv/bin/python benches/gemm_bench.py [--rounds 7] [--quick]
      [--kernels gemm,matrixmultiply] [--json]
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
from collections.abc import Callable
from typing import Any

# (label, batch, m, k, n, layout)
SHAPES: list[tuple[str, int, int, int, int, str]] = [
    ("128^3", 1, 128, 128, 128, "nn"),
    ("256^3", 1, 256, 256, 256, "nn"),
    ("512x768x768", 1, 512, 768, 768, "nt"),
    ("1024x768x768", 1, 1024, 768, 768, "nn"),
    ("1024x768x768", 1, 1024, 768, 768, "nt"),
    ("1024x768x768", 1, 1024, 768, 768, "tn"),
    ("1024x768x3072", 1, 1024, 768, 3072, "nt"),
    ("1024x3072x768", 1, 1024, 3072, 768, "nt"),
    ("1024x3072x768", 1, 1024, 3072, 768, "tn"),
    ("96x128x64x128", 96, 128, 64, 128, "nt"),
    ("96x128x128x64", 96, 128, 128, 64, "nn"),
]
QUICK = {"256^3", "1024x768x768", "1024x3072x768", "96x128x64x128"}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def worker(rounds: int, quick: bool) -> list[dict[str, Any]]:
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    import jax.numpy as jnp
    import torch

    import hlobridge as hb

    torch.manual_seed(0)
    rows: list[dict[str, Any]] = []
    for label, batch, m, k, n, layout in SHAPES:
        if quick and label not in QUICK:
            continue
        # Operands stored as the layout says; batch 1 is a plain 2-D product.
        a_shape = (k, m) if layout[0] == "t" else (m, k)
        b_shape = (n, k) if layout[1] == "t" else (k, n)
        if batch > 1:
            a_shape, b_shape = (batch, *a_shape), (batch, *b_shape)
        a = torch.randn(a_shape)
        b = torch.randn(b_shape)

        def tr(x: Any, flag: str) -> Any:
            return x.transpose(-1, -2) if flag == "t" else x

        def trj(x: Any, flag: str) -> Any:
            return jnp.swapaxes(x, -1, -2) if flag == "t" else x

        def eager() -> Any:
            return torch.matmul(tr(a, layout[0]), tr(b, layout[1]))

        def make(setting: str) -> Callable[[], Any]:
            # A fresh function per variant: call_jax caches per function, and
            # the lowering setting is read when it compiles.
            def f(x: Any, y: Any) -> Any:
                return jnp.matmul(trj(x, layout[0]), trj(y, layout[1]))

            os.environ["HLOBRIDGE_HOST_GEMM"] = setting
            hb.call_jax(f, a, b)  # compile now, under this setting
            return lambda: hb.call_jax(f, a, b)

        variants = {"eager": eager, "host": make("all"), "xla": make("off")}
        os.environ.pop("HLOBRIDGE_HOST_GEMM", None)
        want = eager()
        scale = float(want.abs().max())
        errs = {v: float((fn() - want).abs().max()) / scale for v, fn in variants.items()}
        flops = 2.0 * batch * m * k * n
        reps = max(1, int(3e8 / flops))
        times: dict[str, list[float]] = {v: [] for v in variants}
        order = list(variants)
        for r in range(rounds + 1):
            random.shuffle(order)
            for v in order:
                fn = variants[v]
                t0 = time.perf_counter()
                for _ in range(reps):
                    fn()
                dt = (time.perf_counter() - t0) / reps
                if r:
                    times[v].append(dt)
        med = {v: statistics.median(t) for v, t in times.items()}
        rows.append(
            {
                "shape": f"{label} {layout}",
                "gflops": {v: flops / t / 1e9 for v, t in med.items()},
                "vs_eager": {v: med[v] / med["eager"] for v in med},
                "rel_err": errs,
                "load": load(),
            }
        )
    return rows


def table(kernel: str, rows: list[dict[str, Any]]) -> str:
    out = [
        f"kernel={kernel}  (time / eager: < 1 is faster than eager)",
        f"{'shape':<22} {'eager GF/s':>10} {'host GF/s':>10} {'xla GF/s':>10}"
        f" {'host/eager':>10} {'xla/eager':>10} {'host/xla':>9}  load",
    ]
    for r in rows:
        g, v = r["gflops"], r["vs_eager"]
        out.append(
            f"{r['shape']:<22} {g['eager']:>10.1f} {g['host']:>10.1f} {g['xla']:>10.1f}"
            f" {v['host']:>10.2f} {v['xla']:>10.2f} {v['host'] / v['xla']:>9.2f}  {r['load']}"
        )
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="four shapes only")
    p.add_argument("--kernels", default="gemm,matrixmultiply")
    p.add_argument("--json", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.rounds, args.quick)))
        return
    import torch

    print(f"# load at start: {load()}; torch threads {torch.get_num_threads()}; cores {os.cpu_count()}")
    results = {}
    for kernel in args.kernels.split(","):
        env = dict(os.environ, HLOBRIDGE_GEMM_KERNEL=kernel)
        cmd = [sys.executable, __file__, "--worker", "--rounds", str(args.rounds)]
        if args.quick:
            cmd.append("--quick")
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode:
            sys.exit(f"worker for {kernel} failed:\n{proc.stderr[-4000:]}")
        results[kernel] = json.loads(proc.stdout.strip().splitlines()[-1])
        if not args.json:
            print(table(kernel, results[kernel]), flush=True)
            worst = max(max(r["rel_err"].values()) for r in results[kernel])
            print(f"# max |result - eager| / max|eager|: {worst:.1e}\n")
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
