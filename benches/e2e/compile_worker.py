"""Cold vs warm (in-process) compile of one module, in a fresh process:
the first ``_native.compile`` (plugin already loaded) and a second compile of
the same text, served by the in-memory compile cache. Prints one JSON line.

Usage: compile_worker.py MODULE.mlir
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("PJRT_DEVICE", "CPU")

from hlobridge import _native  # noqa: E402


def main() -> None:
    text = open(sys.argv[1]).read()
    _native.runtime()
    t0 = time.perf_counter()
    _, cold_hit = _native.compile(text)
    t1 = time.perf_counter()
    _, warm_hit = _native.compile(text)
    t2 = time.perf_counter()
    print(json.dumps({"cold_s": t1 - t0, "warm_s": t2 - t1, "cold_hit": cold_hit,
                      "warm_hit": warm_hit}))


if __name__ == "__main__":
    main()
