"""Dynamic shapes (issue #28, ``docs/dynamic_shapes.md``): a decoder LM's
forward over many (batch, sequence length) shapes in random order.

Variants, each in its OWN fresh process (fresh Dynamo, fresh in-memory
and on-disk compile caches: ``HLOBRIDGE_CACHE_DIR`` and
``TORCHINDUCTOR_CACHE_DIR`` are new temporary directories, so inductor
compiles its kernels cold like everyone else; torch_xla is imported only by
the variants that use it: its import turns Dynamo's automatic dynamic shapes
off), all on the same model (seeded) and the same shape order:

- ``hb_dynamic``: ``torch.compile(model, backend="hlobridge", dynamic=True)``
  (one trace, one lowering, one refinement + XLA compile per shape);
- ``hb_static``: ``backend="hlobridge", dynamic=False`` (a Dynamo trace, a
  torch_xla lowering and an XLA compile per shape; Dynamo's recompile limit
  raised to fit every shape, else shapes past the 8th would run eagerly);
- ``inductor_dynamic``: ``torch.compile(model, dynamic=True)``;
- ``openxla``: torch_xla's Dynamo backend (``backend="openxla"``, the model
  and inputs on the ``xla`` device; it retraces per shape).

Reported per variant: time to first results for all shapes (from the first
compiled call to the end of the last shape's first call; imports and model
construction excluded), its Dynamo trace count, and for ``hb_dynamic`` the
per-shape split: refinement (which route: native Rust pass or jaxlib's), XLA
compile, and the first run. Then, in one process, steady state per call
after warm-up, ``hb_dynamic`` against ``hb_static`` interleaved
(``benches/e2e/timing.py``): one repeated shape, and all shapes in turn
(each variant compiled for every shape first).

Default (modest): 4 sequence lengths x 2 batch sizes. ``--full``: 8 x 4 =
32 shapes (the issue's table; several minutes per variant on a quiet
machine). ``--quick`` (smoke test, a couple of minutes): a 1-layer model at
hidden 64, 2 x 2 shapes, the two hlobridge variants unless ``--variants``
says otherwise. The 1-minute load average is recorded before and after each
variant: on a shared machine absolute numbers are noise; compare ratios
from one run.

``--docs DIR`` writes ``DIR/dynamic_shapes.json`` and
``DIR/dynamic_shapes_table.md`` (the README's table).

Run:  PJRT_DEVICE=CPU .venv/bin/python benches/dynamic_shapes_bench.py [--full | --quick]
      [--variants hb_dynamic,hb_static,inductor_dynamic,openxla] [--json out.json]
      [--docs docs/bench]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VOCAB = 1024
CONFIG = dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)
"""A small Llama: the zoo's decoder at 4x width, 8x vocabulary."""
SEQS_FULL = [16, 24, 32, 48, 64, 96, 128, 160]
BATCHES_FULL = [2, 3, 4, 8]
SEQS_DEFAULT = [16, 32, 64, 128]
BATCHES_DEFAULT = [2, 4]
SEQS_QUICK = [16, 32]
BATCHES_QUICK = [2, 3]
QUICK_CONFIG = dict(CONFIG, vocab_size=256, hidden_size=64, intermediate_size=128,
                    num_hidden_layers=1)
"""``--quick``: the same architecture, tiny."""
VARIANTS = ["hb_dynamic", "hb_static", "inductor_dynamic", "openxla"]
LABELS = {"hb_dynamic": "hlobridge `dynamic=True`", "hb_static": "hlobridge `dynamic=False`",
          "inductor_dynamic": "inductor `dynamic=True`",
          "openxla": "torch_xla `backend=\"openxla\"`"}


def build_model() -> Any:
    import torch
    import transformers

    torch.manual_seed(0)
    config = QUICK_CONFIG if os.environ.get("HB_DYN_BENCH_QUICK") else CONFIG
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()


def tokens(b: int, s: int, device: Any = "cpu") -> Any:
    import torch

    g = torch.Generator().manual_seed(1000 * b + s)
    vocab = QUICK_CONFIG["vocab_size"] if os.environ.get("HB_DYN_BENCH_QUICK") else VOCAB
    return torch.randint(3, vocab, (b, s), generator=g).to(device)


