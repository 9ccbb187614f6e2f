"""Convolution gradients per shape (batch 8, ResNet-50's and a few
depthwise ones), three ways in one process, interleaved: eager PyTorch
(``torch.ops.aten.convolution_backward``, oneDNN), hlobridge's host kernel on
oneDNN's library (``HLOBRIDGE_CONV_WGRAD=auto`` with the library: weight
gradients as backward-weights convolutions, docs/host_conv.md, "oneDNN
backward weights"; with ``--input``, strided and depthwise input gradients
as backward-data ones, "Training convolutions on the library"), and
hlobridge without it (``HLOBRIDGE_CONV_WGRAD=xla``: XLA's convolution, or
the host kernel's own loops for depthwise ones). Each hlobridge variant is
its own ``hb.call_jax`` of ``jax.vjp`` of the forward convolution, compiled
under its setting. Prints min-of-rounds milliseconds and the ratios; lower
is better. Check the load average first: eager's OpenMP threads collapse on
a shared machine.

    .venv/bin/python benches/onednn_wgrad_bench.py [--rounds 7] [--input]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax  # noqa: E402
import torch  # noqa: E402

import hlobridge as hb  # noqa: E402
from hlobridge import _native  # noqa: E402

# (name, C in, C out, map, kernel, stride, groups)
SHAPES = [
    ("3x3 64@56", 64, 64, 56, 3, 1, 1),
    ("3x3 128@28", 128, 128, 28, 3, 1, 1),
    ("3x3 256@14", 256, 256, 14, 3, 1, 1),
    ("3x3 512@7", 512, 512, 7, 3, 1, 1),
    ("3x3/2 128@56", 128, 128, 56, 3, 2, 1),
    ("1x1 1024->256@14", 1024, 256, 14, 1, 1, 1),
    ("1x1 2048->512@7", 2048, 512, 7, 1, 1, 1),
    ("1x1/2 512->1024@28", 512, 1024, 28, 1, 2, 1),
    ("dw 3x3 72@56", 72, 72, 56, 3, 1, 72),
    ("dw 5x5 120@28", 120, 120, 28, 5, 1, 120),
]


# Input gradients (--input): the strided ones XLA's convolution ran, and
# depthwise ones the host kernel's loops ran.
INPUT_SHAPES = [
    ("3x3/2 128@56", 128, 128, 56, 3, 2, 1),
    ("3x3/2 256@28", 256, 256, 28, 3, 2, 1),
    ("3x3/2 512@14", 512, 512, 14, 3, 2, 1),
    ("dw 3x3 72@56", 72, 72, 56, 3, 1, 72),
    ("dw 5x5/2 72@56", 72, 72, 56, 5, 2, 72),
    ("dw 5x5 120@28", 120, 120, 28, 5, 1, 120),
    ("dw 3x3 480@14", 480, 480, 14, 3, 1, 480),
]


def _vjp(cin: int, k: int, stride: int, groups: int, tag: str, wrt: int):
    pad = k // 2

    def f(x, w, dy):
        def fwd(x, w):
            return jax.lax.conv_general_dilated(
                x, w, (stride, stride), [(pad, pad)] * 2, feature_group_count=groups,
                dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return jax.vjp(fwd, x, w)[1](dy)[wrt]
    f.__qualname__ = f"grad{wrt}_{tag}"  # one call_jax cache entry per setting
    return f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--input", action="store_true",
                    help="input gradients (backward data) instead of weight gradients")
    args = ap.parse_args()
    wrt = 0 if args.input else 1
    torch.set_num_threads(2)
    print(f"load average {os.getloadavg()[0]:.2f}; oneDNN library "
          f"{os.environ.get('HLOBRIDGE_ONEDNN_LIBRARY') or '(none)'}")
    print(f"| {'input' if args.input else 'weight'} gradient | eager ms | oneDNN route ms "
          "| without ms | oneDNN / eager | oneDNN / without |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, cin, cout, hw, k, s, g in INPUT_SHAPES if args.input else SHAPES:
        pad = k // 2
        x = torch.randn(8, cin, hw, hw)
        w = torch.randn(cout, cin // g, k, k)
        ho = (hw + 2 * pad - k) // s + 1
        dy = torch.randn(8, cout, ho, ho)
        calls = {"eager": lambda: torch.ops.aten.convolution_backward(
            dy, x, w, None, [s, s], [pad, pad], [1, 1], False, [0, 0], g,
            [wrt == 0, wrt == 1, False])[wrt]}
        for tag, route in (("onednn", "auto"), ("without", "xla")):
            os.environ["HLOBRIDGE_CONV_WGRAD"] = route
            os.environ["HLOBRIDGE_ONEDNN_LIBRARY"] = os.environ.get("_HB_LIB", "") if tag == "onednn" else "0"
            f = _vjp(cin, k, s, g, f"{tag}_{name}", wrt)
            calls[tag] = (lambda f=f: hb.call_jax(f, x, w, dy))
            calls[tag]()  # compile under this setting
        best = {t: float("inf") for t in calls}
        outs = {}
        for _ in range(args.rounds):
            for t, c in calls.items():
                os.environ["HLOBRIDGE_ONEDNN_LIBRARY"] = "0" if t == "without" else os.environ["_HB_LIB"]
                t0 = time.perf_counter()
                outs[t] = c()
                best[t] = min(best[t], time.perf_counter() - t0)
        for t in ("onednn", "without"):
            err = (outs[t] - outs["eager"]).abs().max() / outs["eager"].abs().max()
            assert err < 1e-4, (name, t, float(err))
        ms = {t: v * 1e3 for t, v in best.items()}
        print(f"| {name} | {ms['eager']:.1f} | {ms['onednn']:.1f} | {ms['without']:.1f} "
              f"| {ms['onednn'] / ms['eager']:.2f} | {ms['onednn'] / ms['without']:.2f} |", flush=True)
    st = _native.stats()
    print(f"oneDNN ran {st['onednn_weight_gradients']} weight gradients and "
          f"{st['onednn_data_convolutions']} forward or input-gradient convolutions")


if __name__ == "__main__":
    os.environ.setdefault("_HB_LIB", os.environ.get("HLOBRIDGE_ONEDNN_LIBRARY", ""))
    main()
