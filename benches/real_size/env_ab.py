"""Same-process A/B of one real-size row under two settings of one
environment variable (a lowering switch such as ``HLOBRIDGE_REDUCE_STAGES``
or ``HLOBRIDGE_DOT_OPERANDS``, which is part of the compile-cache key, so
each setting compiles its own program).

Both hlobridge calls are built as ``make bench-real`` builds them
(``worker._build``: the model's inference call, or its whole AdamW training
step), one after the other with the variable set to ``A`` then ``B``; they
are then timed alternately (``--rounds`` rounds of ``--calls`` calls each,
the order reversed every other round) and the medians and the median of the
per-round ratios ``B / A`` printed. Both run in this process, so the
machine's load affects them alike; the ratio is the figure to quote, not
the milliseconds. For inference the first calls' outputs are compared. Each call must compile
a graph of its own (inference compiles a per-setting wrapper: Dynamo would
otherwise serve the second model the first one's graph, whatever the
variable says); the script stops if one does not.

    .venv/bin/python benches/real_size/env_ab.py resnet50 train HLOBRIDGE_REDUCE_STAGES 0 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("path", choices=("infer", "train"))
    ap.add_argument("var", help="the environment variable to switch")
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2, help="calls per round and setting")
    args = ap.parse_args()
    os.environ.setdefault("PJRT_DEVICE", "CPU")
    sys.path.insert(0, HERE)
    import torch
    import worker
    from hlobridge._src.dynamo import program as hb_program

    calls, first = {}, {}
    for v in (args.a, args.b):
        os.environ[args.var] = v
        torch.manual_seed(0)
        call = worker._build(dict(model=args.model, variant="hlobridge", path=args.path,
                                  threads=2, optimizer="adamw", lr=1e-4,
                                  own_code=f"setting_{len(calls)}"))
        graphs = hb_program.graphs_compiled()
        first[v] = worker._sync(call())
        if hb_program.graphs_compiled() == graphs:
            sys.exit(f"{args.var}={v}: the call compiled no graph of its own, so it would "
                     "run the other setting's program")
        calls[v] = call
    for call in calls.values():  # warm both before timing
        worker._sync(call())
    if args.path == "infer":
        diff = (torch.as_tensor(first[args.a]) - torch.as_tensor(first[args.b])).abs().max()
        print(f"first outputs: max difference {float(diff):.3g}")
    times: dict[str, list[float]] = {v: [] for v in calls}
    order = list(calls.items())
    for r in range(args.rounds):
        for v, call in (order if r % 2 == 0 else order[::-1]):
            t = time.perf_counter()
            for _ in range(args.calls):
                worker._sync(call())
            times[v].append((time.perf_counter() - t) / args.calls * 1e3)
    for v, ts in times.items():
        print(f"{args.var}={v}: median {statistics.median(ts):.1f} ms  {[round(x) for x in ts]}")
    ratios = [b / a for a, b in zip(times[args.a], times[args.b])]
    print(f"ratio {args.b} / {args.a}: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
