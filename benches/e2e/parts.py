"""The non-step parts of the e2e benchmark: per-call dispatch of a tiny
program, parse/print against MLIR's C++ parser, stitch throughput, ragged vs
padded attention, and compile-cache cold vs warm start."""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.dlpack
import jax.numpy as jnp
import numpy as np
import torch
from torch.utils.dlpack import from_dlpack

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))                    # benches/
sys.path.insert(0, str(ROOT / "tests" / "tools"))

import hlobridge as hb  # noqa: E402
from hlobridge import _native  # noqa: E402
from call_jax_overhead import tiny_jax, tiny_torch  # noqa: E402
from timing import Stats, interleaved, repeat, summarize  # noqa: E402

PY = sys.executable


# ---------------------------------------------------------------- dispatch
def dispatch(reps: int, batch: int) -> dict[str, Stats]:
    """Per-call µs of ``x * 2 + 1`` on 8 floats, every in-process variant of
    ``benches/call_jax_overhead.py`` interleaved."""
    import torch_xla

    t = torch.randn(8, generator=torch.Generator().manual_seed(0))
    jf = jax.jit(tiny_jax)
    j = jnp.asarray(t.numpy())
    xs = t.to(torch_xla.device())
    exe, _ = _native.compile(jf.lower(j).as_text())
    ptrs, shapes, codes = [t.data_ptr()], [tuple(t.shape)], [_native.ELEMENT_TYPES["f32"]]
    with torch.no_grad():
        torch.testing.assert_close(hb.call_jax(tiny_jax, t), tiny_torch(t))
        variants = {
            "hlobridge call_jax": lambda: hb.call_jax(tiny_jax, t),
            "hlobridge lazy": lambda: hb.call_jax(tiny_jax, xs),
            "native execute": lambda: [from_dlpack(c) for c in
                                       _native.execute(exe, ptrs, shapes, codes, [t])[0]],
            "jax.jit": lambda: jf(j).block_until_ready(),
            "jax.jit+dlpack": lambda: from_dlpack(jf(jax.dlpack.from_dlpack(t))),
            "torch eager": lambda: tiny_torch(t),
        }
        return interleaved(variants, reps, batch)


# ---------------------------------------------------------------- parse / print
def big_module(layers: int, accum: int, cache: Path) -> Path:
    """The generated transformer train step (``tests/tools/gen_big_module.py``),
    made on demand under ``cache/big``."""
    import gen_big_module

    out = cache / "big" / f"transformer{layers}_a{accum}_train.mlir"
    cfg = dict(gen_big_module.CONFIG, layers=layers, accum=accum)
    return gen_big_module.ensure(out, cfg=cfg)


def parse_print(path: Path, reps: int) -> dict[str, Any]:
    """hlobridge ``format_module`` (parse + print, via the Python binding,
    string in and out) against jaxlib's MLIR: ``ir.Module.parse`` in a fresh
    JAX context (verification included) and ``get_asm(assume_verified=True)``
    -- the method of ``benches/mlir_anchor.py`` -- interleaved round by round."""
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib.mlir import ir

    text = path.read_text()
    mb = len(text.encode()) / 1e6
    import time

    def ours() -> float:
        t0 = time.perf_counter()
        hb.format_module(text)
        return time.perf_counter() - t0

    def mlir() -> tuple[float, float, int]:
        ctx = jax_mlir.make_ir_context()
        t0 = time.perf_counter()
        with ctx:
            m = ir.Module.parse(text)
        t1 = time.perf_counter()
        printed = m.operation.get_asm(assume_verified=True)
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1, len(printed)

    ours(), mlir()                                                  # warm-up
    s_ours, s_parse, s_print, s_both = [], [], [], []
    for i in range(reps):
        gc.collect()
        if i % 2:
            s_ours.append(ours())
            p, q, _ = mlir()
        else:
            p, q, _ = mlir()
            s_ours.append(ours())
        s_parse.append(p)
        s_print.append(q)
        s_both.append(p + q)
    res = {"file": path.name, "mb": round(mb, 3), "ours_parse_print": summarize(s_ours, 1),
           "mlir_parse": summarize(s_parse, 1), "mlir_print": summarize(s_print, 1),
           "mlir_parse_print": summarize(s_both, 1)}
    med = res["ours_parse_print"]["median_us"]
    res["ours_mb_s"] = mb / (med / 1e6)
    res["mlir_mb_s"] = mb / (res["mlir_parse_print"]["median_us"] / 1e6)
    res["mlir_parse_mb_s"] = mb / (res["mlir_parse"]["median_us"] / 1e6)
    res["mlir_print_mb_s"] = mb / (res["mlir_print"]["median_us"] / 1e6)
    res["speedup"] = res["mlir_parse_print"]["median_us"] / med
    return res


