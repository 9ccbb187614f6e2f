"""CNN speed: the model zoo's torchvision CNNs through hlobridge, against
eager torch and inductor, interleaved in one process.

For each model (tests/python/model_zoo/vision.py: tiny random ResNet-18,
MobileNetV3-Small, EfficientNet-B0, ConvNeXt-Tiny layouts on 16 images of
3x32x32) and each path:

- ``infer``: ``torch.compile(model, backend="hlobridge", dynamic=False)`` in
  ``eval()`` under ``no_grad``;
- ``step``: ``hb.compile_train_step(model, loss, hb.optim.Adam(1e-3))``
  against eager ``loss.backward()`` + ``torch.optim.Adam`` (and inductor:
  ``torch.compile(model)`` + the same);

the variants run round-robin (one call each per round, so load from other
processes hits all of them alike) and the table gives median milliseconds
and each variant's ratio to eager (lower is better). For the host
convolution kernel's before/after, run it again with
``HLOBRIDGE_HOST_CONV=0`` (XLA's own convolutions; hlobridge's program
caches do not key on that setting within one process, so it is a separate
run, each interleaved with its own eager).

    .venv/bin/python benches/cnn_bench.py [--models resnet18,mobilenet]
        [--paths infer,step] [--rounds 20] [--no-inductor] [--json out.json]

Timings depend on the machine and its load; compare ratios from one run.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import hlobridge as hb  # noqa: E402
from model_zoo.spec import calibrate_batchnorm, zoo_loss  # noqa: E402
from model_zoo.vision import MODELS  # noqa: E402

NAMES = {"resnet18": "tv-resnet18", "mobilenet": "tv-mobilenet_v3_small",
         "efficientnet": "tv-efficientnet_b0", "convnext": "tv-convnext_tiny"}


def _infer_variants(spec: Any, inductor: bool) -> dict[str, Callable[[], Any]]:
    torch.manual_seed(0)
    base = spec.build()
    calibrate_batchnorm(spec, base)
    base.eval()
    x = spec.inputs()
    out: dict[str, Callable[[], Any]] = {}
    eager = copy.deepcopy(base)
    out["eager"] = lambda: eager(*x)
    hbm = torch.compile(copy.deepcopy(base), backend="hlobridge", dynamic=False)
    out["hb"] = lambda: hbm(*x)
    if inductor:
        ind = torch.compile(copy.deepcopy(base), dynamic=False)
        out["inductor"] = lambda: ind(*x)
    return out


def _step_variants(spec: Any, inductor: bool) -> dict[str, Callable[[], Any]]:
    torch.manual_seed(0)
    base = spec.build().train()
    xs = spec.inputs()
    batch = (*xs, spec.target(xs))
    loss_fn = zoo_loss(spec)
    out: dict[str, Callable[[], Any]] = {}

    def torch_step(model: torch.nn.Module, params: torch.nn.Module) -> Callable[[], Any]:
        opt = torch.optim.Adam(params.parameters(), lr=1e-3)

        def step() -> Any:
            opt.zero_grad()
            loss = loss_fn(model, *batch)
            loss.backward()
            opt.step()
            return loss
        return step

    eager = copy.deepcopy(base)
    out["eager"] = torch_step(eager, eager)
    step = hb.compile_train_step(copy.deepcopy(base), loss_fn, hb.optim.Adam(lr=1e-3))
    out["hb"] = lambda: step(*batch)
    if inductor:
        m = copy.deepcopy(base)
        out["inductor"] = torch_step(torch.compile(m, dynamic=False), m)
    return out


def _measure(variants: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    for fn in variants.values():  # warm up (and finish lazy compiles)
        for _ in range(2):
            fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for k, fn in variants.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(NAMES))
    ap.add_argument("--paths", default="infer,step")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    specs = {m.name: m for m in MODELS}
    rows = []
    for short in args.models.split(","):
        spec = specs[NAMES.get(short, short)]
        for path in args.paths.split(","):
            make = _infer_variants if path == "infer" else _step_variants
            try:
                if path == "infer":
                    with torch.no_grad():
                        med = _measure(make(spec, not args.no_inductor), args.rounds)
                else:
                    med = _measure(make(spec, not args.no_inductor), args.rounds)
            except Exception as e:  # a cell that cannot run is reported, not skipped
                rows.append({"model": spec.name, "path": path, "error": type(e).__name__,
                             "message": str(e)[:200]})
                print(f"{spec.name:24s} {path:5s} {type(e).__name__}: {str(e)[:120]}", flush=True)
                continue
            row = {"model": spec.name, "path": path,
                   "ms": {k: v * 1e3 for k, v in med.items()},
                   "ratio_vs_eager": {k: v / med["eager"] for k, v in med.items()}}
            rows.append(row)
            cells = "  ".join(f"{k} {v * 1e3:7.2f} ms ({v / med['eager']:.2f}x)"
                              for k, v in med.items())
            print(f"{spec.name:24s} {path:5s} {cells}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
