"""Cold vs warm compile through the persistent compile cache, with jaxlib's
own executable serialization as the anchor.

hlobridge: runs ``_native.compile`` on one module in two fresh processes
sharing an empty cache directory: the first compiles with PJRT and writes
the serialized executable (cold), the second loads it from disk (warm). The
PJRT runtime is created before the timed call, so only ``compile`` is timed.

Anchor (``--anchor``): the same module text through jaxlib's bundled XLA CPU
client, the way JAX's own persistent compilation cache works: one fresh
process runs ``compile_and_load`` (timed) and writes
``serialize_executable``'s bytes to a file, a second fresh process runs
``deserialize_executable`` on them (timed). Both sides thus pay exactly
"compile" and "load a serialized executable" in a process that has never
seen the program, so the two warm/cold ratios are comparable.

    python benches/compile_cache_bench.py --module big.mlir [--reps 3] [--anchor] [--json]

prints ``{"cold_s", "warm_s", "ratio", ...}`` (medians over ``--reps`` pairs
of processes) with ``--json``, plus ``jaxlib_cold_s``, ``jaxlib_warm_s`` and
``jaxlib_ratio`` with ``--anchor``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

_CHILD = r"""
import json, sys, time
from hlobridge import _native
text = open(sys.argv[1]).read()
_native.runtime()  # plugin load and client creation are not timed
t0 = time.perf_counter()
exe, _hit = _native.compile(text)
dt = time.perf_counter() - t0
st = _native.stats()
info = _native.compile_cache_info()
print(json.dumps({"s": dt, "compiles": st["compiles"], "disk_hits": st["disk_cache_hits"],
                  "from_disk": exe.from_disk_cache, "bytes": info["bytes"]}))
"""

# argv: module, serialized-executable path, "cold" | "warm"
_JAXLIB_CHILD = r"""
import json, os, sys, time
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax
from jax._src.lib import xla_client as xc
client = jax.devices("cpu")[0].client  # client creation is not timed
devices = xc.DeviceList(tuple(client.devices()[:1]))
module, path, phase = sys.argv[1:4]
if phase == "cold":
    text = open(module).read()
    t0 = time.perf_counter()
    exe = client.compile_and_load(text, devices)
    dt = time.perf_counter() - t0
    blob = client.serialize_executable(exe)
    open(path, "wb").write(blob)
else:
    blob = open(path, "rb").read()
    t0 = time.perf_counter()
    exe = client.deserialize_executable(blob, devices)
    dt = time.perf_counter() - t0
print(json.dumps({"s": dt, "bytes": len(blob)}))
"""


def _child(code: str, args: list[str], env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def hlobridge_pair(module: str) -> tuple[dict, dict]:
    """One cold and one warm hlobridge process on a fresh cache directory."""
    with tempfile.TemporaryDirectory(prefix="hlobridge-cc-bench-") as d:
        env = dict(os.environ, HLOBRIDGE_CACHE_DIR=d)
        env.pop("HLOBRIDGE_CACHE", None)
        env.setdefault("PJRT_DEVICE", "CPU")
        cold = _child(_CHILD, [module], env)
        warm = _child(_CHILD, [module], env)
    if cold["compiles"] != 1 or warm["disk_hits"] != 1 or warm["compiles"] != 0:
        raise RuntimeError(f"unexpected cache counters: cold={cold} warm={warm}")
    return cold, warm


def jaxlib_pair(module: str) -> tuple[dict, dict]:
    """One cold (compile + serialize) and one warm (deserialize) jaxlib process."""
    with tempfile.TemporaryDirectory(prefix="hlobridge-cc-anchor-") as d:
        path = os.path.join(d, "exe.bin")
        env = dict(os.environ)
        cold = _child(_JAXLIB_CHILD, [module, path, "cold"], env)
        warm = _child(_JAXLIB_CHILD, [module, path, "warm"], env)
    return cold, warm


def measure(module: str, reps: int, anchor: bool) -> dict:
    """Medians over ``reps`` process pairs (hlobridge and anchor alternate)."""
    hc, hw, jc, jw = [], [], [], []
    entry = jbytes = 0
    for _ in range(reps):
        cold, warm = hlobridge_pair(module)
        hc.append(cold["s"])
        hw.append(warm["s"])
        entry = cold["bytes"]
        if anchor:
            cold, warm = jaxlib_pair(module)
            jc.append(cold["s"])
            jw.append(warm["s"])
            jbytes = cold["bytes"]
    cold_s, warm_s = statistics.median(hc), statistics.median(hw)
    res = {"cold_s": cold_s, "warm_s": warm_s, "ratio": cold_s / max(warm_s, 1e-9),
           "cold_samples_s": hc, "warm_samples_s": hw, "reps": reps,
           "entry_bytes": entry, "module_bytes": os.path.getsize(module)}
    if anchor:
        jcold, jwarm = statistics.median(jc), statistics.median(jw)
        res.update(jaxlib_cold_s=jcold, jaxlib_warm_s=jwarm,
                   jaxlib_ratio=jcold / max(jwarm, 1e-9), jaxlib_cold_samples_s=jc,
                   jaxlib_warm_samples_s=jw, jaxlib_bytes=jbytes)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", required=True, help="StableHLO module text (.mlir)")
    ap.add_argument("--reps", type=int, default=1, help="cold/warm process pairs (median)")
    ap.add_argument("--anchor", action="store_true",
                    help="also time jaxlib's compile vs deserialize of the same module")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    try:
        res = measure(a.module, max(1, a.reps), a.anchor)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(res))
        return 0
    print(f"{a.module}: hlobridge cold {res['cold_s']:.3f} s, warm {res['warm_s']:.4f} s, "
          f"{res['ratio']:.1f}x (entry {res['entry_bytes'] / 1e6:.1f} MB)")
    if a.anchor:
        print(f"{a.module}: jaxlib    cold {res['jaxlib_cold_s']:.3f} s, warm "
              f"{res['jaxlib_warm_s']:.4f} s, {res['jaxlib_ratio']:.1f}x "
              f"(serialized {res['jaxlib_bytes'] / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
