#!/usr/bin/env python3
"""MLIR anchor: parse / print throughput of MLIR's own C++ parser and printer
(the copy bundled in jaxlib) on one module, as the reference hlobridge's
numbers are compared against.

    python benches/mlir_anchor.py [FILE] [--runs N]

FILE defaults to the big generated module (.cache/big/transformer24_train.mlir,
made on demand by tests/tools/gen_big_module.py).  Prints one JSON object:

    {"file": ..., "bytes": ..., "mlir_parse_mb_s": ..., "mlir_print_mb_s": ..., ...}

* parse = ``ir.Module.parse(text)`` in a fresh JAX-configured context (the
  context is created outside the timed region), *including* verification,
  which MLIR runs after every parse;  MB/s = input bytes / median time.
* print = ``module.operation.get_asm()`` (pretty form, no debug info,
  ``assume_verified=True`` so the printer does not re-verify);
  MB/s = printed bytes / median time.  The printed text is about the size of
  the input for JAX output (``print_bytes`` is reported too).

Median of ``--runs`` (default 7, at least 5) timed runs after one warm-up.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests" / "tools"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", type=Path)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args(argv)
    runs = max(5, args.runs)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    path = args.file
    if path is None:
        import gen_big_module

        path = gen_big_module.ensure()
    text = path.read_text()
    nbytes = len(text.encode())

    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib.mlir import ir
    import jaxlib

    def parse_once():
        ctx = jax_mlir.make_ir_context()
        gc.collect()
        t0 = time.perf_counter()
        with ctx:
            m = ir.Module.parse(text)
        return time.perf_counter() - t0, ctx, m

    # warm-up (page in the library, first-use initialisation)
    _, ctx, module = parse_once()
    parse_times = []
    for _ in range(runs):
        dt, ctx, module = parse_once()
        parse_times.append(dt)

    op = module.operation
    printed = op.get_asm(assume_verified=True)
    print_times = []
    for _ in range(runs):
        gc.collect()
        t0 = time.perf_counter()
        printed = op.get_asm(assume_verified=True)
        print_times.append(time.perf_counter() - t0)
    print_bytes = len(printed.encode())

    tp = statistics.median(parse_times)
    tq = statistics.median(print_times)
    out = {
        "file": str(path),
        "bytes": nbytes,
        "mlir_parse_mb_s": round(nbytes / 1e6 / tp, 2),
        "mlir_print_mb_s": round(print_bytes / 1e6 / tq, 2),
        "parse_s_median": round(tp, 4),
        "print_s_median": round(tq, 4),
        "print_bytes": print_bytes,
        "runs": runs,
        "jaxlib": jaxlib.__version__,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
