"""timm ConvNeXtV2 at 64x64 through hlobridge, against eager torch and inductor.

The case issue #25 measured slower than eager (1.43x at inference, 1.31x
per step, on the 7x7 depthwise convolutions), which the zoo's 32x32 ConvNeXt
hides. Random weights, ``eval()`` under ``no_grad``, batch 8; every model
is compiled once (not timed), then timed interleaved in one process
(``benches/e2e/timing.py``: rounds of one batch of calls per variant, fresh
order each round). Prints median ms per call, the ratios, and the load
averages before and after (on a shared machine the numbers are noise).

Run:  .venv/bin/python benches/convnextv2_bench.py [--models convnextv2_atto,convnextv2_nano]
      [--size 64] [--batch 8] [--reps 15]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))

import hlobridge  # noqa: E402,F401  (registers the backend)
from timing import interleaved  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="convnextv2_atto,convnextv2_nano")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    import timm

    print(f"load before: {os.getloadavg()}")
    for name in args.models.split(","):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False, num_classes=10).eval()
        x = torch.randn(args.batch, 3, args.size, args.size)
        hb = torch.compile(model, backend="hlobridge", dynamic=False)
        ind = torch.compile(model, dynamic=False)
        with torch.no_grad():
            want = model(x)
            for label, fn in (("hlobridge", hb), ("inductor", ind)):
                err = (fn(x) - want).abs().max().item() / (want.abs().max().item() + 1e-9)
                print(f"{name} {label}: max relative difference from eager {err:.2e}")
            stats = interleaved({"eager": lambda: model(x), "inductor": lambda: ind(x),
                                 "hlobridge": lambda: hb(x)}, reps=args.reps, batch=3)
        ms = {k: v["median_us"] / 1e3 for k, v in stats.items()}
        print(f"{name} b{args.batch}x{args.size}^2: eager {ms['eager']:.2f} ms, inductor "
              f"{ms['inductor']:.2f} ms, hlobridge {ms['hlobridge']:.2f} ms; hlobridge/eager "
              f"{ms['hlobridge'] / ms['eager']:.2f}x, hlobridge/inductor "
              f"{ms['hlobridge'] / ms['inductor']:.2f}x")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