# ---------------------------------------------------------------- stitch
def _segment(d: int = 256, depth: int = 24) -> tuple[str, str]:
    def seg(x: jax.Array) -> jax.Array:
        for i in range(depth):
            x = jnp.tanh(x * (1.0 + i / 64)) + jnp.mean(x, axis=0, keepdims=True)
        return x

    return jax.jit(seg).lower(jax.ShapeDtypeStruct((64, d), jnp.float32)).as_text(), \
        f"tensor<64x{d}xf32>"


def stitch(chain_lengths: list[int], reps: int) -> list[dict[str, Any]]:
    """``_native.stitch`` of a chain of k copies of one JAX segment (parse every
    segment, splice, inline, print the fused module); MB/s of segment text in."""
    text, ty = _segment()
    rows = []
    for k in chain_lengths:
        segs = [(f"s{i}", "jax", text, "main", [f"h{i}"], [f"h{i + 1}"]) for i in range(k)]
        st = repeat(lambda: _native.stitch([("h0", ty, False)], segs, [f"h{k}"]), reps)
        mb = k * len(text.encode()) / 1e6
        rows.append({"segments": k, "mb_in": round(mb, 3), "time": st,
                     "mb_s": mb / (st["median_us"] / 1e6)})
    return rows


# ---------------------------------------------------------------- ragged attention
def ragged(seq_counts: list[int], reps: int, prefill_cap: int) -> list[dict[str, Any]]:
    """``hb.ops.ragged_paged_attention`` (CPU reference path) vs the padded
    JAX baseline, both from ``benches/ragged_attention_bench.py``."""
    import ragged_attention_bench as rab

    rows = []
    for seqs in seq_counts:
        a = argparse.Namespace(seqs=seqs, heads=8, kv_heads=2, dim=64, page_size=16,
                               prefill_cap=prefill_cap, seed=0)
        q, kv, kv_lens, bt, cu = rab.make_batch(a, np.random.default_rng(0))
        max_q = int((cu[1:] - cu[:-1]).max())
        with torch.no_grad():
            fns = {
                "ragged": lambda: hb.ops.ragged_paged_attention(q, kv, kv_lens, bt, cu,
                                                                impl="reference"),
                "padded": lambda: hb.call_jax(rab.padded_attention, q, kv, kv_lens, bt, cu,
                                              max_q=max_q, scale=a.dim ** -0.5),
            }
            diff = float((fns["ragged"]() - fns["padded"]()).abs().max())
            assert diff < 1e-3, f"ragged vs padded differ by {diff}"
            st = interleaved(fns, reps, 1, warmup=1)
        tokens = int(cu[-1])
        rows.append({"seqs": seqs, "tokens": tokens, "kv_tokens": int(kv_lens.sum()),
                     "ragged": st["ragged"], "padded": st["padded"], "max_abs_diff": diff,
                     "speedup": st["padded"]["median_us"] / st["ragged"]["median_us"]})
    return rows


# ---------------------------------------------------------------- compile cache
def compile_cache(modules: list[Path], reps: int) -> dict[str, Any]:
    """Cold vs warm start through the persistent compile cache, per module,
    with jaxlib's own serialize/deserialize of the same text as the anchor
    (``benches/compile_cache_bench.py --anchor``: fresh processes on both
    sides, medians over ``reps`` pairs). The first module's figures are the
    headline; ``sizes`` holds every module's (smallest first), to show how
    both scale."""
    script = ROOT / "benches" / "compile_cache_bench.py"
    env = dict(os.environ, PJRT_DEVICE="CPU")
    sizes = []
    for module in modules:
        out = subprocess.run([PY, str(script), "--module", str(module), "--reps", str(reps),
                              "--anchor", "--json"], env=env, check=True, capture_output=True,
                             text=True).stdout
        res = json.loads(out.strip().splitlines()[-1])
        sizes.append({"module": module.name, "mb": module.stat().st_size / 1e6, **res})
    return {"mode": "on-disk", **sizes[0], "sizes": sorted(sizes, key=lambda z: z["mb"])}
