"""Convolution speed per shape: one ``nn.Conv2d`` through
``torch.compile(backend="hlobridge")`` (the host convolution kernel,
``pjrt-client/src/host_kernels/conv/``) against eager torch
(``torch.nn.functional.conv2d``: oneDNN), interleaved in one process.

Shapes (batch ``--batch``, default 8): depthwise 3x3/5x5/7x7 (ConvNeXt-T's
7x7 at 56/28/14/7 with 96..768 channels, MobileNetV3-Large's depthwise
layers, the issue's 8x16x16x16 7x7), grouped (ResNeXt), dilated, and
ResNet-50's convolutions at 224x224 (7x7/2 stem, 1x1 and 3x3 at
56/28/14/7, strided 1x1 downsamples, a strided 3x3), the MobileNetV3 and
ConvNeXt stems and a ConvNeXt 2x2/2 downsample (kind ``stem``).

Paths: ``fwd`` (no_grad forward) and, with ``--grad``, ``fwd+bwd`` (forward
and backward for the input and weight gradients). The variants of one shape
run round-robin (one call each per round) and the table gives median
milliseconds and the ratio hlobridge / eager (lower is better).

The alternatives, XLA:CPU's own convolution (``HLOBRIDGE_HOST_CONV=0``) and
the routing without the plugin's oneDNN convolution (``HLOBRIDGE_ONEDNN_CONV=0``:
host kernel, XLA from 2^27 multiply-adds), are each
timed in a child process (the setting is read at the first compile), each
shape again interleaved with its own eager; ``--no-xla`` skips it.

    .venv/bin/python benches/conv_bench.py [--batch 8] [--rounds 7]
        [--only dw,resnet] [--grad] [--no-xla] [--json out.json]

Timings depend on the machine and its load (printed with ``uptime``); eager
torch's OpenMP threads slow down sharply when another process shares the
cores, so compare ratios from a quiet run only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import hlobridge as hb  # noqa: F401  (registers the torch.compile backend)

# Statistic over the rounds (``--stat``): the median, or the minimum (more
# robust on a shared machine, where slices of time are lost at random).
STAT = "median"

# (name, kind, channels in, channels out, image size, kernel, stride,
#  padding, dilation, groups)
Shape = tuple[str, str, int, int, int, int, int, int, int, int]


def shapes() -> list[Shape]:
    s: list[Shape] = [("issue-dw7-16@16", "dw", 16, 16, 16, 7, 1, 3, 1, 16)]
    for c, hw in [(96, 56), (192, 28), (384, 14), (768, 7)]:
        s.append((f"convnext-dw7-{c}@{hw}", "dw", c, c, hw, 7, 1, 3, 1, c))
    for c, hw, k, st in [(16, 112, 3, 1), (64, 112, 3, 2), (72, 56, 3, 1), (72, 56, 5, 2),
                         (120, 28, 5, 1), (240, 28, 3, 2), (480, 14, 3, 1), (672, 14, 5, 2),
                         (960, 7, 5, 1)]:
        s.append((f"mbv3-dw{k}s{st}-{c}@{hw}", "dw", c, c, hw, k, st, k // 2, 1, c))
    s.append(("resnext-g32-3x3-128@56", "grouped", 128, 128, 56, 3, 1, 1, 1, 32))
    s.append(("grouped-g4-3x3-64@28", "grouped", 64, 64, 28, 3, 1, 1, 1, 4))
    s.append(("dilated-d2-3x3-256@28", "dilated", 256, 256, 28, 3, 1, 2, 2, 1))
    s.append(("dw-dilated-d2-3x3-256@28", "dw", 256, 256, 28, 3, 1, 2, 2, 256))
    s += [
        ("r50-stem-7x7s2-3>64@224", "resnet", 3, 64, 224, 7, 2, 3, 1, 1),
        ("r50-1x1-64>256@56", "resnet", 64, 256, 56, 1, 1, 0, 1, 1),
        ("r50-1x1-256>64@56", "resnet", 256, 64, 56, 1, 1, 0, 1, 1),
        ("r50-3x3-64@56", "resnet", 64, 64, 56, 3, 1, 1, 1, 1),
        ("r50-1x1s2-256>512@56", "resnet", 256, 512, 56, 1, 2, 0, 1, 1),
        ("r50-3x3-128@28", "resnet", 128, 128, 28, 3, 1, 1, 1, 1),
        ("r50-1x1-512>128@28", "resnet", 512, 128, 28, 1, 1, 0, 1, 1),
        ("r50-3x3-256@14", "resnet", 256, 256, 14, 3, 1, 1, 1, 1),
        ("r50-1x1-1024>256@14", "resnet", 1024, 256, 14, 1, 1, 0, 1, 1),
        ("r50-3x3-512@7", "resnet", 512, 512, 7, 3, 1, 1, 1, 1),
        ("r50-1x1-2048>512@7", "resnet", 2048, 512, 7, 1, 1, 0, 1, 1),
        ("r50-1x1s2-512>1024@28", "resnet", 512, 1024, 28, 1, 2, 0, 1, 1),
        ("r50-3x3s2-128@56", "resnet", 128, 128, 56, 3, 2, 1, 1, 1),
        ("mbv3-stem-3x3s2-3>16@224", "stem", 3, 16, 224, 3, 2, 1, 1, 1),
        ("convnext-stem-4x4s4-3>96@224", "stem", 3, 96, 224, 4, 4, 0, 1, 1),
        ("convnext-ds-2x2s2-96>192@56", "stem", 96, 192, 56, 2, 2, 0, 1, 1),
    ]
    return s


def _conv_main(x: torch.Tensor, w: torch.Tensor, st: int, pad: int, dil: int, g: int
               ) -> torch.Tensor:
    return F.conv2d(x, w, None, st, pad, dil, g)


def _conv_alt(x: torch.Tensor, w: torch.Tensor, st: int, pad: int, dil: int, g: int
              ) -> torch.Tensor:
    # The same as _conv_main, with its own code object (its own dynamo cache entry).
    return F.conv2d(x, w, None, st, pad, dil, g)


def _compiled_with(env: dict[str, str], fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn``, compiled (at its first call) with ``env`` set: the host lowering reads the
    HLOBRIDGE_* routing variables at each compile."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        fn()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return fn


def _variants(sh: Shape, batch: int, grad: bool, part: str = "both",
              alt: dict[str, str] | None = None) -> dict[str, Callable[[], Any]]:
    _, _, cin, cout, hw, k, st, pad, dil, g = sh
    torch._dynamo.reset()  # one graph per shape: stay under dynamo's recompile limit
    torch.manual_seed(0)
    n = batch
    mod = torch.nn.Conv2d(cin, cout, k, st, pad, dil, g, bias=False)
    x = torch.randn(n, cin, hw, hw, requires_grad=grad and part != "w")
    w = mod.weight
    if part == "x":
        w.requires_grad_(False)
    wrt = {"both": (x, w), "w": (w,), "x": (x,)}[part]
    comp = torch.compile(mod, backend="hlobridge", dynamic=False)
    alt_c = torch.compile(_conv_alt, backend="hlobridge", dynamic=False)
    if not grad:
        def eager() -> Any:
            with torch.no_grad():
                return F.conv2d(x, w, None, st, pad, dil, g)

        def hbc() -> Any:
            with torch.no_grad():
                return comp(x)

        def altc() -> Any:
            with torch.no_grad():
                return alt_c(x, w, st, pad, dil, g)
        fns = {"eager": eager, "hb": hbc}
        if alt:
            fns["alt"] = _compiled_with(alt, altc)
        return fns
    dy = torch.randn_like(F.conv2d(x.detach(), w.detach(), None, st, pad, dil, g))

    def eager_g() -> Any:
        y = F.conv2d(x, w, None, st, pad, dil, g)
        return torch.autograd.grad(y, wrt, dy)

    def hb_g() -> Any:
        return torch.autograd.grad(comp(x), wrt, dy)

    def alt_g() -> Any:
        return torch.autograd.grad(alt_c(x, w, st, pad, dil, g), wrt, dy)
    fns = {"eager": eager_g, "hb": hb_g}
    if alt:
        fns["alt"] = _compiled_with(alt, alt_g)
    return fns


def _time(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    for f in fns.values():  # compile and warm up
        f()
        f()
    ts: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            ts[k].append(time.perf_counter() - t)
    stat = min if STAT == "min" else statistics.median
    return {k: stat(v) * 1e3 for k, v in ts.items()}


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "(uptime unavailable)"


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    only = args.only.split(",") if args.only else None
    rows = []
    for sh in shapes():
        if only and sh[1] not in only and not any(o in sh[0] for o in only):
            continue
        alt = dict(kv.split("=", 1) for kv in args.alt) if args.alt else None
        ms = _time(_variants(sh, args.batch, args.grad, args.part, alt), args.rounds)
        rows.append({"shape": sh[0], "kind": sh[1], "eager_ms": ms["eager"], "hb_ms": ms["hb"],
                     "ratio": ms["hb"] / ms["eager"]})
        if alt:
            rows[-1].update(alt_ms=ms["alt"], hb_over_alt=ms["hb"] / ms["alt"])
        if not args.child:
            extra = (f"  alt {ms['alt']:8.3f} ms  hb/alt {ms['hb'] / ms['alt']:5.2f}"
                     if alt else "")
            print(f"  {sh[0]:28s} eager {ms['eager']:8.3f} ms  hb {ms['hb']:8.3f} ms  "
                  f"hb/eager {ms['hb'] / ms['eager']:5.2f}{extra}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default="", help="kinds (dw, grouped, dilated, resnet, stem) or "
                    "substrings of shape names, comma-separated")
    ap.add_argument("--grad", action="store_true", help="time forward + both gradients")
    ap.add_argument("--part", choices=["both", "w", "x"], default="both",
                    help="with --grad: both gradients, the weight gradient only (the input "
                    "needs no grad), or the input gradient only (the weight needs none); "
                    "the forward is always timed with them")
    ap.add_argument("--alt", action="append", default=[], metavar="VAR=VALUE",
                    help="also time hlobridge compiled with these HLOBRIDGE_* settings, in this "
                    "process, interleaved with the others (hlobridge-only A/B: 'hb/alt')")
    ap.add_argument("--no-xla", action="store_true", help="skip the HLOBRIDGE_HOST_CONV=0 run")
    ap.add_argument("--no-v3", action="store_true",
                    help="skip the HLOBRIDGE_ONEDNN_CONV=0 run (host kernel / XLA, no oneDNN)")
    ap.add_argument("--stat", choices=["median", "min"], default="median")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads (0: torch's default); 1 also sets HLOBRIDGE_GEMM_DONATE=0 "
                    "so both sides run on one core")
    ap.add_argument("--json", default="")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global STAT
    STAT = args.stat
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.threads == 1:
        os.environ["HLOBRIDGE_GEMM_DONATE"] = "0"  # read at the first host kernel call
    if args.child:
        print(json.dumps(measure(args)))
        return
    path = ("fwd+bwd" + ("" if args.part == "both" else f"({args.part})")) if args.grad else "fwd"
    print(f"conv_bench: batch {args.batch}, {path}, {args.stat} of {args.rounds} rounds, torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads")
    print(f"load before: {_uptime()}")
    rows = measure(args)
    cmd = [sys.executable, __file__, "--child", "--batch", str(args.batch),
           "--rounds", str(args.rounds), "--stat", args.stat,
           "--threads", str(args.threads), "--part", args.part] + (["--only", args.only] if args.only else []) \
        + (["--grad"] if args.grad else [])

    def child(**env: str) -> dict[str, dict[str, Any]]:
        out = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True,
                             check=True).stdout
        return {r["shape"]: r for r in json.loads(out.strip().splitlines()[-1])}

    xla = {} if args.no_xla else child(HLOBRIDGE_HOST_CONV="0")
    v3 = {} if args.no_v3 else child(HLOBRIDGE_ONEDNN_CONV="0")
    load_after = _uptime()
    print(f"load after: {load_after}")
    print("\n| shape | eager ms | hlobridge ms | hlobridge / eager | XLA conv / eager "
          "| no oneDNN / eager |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        alt = [f"{a[r['shape']]['ratio']:.2f}" if r["shape"] in a else "-" for a in (xla, v3)]
        print(f"| {r['shape']} | {r['eager_ms']:.3f} | {r['hb_ms']:.3f} | {r['ratio']:.2f} | "
              f"{alt[0]} | {alt[1]} |")
    by_kind: dict[str, list[float]] = {}
    for r in rows:
        by_kind.setdefault(r["kind"], []).append(r["ratio"])
    for k, v in by_kind.items():
        print(f"geomean hlobridge/eager, {k}: {statistics.geometric_mean(v):.2f} ({len(v)} shapes)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "xla": xla, "no_onednn": v3, "load_after": load_after,
                       "path": path}, f, indent=1)


if __name__ == "__main__":
    main()
