"""The oneDNN routes of the host lowering against what they replace, per
shape, in one process (docs/host_gemm.md, "oneDNN matrix product" and
"Softmax").

Products: each shape is a StableHLO `dot_general` compiled twice, once as
hand-written `__onednn$matmul` call and once as the lowering leaves it
without oneDNN (`HLOBRIDGE_ONEDNN_MATMUL=0`: the host GEMM kernel inside its
window, XLA's dot outside), timed interleaved against eager torch's
`matmul` on the same inputs; GFLOP/s, higher is better. Softmax: XLA's
softmax (`HLOBRIDGE_ONEDNN_SOFTMAX=0`) against the lowering's guarded oneDNN
call and eager torch, ms. Every result is checked against float64 first.

    .venv/bin/python benches/onednn_bench.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import torch

from hlobridge import _native

# name, batch, m, k, n, lhs stored transposed, rhs stored transposed
SHAPES = [
    ("linear 1024x768x768 nt", 0, 1024, 768, 768, False, True),
    ("linear 1024x768x3072 nt", 0, 1024, 768, 3072, False, True),
    ("linear 1024x3072x768 nt", 0, 1024, 3072, 768, False, True),
    ("vit 1576x768x768 nt", 0, 1576, 768, 768, False, True),
    ("input grad 1024x768x768 nn", 0, 1024, 768, 768, False, False),
    ("input grad 1024x3072x768 nn", 0, 1024, 3072, 768, False, False),
    ("weight grad 768x1024x768 tn", 0, 768, 1024, 768, True, False),
    ("weight grad 3072x1024x768 tn", 0, 3072, 1024, 768, True, False),
    ("q·kᵀ 96x128x64x128 nt", 96, 128, 64, 128, False, True),
    ("p·v 96x128x128x64 nn", 96, 128, 128, 64, False, False),
    ("vit q·kᵀ 96x197x64x197 nt", 96, 197, 64, 197, False, True),
    ("square 256³ nn", 0, 256, 256, 256, False, False),
    ("square 128³ nn", 0, 128, 128, 128, False, False),
]


def _shape(b: int, r: int, c: int) -> str:
    return "x".join(str(d) for d in ([b] if b else []) + [r, c])


def _product(onednn: bool, b: int, m: int, k: int, n: int, ta: bool, tb: bool) -> str:
    a_dims = (k, m) if ta else (m, k)
    b_dims = (n, k) if tb else (k, n)
    a, bb, o = _shape(b, *a_dims), _shape(b, *b_dims), _shape(b, m, n)
    if onednn:
        cfg = ('{\\"onednn_matmul_config\\": {\\"transpose_a\\": %s, \\"transpose_b\\": %s}}'
               % (str(ta).lower(), str(tb).lower()))
        body = (f'%r = stablehlo.custom_call @"__onednn$matmul"(%a, %b) {{api_version = 1 : i32, '
                f'backend_config = "{cfg}"}} : (tensor<{a}xf32>, tensor<{bb}xf32>) -> tensor<{o}xf32>')
    else:
        nb = 1 if b else 0
        batch = "batching_dims = [0] x [0], " if b else ""
        lc, rc = nb + (0 if ta else 1), nb + (1 if tb else 0)
        body = (f"%r = stablehlo.dot_general %a, %b, {batch}contracting_dims = [{lc}] x [{rc}] : "
                f"(tensor<{a}xf32>, tensor<{bb}xf32>) -> tensor<{o}xf32>")
    return (f"module @m {{\n  func.func public @main(%a: tensor<{a}xf32>, %b: tensor<{bb}xf32>) -> "
            f"tensor<{o}xf32> {{\n    {body}\n    return %r : tensor<{o}xf32>\n  }}\n}}")


def _run(exe: _native.Executable, *arrays: torch.Tensor) -> object:
    outs, *_ = _native.execute(exe, [a.data_ptr() for a in arrays], [list(a.shape) for a in arrays],
                               [_native.ELEMENT_TYPES["f32"]] * len(arrays), list(arrays))
    return outs[0]


def _median_s(f: Callable[[], object], reps: int) -> float:
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2]


def _interleaved(fns: dict[str, Callable[[], object]], reps: int, rounds: int) -> dict[str, float]:
    got: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            got[k].append(_median_s(f, reps))
    return {k: sorted(v)[len(v) // 2] for k, v in got.items()}


def products(rounds: int) -> None:
    print("| shape | eager GFLOP/s | oneDNN | without oneDNN (route) | oneDNN / without |")
    print("|---|---:|---:|---:|---:|")
    g = torch.Generator().manual_seed(0)
    for name, b, m, k, n, ta, tb in SHAPES:
        lead = [b] if b else []
        a = torch.randn(*lead, *((k, m) if ta else (m, k)), generator=g)
        w = torch.randn(*lead, *((n, k) if tb else (k, n)), generator=g)
        at, wt = (a.transpose(-1, -2) if ta else a), (w.transpose(-1, -2) if tb else w)
        want = at.double() @ wt.double()
        exes = {}
        for kind in ("onednn", "without"):
            os.environ["HLOBRIDGE_ONEDNN_MATMUL"] = "0"
            exe, _ = _native.compile(_product(kind == "onednn", b, m, k, n, ta, tb))
            got = torch.from_dlpack(_run(exe, a, w)).double()
            err = ((got - want).abs().max() / want.abs().max()).item()
            assert err < 1e-5, f"{name} {kind}: relative error {err:.3g}"
            exes[kind] = exe
        route = ",".join(sorted(exes["without"].host_kernels)) or "xla dot"
        flop = 2 * (b or 1) * m * k * n
        reps = max(3, min(30, int(0.3 / (flop / 150e9))))
        t = _interleaved({"eager": lambda: at @ wt, "onednn": lambda: _run(exes["onednn"], a, w),
                          "without": lambda: _run(exes["without"], a, w)}, reps, rounds)
        gf = {key: flop / s / 1e9 for key, s in t.items()}
        print(f"| {name} | {gf['eager']:.0f} | {gf['onednn']:.0f} | {gf['without']:.0f} ({route}) "
              f"| {gf['onednn'] / gf['without']:.2f} |", flush=True)


def softmax(rounds: int) -> None:
    print("\n| softmax | eager ms | oneDNN (guarded) ms | XLA ms | XLA / oneDNN |")
    print("|---|---:|---:|---:|---:|")
    for shape in [(8, 12, 128, 128), (8, 12, 197, 197), (4, 12, 128, 128)]:
        text = jax.jit(lambda s: jax.nn.softmax(s, -1)).lower(
            jax.ShapeDtypeStruct(shape, jnp.float32)).as_text()
        exes = {}
        for kind, env in (("onednn", "all"), ("xla", "0")):
            os.environ["HLOBRIDGE_ONEDNN_SOFTMAX"] = env
            exes[kind], _ = _native.compile(text)
        assert "__onednn$softmax" in exes["onednn"].host_kernels, exes["onednn"].host_kernels
        x = torch.randn(shape, generator=torch.Generator().manual_seed(1)) * 3
        err = (torch.from_dlpack(_run(exes["onednn"], x)).double() - torch.softmax(x.double(), -1)).abs().max()
        assert err < 1e-6, f"softmax {shape}: error {err.item():.3g}"
        t = _interleaved({"eager": lambda: torch.softmax(x, -1), "onednn": lambda: _run(exes["onednn"], x),
                          "xla": lambda: _run(exes["xla"], x)}, 20, rounds)
        ms = {k: v * 1e3 for k, v in t.items()}
        print(f"| {'x'.join(map(str, shape))} | {ms['eager']:.2f} | {ms['onednn']:.2f} | {ms['xla']:.2f} "
              f"| {ms['xla'] / ms['onednn']:.1f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    print(f"load average {os.getloadavg()[0]:.2f}; torch {torch.get_num_threads()} threads")
    products(args.rounds)
    softmax(args.rounds)


if __name__ == "__main__":
    main()