def compiled_for(variant: str, model: Any) -> tuple[Any, Any]:
    """``(callable on a token batch, device)`` for ``variant``."""
    import torch

    if variant == "hb_dynamic":
        return torch.compile(model, backend="hlobridge", dynamic=True), "cpu"
    if variant == "hb_static":
        torch._dynamo.config.recompile_limit = 1024
        torch._dynamo.config.accumulated_recompile_limit = 4096
        return torch.compile(model, backend="hlobridge", dynamic=False), "cpu"
    if variant == "inductor_dynamic":
        return torch.compile(model, dynamic=True), "cpu"
    if variant == "openxla":
        import torch_xla

        torch._dynamo.config.recompile_limit = 1024
        torch._dynamo.config.accumulated_recompile_limit = 4096
        dev = torch_xla.device()
        return torch.compile(model.to(dev), backend="openxla"), dev
    raise SystemExit(f"unknown variant {variant}")


def worker(variant: str, shapes: list[tuple[int, int]]) -> dict[str, Any]:
    """One variant in this (fresh) process: time to first results."""
    import torch

    model = build_model()
    fn, dev = compiled_for(variant, model)
    torch._dynamo.utils.counters.clear()
    per_shape = []
    with torch.no_grad():
        t_start = time.perf_counter()
        for b, s in shapes:
            x = tokens(b, s, dev)
            t0 = time.perf_counter()
            out = fn(input_ids=x).logits
            if dev != "cpu":
                import torch_xla

                torch_xla.sync()
                out = out.cpu()
            per_shape.append({"shape": [b, s], "first_call_s": time.perf_counter() - t0})
        total = time.perf_counter() - t_start
    res: dict[str, Any] = {"variant": variant, "total_s": total, "shapes": len(shapes),
                           "dynamo_graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"],
                           "per_shape": per_shape}
    if variant == "hb_dynamic":
        from hlobridge._src import dynamic
        from hlobridge._src.dynamic.refine import counters as refine_counters

        g = dynamic.dynamic_graphs()[-1]
        by = {tuple(k[0]): p for k, p in g.programs.items()}
        for row in per_shape:
            p = by.get(tuple(row["shape"]))
            if p is not None:
                row.update(refine_s=p.refine_s, compile_s=p.compile_s)
        # A second call per shape: the run alone.
        with torch.no_grad():
            for row in per_shape:
                x = tokens(*row["shape"])
                t0 = time.perf_counter()
                fn(input_ids=x)
                row["run_s"] = time.perf_counter() - t0
        res["lowerings"] = dynamic.lower_counters["lowerings"]
        res["lower_s"] = g.module.lower_s
        res["refine_route"] = dict(refine_counters)
    return res


