"""Shape refinement time per module over the dynamic StableHLO corpus.

For every module of ``stablehlo-testdata/dynamic`` that both refiners
specialise (prepared as in ``tests/python/refine_corpus.py``: every ``?``
and dimension variable = 3), times in one interleaved run (``benches/e2e/
timing.py``'s rounds in random order):

- ``native``: ``hlobridge._native.refine_shapes`` (parse, refine, print);
- ``parse_print``: ``hlobridge._native.format_module`` on the same text, the
  anchor (refinement's own cost is ``native`` minus it, roughly);
- ``jaxlib``: jaxlib's ``refine_polymorphic_shapes`` on the module with a
  static ``@main`` (text in, bytecode out), on every 8th module (a call
  takes tens of ms), interleaved with ``native`` one call at a time.

Prints the median over modules of each module's median µs, and the median
of the per-module ratios native/anchor and jaxlib/native. Run:
``.venv/bin/python benches/refine/refine_time.py [--reps N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))

import refine_corpus as rc  # noqa: E402
from timing import interleaved  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--jaxlib-every", type=int, default=8,
                    help="time jaxlib on every k-th module (it takes ~50-100 ms a call)")
    args = ap.parse_args()
    from jax._src.lib import _jax

    from hlobridge import _native

    def jaxlib(data: bytes) -> object:
        return _jax.mlir.refine_polymorphic_shapes(
            data, enable_shape_assertions=True, validate_static_shapes=True)

    per: dict[str, list[float]] = {"native": [], "parse_print": [], "jaxlib": []}
    ratios_anchor, ratios_jax = [], []
    for i, path in enumerate(rc.cases()):
        case = rc.prepare(path)
        try:
            _native.refine_shapes(case.text, case.shapes)
            static = rc.jaxlib_input(case).encode()
            jaxlib(static)
        except Exception:
            continue
        st = interleaved({
            "native": lambda: _native.refine_shapes(case.text, case.shapes),
            "parse_print": lambda: _native.format_module(case.text),
        }, reps=args.reps, batch=args.batch)
        per["native"].append(st["native"]["median_us"])
        per["parse_print"].append(st["parse_print"]["median_us"])
        ratios_anchor.append(st["native"]["median_us"] / st["parse_print"]["median_us"])
        if i % args.jaxlib_every == 0:
            sj = interleaved({
                "native": lambda: _native.refine_shapes(case.text, case.shapes),
                "jaxlib": lambda: jaxlib(static),
            }, reps=3, batch=1, warmup=1)
            per["jaxlib"].append(sj["jaxlib"]["median_us"])
            # Against native's batched median (one-call batches of a ~10 us
            # call mostly time the timer).
            ratios_jax.append(sj["jaxlib"]["median_us"] / st["native"]["median_us"])
    print(f"modules: {len(per['native'])} (jaxlib timed on {len(per['jaxlib'])})  "
          f"load: {os.getloadavg()[0]:.1f}")
    for k, v in per.items():
        q = statistics.quantiles(v, n=10)
        print(f"{k:12s} median {statistics.median(v):9.1f} us/module  (p10 {q[0]:.1f}, p90 {q[-1]:.1f})")
    print(f"native / parse_print: median ratio {statistics.median(ratios_anchor):.2f}")
    print(f"jaxlib / native:      median ratio {statistics.median(ratios_jax):.1f}")


if __name__ == "__main__":
    main()
