"""Cold vs warm compile through the persistent compile cache.

Runs ``_native.compile`` on one module in two fresh processes sharing an
empty cache directory: the first compiles with PJRT and writes the
serialized executable (cold), the second loads it from disk (warm). The
PJRT runtime is created before the timed call, so only ``compile`` is
timed.

    python benches/compile_cache_bench.py --module big.mlir [--json]

prints ``{"cold_s": ..., "warm_s": ..., "ratio": ...}`` with ``--json``
(plus ``entry_bytes``, ``module_bytes`` and both processes' counters).
"""

from __future__ import annotations

import argparse
import json
import os
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


def _run(module: str, cache_dir: str) -> dict:
    env = dict(os.environ, HLOBRIDGE_CACHE_DIR=cache_dir)
    env.pop("HLOBRIDGE_CACHE", None)
    env.setdefault("PJRT_DEVICE", "CPU")
    out = subprocess.run([sys.executable, "-c", _CHILD, module], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", required=True, help="StableHLO module text (.mlir)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hlobridge-cc-bench-") as d:
        cold = _run(a.module, d)
        warm = _run(a.module, d)
    if cold["compiles"] != 1 or warm["disk_hits"] != 1 or warm["compiles"] != 0:
        print(f"unexpected counters: cold={cold} warm={warm}", file=sys.stderr)
        return 1
    res = {"cold_s": cold["s"], "warm_s": warm["s"], "ratio": cold["s"] / max(warm["s"], 1e-9),
           "entry_bytes": cold["bytes"], "module_bytes": os.path.getsize(a.module)}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"{a.module}: cold {res['cold_s']:.3f} s, warm {res['warm_s']:.4f} s, "
              f"{res['ratio']:.1f}x (entry {res['entry_bytes'] / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
