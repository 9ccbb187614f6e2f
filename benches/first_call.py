"""First-call latency of ``hlobridge.call_jax`` against ``jax.jit``, each in a
new process.

Each sample spawns a fresh Python (``PJRT_DEVICE=CPU``) that imports its
stack, makes a (256, 256) float32 NumPy input and times its FIRST call of
the same JAX function (``tanh(x @ x) * 0.5 + x``), from the NumPy array to a
result on the host, so that each side pays its own runtime start:

- ``call_jax``: ``import torch, jax, hlobridge`` then
  ``hb.call_jax(fn, torch.from_numpy(a))`` (hlobridge's PJRT client, JAX's
  tracing and lowering, hlobridge's compile, run);
- ``jax.jit``: ``import jax`` then ``jax.jit(fn)(a).block_until_ready()``
  (JAX's backend start, tracing, lowering, compile, run).

The headline compares cold starts: hlobridge runs with ``HLOBRIDGE_CACHE=0``
(no persistent compile cache; JAX's is off by default), so both sides
compile. A third kind of process reports hlobridge with its disk cache warm
(the default setting, after the first run on a machine). It also reports
each process's import time and whether the eager call imported
``torch._dynamo`` (it must not: that import costs seconds). The kinds of
process are interleaved (ABCABC...) so that machine load hits them alike;
the headline is the ratio of medians, with ``uptime``'s load.

Run:  .venv/bin/python benches/first_call.py [--samples 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# The function and input both kinds of process time, defined once so that
# they stay the same.
WORKLOAD = r"""
def fn(x):
    return jnp.tanh(x @ x) * 0.5 + x
a = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)
"""

CALL_JAX = r"""
import time, sys, json
t0 = time.perf_counter()
import numpy as np, torch, jax, jax.numpy as jnp
import hlobridge as hb
t1 = time.perf_counter()""" + WORKLOAD + r"""t2 = time.perf_counter()
out = hb.call_jax(fn, torch.from_numpy(a))
float(out[0, 0])
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "first_call_s": t3 - t2,
                  "dynamo_imported": "torch._dynamo" in sys.modules,
                  "sympy_imported": "sympy" in sys.modules,
                  "compiles": hb.stats()["compiles"]}))
"""

JAX_JIT = r"""
import time, sys, json
t0 = time.perf_counter()
import numpy as np, jax, jax.numpy as jnp
t1 = time.perf_counter()""" + WORKLOAD + r"""t2 = time.perf_counter()
out = jax.jit(fn)(a)
out.block_until_ready()
float(out[0, 0])
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "first_call_s": t3 - t2}))
"""


def sample(code: str, **extra: str) -> dict[str, float]:
    env = {**os.environ, "PJRT_DEVICE": "CPU", "JAX_PLATFORMS": "cpu", **extra}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=5, help="processes of each kind (default 5)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    hb_runs: list[dict[str, float]] = []
    warm_runs: list[dict[str, float]] = []
    jax_runs: list[dict[str, float]] = []
    sample(CALL_JAX)  # fill the disk cache for the warm kind
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    for _ in range(args.samples):
        hb_runs.append(sample(CALL_JAX, HLOBRIDGE_CACHE="0"))
        jax_runs.append(sample(JAX_JIT))
        warm_runs.append(sample(CALL_JAX))
    wall = time.perf_counter() - t0
    load_after = os.getloadavg()[0]

    def med(runs: list[dict[str, float]], k: str) -> float:
        return statistics.median(r[k] for r in runs)

    res = {
        "samples": args.samples,
        "call_jax_first_call_s": med(hb_runs, "first_call_s"),
        "call_jax_disk_cache_warm_first_call_s": med(warm_runs, "first_call_s"),
        "jax_jit_first_call_s": med(jax_runs, "first_call_s"),
        "call_jax_import_s": med(hb_runs, "import_s"),
        "jax_import_s": med(jax_runs, "import_s"),
        "cold_runs_compiled": all(r["compiles"] == 1 for r in hb_runs),
        "dynamo_imported_by_eager_call": any(r["dynamo_imported"] for r in hb_runs),
        "sympy_imported_by_eager_call": any(r["sympy_imported"] for r in hb_runs),
        "load_1min": [load_before, load_after],
        "wall_s": wall,
    }
    res["first_call_ratio"] = res["call_jax_first_call_s"] / res["jax_jit_first_call_s"]
    res["with_imports_ratio"] = ((res["call_jax_import_s"] + res["call_jax_first_call_s"])
                                 / (res["jax_import_s"] + res["jax_jit_first_call_s"]))
    print(f"first call in a new process (median of {args.samples}, interleaved; "
          f"load {load_before:.1f} -> {load_after:.1f}):")
    print(f"  hb.call_jax  {res['call_jax_first_call_s'] * 1e3:8.1f} ms   "
          f"(HLOBRIDGE_CACHE=0; imports torch+jax+hlobridge {res['call_jax_import_s']:.2f} s)")
    print(f"  hb.call_jax  {res['call_jax_disk_cache_warm_first_call_s'] * 1e3:8.1f} ms   "
          f"(disk compile cache warm)")
    print(f"  jax.jit      {res['jax_jit_first_call_s'] * 1e3:8.1f} ms   "
          f"(imports jax {res['jax_import_s']:.2f} s)")
    print(f"  ratio call_jax / jax.jit: {res['first_call_ratio']:.2f}x first call, "
          f"{res['with_imports_ratio']:.2f}x with imports")
    print(f"  torch._dynamo imported by the eager call: {res['dynamo_imported_by_eager_call']}; "
          f"sympy: {res['sympy_imported_by_eager_call']}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
