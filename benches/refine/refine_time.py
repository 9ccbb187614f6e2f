"""Shape refinement time per module over the dynamic StableHLO corpus.

For every module of ``stablehlo-testdata/dynamic`` that both refiners
specialise (prepared as in ``tests/python/refine_corpus.py``: every ``?``
and dimension variable = 3), times in one interleaved run (``benches/e2e/
timing.py``'s rounds in random order):

- ``native``: ``hlobridge._native.refine_shapes`` (parse, refine, print);
- ``parse_print``: ``hlobridge._native.format_module`` on the same text, the
  anchor (refinement's own cost is ``native`` minus it, roughly);
- ``jaxlib``: jaxlib's ``refine_polymorphic_shapes`` on the wrapped module
  (text in, bytecode out, no Python-side parsing).

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
    args = ap.parse_args()
    from jax._src.lib import _jax

    from hlobridge import _native

    per: dict[str, list[float]] = {"native": [], "parse_print": [], "jaxlib": []}
    ratios_anchor, ratios_jax = [], []
    for path in rc.cases():
        case = rc.prepare(path)
        wrapped = rc.wrapped_for_jaxlib(case).encode()
        try:
            _native.refine_shapes(case.text, case.shapes)
            _jax.mlir.refine_polymorphic_shapes(wrapped, enable_shape_assertions=True,
                                                validate_static_shapes=True)
        except Exception:
            continue
        st = interleaved({
            "native": lambda: _native.refine_shapes(case.text, case.shapes),
            "parse_print": lambda: _native.format_module(case.text),
            "jaxlib": lambda: _jax.mlir.refine_polymorphic_shapes(
                wrapped, enable_shape_assertions=True, validate_static_shapes=True),
        }, reps=args.reps, batch=args.batch)
        for k in per:
            per[k].append(st[k]["median_us"])
        ratios_anchor.append(st["native"]["median_us"] / st["parse_print"]["median_us"])
        ratios_jax.append(st["jaxlib"]["median_us"] / st["native"]["median_us"])
    print(f"modules: {len(per['native'])}  load: {os.getloadavg()[0]:.1f}")
    for k, v in per.items():
        print(f"{k:12s} median {statistics.median(v):8.1f} us/module  "
              f"(p10 {statistics.quantiles(v, n=10)[0]:.1f}, p90 {statistics.quantiles(v, n=10)[-1]:.1f})")
    print(f"native / parse_print: median ratio {statistics.median(ratios_anchor):.2f}")
    print(f"jaxlib / native:      median ratio {statistics.median(ratios_jax):.2f}")


if __name__ == "__main__":
    main()