def steady(shapes: list[tuple[int, int]], reps: int) -> dict[str, Any]:
    """hb_dynamic vs hb_static per call after warm-up, interleaved, in this
    one process."""
    import torch

    sys.path.insert(0, str(HERE / "e2e"))
    from timing import interleaved

    model = build_model()
    dyn, _ = compiled_for("hb_dynamic", model)
    sta, _ = compiled_for("hb_static", model)
    inputs = [tokens(b, s) for b, s in shapes]
    one = tokens(*shapes[len(shapes) // 2])
    state = {"i": 0}

    def cycle(fn: Any) -> Any:
        def run() -> None:
            fn(input_ids=inputs[state["i"] % len(inputs)])
            state["i"] += 1
        return run

    with torch.no_grad():
        for x in inputs:  # compile every shape in both
            dyn(input_ids=x)
            sta(input_ids=x)
        same = interleaved({"hb_dynamic": lambda: dyn(input_ids=one),
                            "hb_static": lambda: sta(input_ids=one)}, reps=reps, batch=10)
        mixed = interleaved({"hb_dynamic": cycle(dyn), "hb_static": cycle(sta)},
                            reps=reps, batch=len(inputs))
    return {"same_shape": same, "all_shapes": mixed,
            "ratio_same": same["hb_dynamic"]["median_us"] / same["hb_static"]["median_us"],
            "ratio_all": mixed["hb_dynamic"]["median_us"] / mixed["hb_static"]["median_us"]}


def run_child(args: list[str], timeout: float, quick: bool) -> dict[str, Any]:
    """One variant (or the steady-state pair) in a fresh process with fresh
    compile caches; the load average before and after goes with its result."""
    tmp = tempfile.mkdtemp(prefix="hb-dyn-bench-")
    env = dict(os.environ, PJRT_DEVICE="CPU", HLOBRIDGE_CACHE_DIR=os.path.join(tmp, "hb"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"))
    if quick:
        env["HB_DYN_BENCH_QUICK"] = "1"
    load = os.getloadavg()[0]
    try:
        p = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail)[-400:]}
    res: dict[str, Any] = json.loads(lines[-1])
    res["load"] = [load, os.getloadavg()[0]]
    return res


def summary(r: dict[str, Any]) -> dict[str, float]:
    """First shape's first call and the median first call of the others."""
    firsts = [row["first_call_s"] for row in r["per_shape"]]
    return {"first_shape_s": firsts[0],
            "later_median_s": statistics.median(firsts[1:]) if len(firsts) > 1 else 0.0}


def split(r: dict[str, Any]) -> dict[str, float]:
    """hb_dynamic's per-shape split, medians over the shapes."""
    rows = r["per_shape"]
    return {k: statistics.median(x.get(k, 0.0) for x in rows)
            for k in ("refine_s", "compile_s", "run_s")}


def table(res: dict[str, Any]) -> str:
    """The markdown table (README and docs/dynamic_shapes.md)."""
    n = len(res["shapes"])
    v = res["variants"]
    base = v.get("hb_dynamic", {}).get("total_s")
    out = [f"| time to first results, {n} shapes | total | vs hlobridge `dynamic=True` "
           f"| Dynamo graphs | first shape | each later shape (median) | load |",
           "|---|---|---|---|---|---|---|"]
    for name in VARIANTS:
        r = v.get(name)
        if r is None:
            continue
        if "error" in r:
            out.append(f"| {LABELS[name]} | failed: {r['error'][:80]} | | | | | |")
            continue
        sm = summary(r)
        ratio = f"{r['total_s'] / base:.2f}x" if base else ""
        out.append(f"| {LABELS[name]} | {r['total_s']:.0f} s | {ratio} | {r['dynamo_graphs']} "
                   f"| {sm['first_shape_s']:.1f} s | {sm['later_median_s']:.2f} s "
                   f"| {r['load'][0]:.1f}-{r['load'][1]:.1f} |")
    lines = ["\n".join(out)]
    d = v.get("hb_dynamic")
    if d and "error" not in d:
        sp = split(d)
        routes = ", ".join(f"{k} {c}" for k, c in d["refine_route"].items() if c)
        lines.append(f"hlobridge `dynamic=True` per new shape (median): refinement "
                     f"{sp['refine_s'] * 1e3:.1f} ms ({routes}), XLA compile "
                     f"{sp['compile_s']:.2f} s, run {sp['run_s'] * 1e3:.1f} ms; the lowering "
                     f"{d['lower_s']:.2f} s once ({d['lowerings']} lowering).")
    st = res.get("steady")
    if st and "error" not in st:
        lines.append(f"Steady state per call after warm-up, hlobridge `dynamic=True` / "
                     f"`dynamic=False` (interleaved, one process): {st['ratio_same']:.3f} with one "
                     f"shape repeated ({st['same_shape']['hb_dynamic']['median_us'] / 1e3:.1f} vs "
                     f"{st['same_shape']['hb_static']['median_us'] / 1e3:.1f} ms), "
                     f"{st['ratio_all']:.3f} with all {n} shapes in turn (goal: within 1.05).")
    return "\n\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--full", action="store_true", help="8 seq lens x 4 batch sizes")
    mode.add_argument("--quick", action="store_true", help="smoke test: tiny model, 2 x 2")
    ap.add_argument("--variants", default=None, help=f"comma-separated, of {','.join(VARIANTS)}")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=1800.0, help="per variant, seconds")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--docs", type=Path, help="write dynamic_shapes.json and _table.md here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--steady", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shapes", help=argparse.SUPPRESS)
    a = ap.parse_args()
    reps = a.reps or (3 if a.quick else 7)
    if a.worker or a.steady:
        shapes = [tuple(s) for s in json.loads(a.shapes)]
        out = worker(a.worker, shapes) if a.worker else steady(shapes, reps)
        print(json.dumps(out))
        return
    seqs, batches = ((SEQS_FULL, BATCHES_FULL) if a.full else
                     (SEQS_QUICK, BATCHES_QUICK) if a.quick else (SEQS_DEFAULT, BATCHES_DEFAULT))
    variants = (a.variants or ("hb_dynamic,hb_static" if a.quick else ",".join(VARIANTS))).split(",")
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"unknown variant {v!r}; known: {', '.join(VARIANTS)}")
    shapes = [(b, s) for b in batches for s in seqs]
    random.Random(0).shuffle(shapes)
    spec = json.dumps(shapes)
    print(f"# {len(shapes)} shapes, load {os.getloadavg()[0]:.2f}", flush=True)
    results: dict[str, Any] = {"shapes": shapes, "config": QUICK_CONFIG if a.quick else CONFIG,
                               "mode": "full" if a.full else "quick" if a.quick else "default",
                               "cores": os.cpu_count(), "load_before": os.getloadavg()[0],
                               "variants": {}}
    t_all = time.perf_counter()
    for v in variants:
        r = run_child(["--worker", v, "--shapes", spec], a.timeout, a.quick)
        results["variants"][v] = r
        if "error" in r:
            print(f"{v:18s} failed: {r['error']}", flush=True)
            continue
        sm = summary(r)
        print(f"{v:18s} first results for {r['shapes']} shapes: {r['total_s']:8.1f} s"
              f"  ({r['dynamo_graphs']} Dynamo graphs; first shape {sm['first_shape_s']:.1f} s, "
              f"later median {sm['later_median_s']:.2f} s; load {r['load'][0]:.1f}->"
              f"{r['load'][1]:.1f})", flush=True)
        if v == "hb_dynamic":
            sp = split(r)
            print(f"{'':18s} lowering once {r['lower_s']:.2f} s; per shape (median): refine "
                  f"{sp['refine_s'] * 1e3:.1f} ms ({r['refine_route']}), XLA compile "
                  f"{sp['compile_s']:.2f} s, run {sp['run_s'] * 1e3:.2f} ms", flush=True)
    if "hb_dynamic" in variants and "hb_static" in variants:
        r = run_child(["--steady", "--shapes", spec, "--reps", str(reps)], a.timeout, a.quick)
        results["steady"] = r
        if "error" in r:
            print(f"steady state failed: {r['error']}")
        else:
            print(f"steady state per call, hb_dynamic / hb_static: same shape "
                  f"{r['ratio_same']:.3f} ({r['same_shape']['hb_dynamic']['median_us']:.0f} vs "
                  f"{r['same_shape']['hb_static']['median_us']:.0f} us), all shapes in turn "
                  f"{r['ratio_all']:.3f}")
    results["load_after"] = os.getloadavg()[0]
    results["wall_s"] = time.perf_counter() - t_all
    print(f"# load {results['load_after']:.2f}; {results['wall_s']:.0f} s in all")
    md = table(results)
    print(md)
    for path in [a.json] + ([a.docs / "dynamic_shapes.json"] if a.docs else []):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(results, indent=1))
    if a.docs:
        (a.docs / "dynamic_shapes_table.md").write_text(
            f"<!-- benches/dynamic_shapes_bench.py --{results['mode']}; {results['cores']} cores, "
            f"load {results['load_before']:.1f} -> {results['load_after']:.1f} -->\n\n" + md)


if __name__ == "__main__":
    main()
