"""End-to-end benchmark suite (issue #8): every measurement in one run on one
machine, written to ``<out>/e2e.json`` (and ``e2e.md``, Markdown tables) with PNG plots, and a summary table of
the targets (met / missed).

Parts (``--only`` picks a subset):
  step      hybrid training step, five ways (+ hlobridge unfused), several sizes
  dispatch  per-call overhead of a tiny program
  parse     hlobridge parse+print vs MLIR's C++ parser/printer (jaxlib)
  stitch    stitcher throughput on chains of segments
  ragged    ragged paged attention vs padded
  cache     compile cache: cold vs warm start of a large program
  zoo       model zoo: hlobridge vs eager vs inductor per model and path (zoo.py)

Run:  make bench        (= .venv/bin/python benches/e2e/run.py)
      benches/e2e/run.py --quick --only dispatch,step --sizes small --no-torch-xla --out /tmp/b
      benches/e2e/run.py --only zoo --models hf-gpt2,tv-resnet18 --zoo-paths infer --out /tmp/b
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hybrid_step as hs  # noqa: E402
import parts  # noqa: E402
import plots  # noqa: E402
import zoo  # noqa: E402
from timing import interleaved  # noqa: E402

PARTS = ("step", "dispatch", "parse", "stitch", "ragged", "cache", "zoo")


class Plan:
    """Repetitions and sizes for a full or a ``--quick`` run."""

    def __init__(self, quick: bool) -> None:
        self.quick = quick
        # (reps, calls per batch) per step size
        self.step = {"small": (41, 50), "medium": (41, 20), "large": (21, 4)} if not quick \
            else {"small": (7, 10), "medium": (7, 5), "large": (5, 2)}
        self.dispatch = (51, 200) if not quick else (7, 50)
        self.modules = [(2, 2), (12, 6), (24, 6)] if not quick else [(1, 1)]
        self.parse_reps = 7 if not quick else 3
        self.stitch_chains = [8, 64, 256] if not quick else [4, 16]
        self.stitch_reps = 7 if not quick else 3
        self.ragged_seqs = [4, 8, 16] if not quick else [4]
        self.ragged_reps = 5 if not quick else 2
        self.cache_modules = [(2, 2), (1, 1), (4, 2)] if not quick else [(1, 1)]
        self.cache_reps = 3 if not quick else 1
        self.zoo = zoo.ZooPlan(quick)


def machine() -> dict[str, Any]:
    model = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines()
                      if ln.startswith("Model name")), "")
    except OSError:
        pass
    import jax

    import hlobridge as hb
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__,
            "jax": jax.__version__, "platform": hb.runtime().platform,
            "torch_threads": torch.get_num_threads(),
            "loadavg_1m": os.getloadavg()[0]}


def torch_xla_worker(cfg: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Run ``txla_worker.py`` in the jax 0.7.1 venv of ``benches/torch_xla/env.py``."""
    sys.path.insert(0, str(ROOT / "benches" / "torch_xla"))
    import env  # benches/torch_xla/env.py

    proc = subprocess.run([str(env.python()), str(HERE / "txla_worker.py"), json.dumps(cfg),
                           str(out_dir)], capture_output=True, text=True,
                          env=dict(os.environ, PJRT_DEVICE="CPU"))
    if proc.returncode:
        raise RuntimeError(f"torch_xla worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_steps(plan: Plan, sizes: list[str], with_txla: bool, tmp: Path) -> dict[str, Any]:
    txla: dict[str, Any] = {}
    if with_txla:
        cfg = {"sizes": {s: hs.SIZES[s] for s in sizes}, "step_reps": {s: plan.step[s] for s in sizes},
               "tiny": plan.dispatch}
        txla = torch_xla_worker(cfg, tmp)
    res: dict[str, Any] = {}
    for s in sizes:
        n, d_in, d_out = hs.SIZES[s]
        steps = hs.variants(n, d_in, d_out)
        extra = {}
        if with_txla:
            with np.load(tmp / f"{s}.npz") as z:
                extra[hs.TORCH_XLA] = [z[f"arr_{i}"] for i in range(len(z.files))]
        diffs = hs.check(steps, extra)
        reps, batch = plan.step[s]
        with torch.no_grad():
            st = interleaved(steps, reps, batch)
        if with_txla:
            st[hs.TORCH_XLA] = txla[f"step/{s}"]
        res[s] = {"shape": f"batch {n}, {d_in}->{d_out}", "variants": st, "max_abs_diff": diffs}
        print(f"  step {s}: " + ", ".join(f"{k} {v['median_us']:.0f}" for k, v in st.items()) + " µs",
              flush=True)
    if "tiny" in txla:
        res["_txla_tiny"] = txla["tiny"]
    return res


def contention(plan: Plan, threads: int) -> dict[str, Any]:
    """The small step's hop variants again with torch's default intra-op
    thread count: torch's OpenMP pool and XLA's pool then compete for the
    cores at every torch <-> JAX hand-off (recorded, not used for targets)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        steps = hs.variants(*hs.SIZES["small"])
        keep = (hs.FUSED, hs.UNFUSED, hs.DLPACK, hs.HOST)
        reps, batch = plan.step["small"]
        with torch.no_grad():
            st = interleaved({k: steps[k] for k in keep}, max(5, reps // 4), max(2, batch // 5))
    finally:
        torch.set_num_threads(saved)
    return {"torch_threads": threads, "size": "small", "variants": st}


def targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with its measured ratio and met / missed."""
    rows = []

    def add(what: str, ratio: float, goal: str, met: bool) -> None:
        rows.append({"target": what, "ratio": ratio, "goal": goal, "met": met})

    step = r.get("step", {})
    for s, row in step.items():
        v = {k: x["median_us"] for k, x in row["variants"].items()}
        f = v[hs.FUSED]
        if s == "small":
            add(f"fused vs DLPack hop, {s} (speed-up)", v[hs.DLPACK] / f, ">= 2x", v[hs.DLPACK] / f >= 2)
        add(f"fused / pure jax, {s} (time ratio)", f / v[hs.PURE_JAX], "<= 1.05x",
            f / v[hs.PURE_JAX] <= 1.05)
        if hs.PURE_JAX_PLUGIN in v:  # the same XLA build as the fused program (context row)
            add(f"fused / pure jax on the same plugin, {s} (time ratio)", f / v[hs.PURE_JAX_PLUGIN],
                "<= 1.05x", f / v[hs.PURE_JAX_PLUGIN] <= 1.05)
        if s == "medium" and hs.TORCH_XLA in v:
            add(f"fused vs torch_xla call_jax, {s} 128² (speed-up)", v[hs.TORCH_XLA] / f, ">= 3x",
                v[hs.TORCH_XLA] / f >= 3)
    if "cache" in r:
        c = r["cache"]
        add(f"compile cache warm vs cold ({c['mode']})", c["ratio"], ">= 20x", c["ratio"] >= 20)
        if "jaxlib_ratio" in c:  # context: the same measurement of jaxlib's own cache path
            add("compile cache warm vs cold, jaxlib's serialize/deserialize (anchor)",
                c["jaxlib_ratio"], ">= 20x", c["jaxlib_ratio"] >= 20)
    if "zoo" in r:
        rows += zoo.targets(r["zoo"])
    return rows


def table(r: dict[str, Any]) -> str:
    lines = []
    for s, row in r.get("step", {}).items():
        f = row["variants"][hs.FUSED]["median_us"]
        lines.append(f"step {s} ({row['shape']})")
        for k, v in row["variants"].items():
            lines.append(f"  {k:30} {v['median_us']:10.1f} µs  [p10 {v['p10_us']:.1f}, p90 "
                         f"{v['p90_us']:.1f}]  {v['median_us'] / f:6.2f}x fused")
    if "step_contention" in r:
        c = r["step_contention"]
        lines.append(f"step small with torch's default {c['torch_threads']} threads (contention)")
        for k, v in c["variants"].items():
            lines.append(f"  {k:30} {v['median_us']:10.1f} µs  [p10 {v['p10_us']:.1f}, p90 {v['p90_us']:.1f}]")
    if "dispatch" in r:
        lines.append("dispatch, tiny program (x*2+1 on 8 floats)")
        for k, v in r["dispatch"].items():
            lines.append(f"  {k:30} {v['median_us']:10.2f} µs  [p10 {v['p10_us']:.2f}, p90 {v['p90_us']:.2f}]")
    for p in r.get("parse", []):
        lines.append(f"parse+print {p['file']} ({p['mb']:.2f} MB): hlobridge {p['ours_mb_s']:.0f} MB/s, "
                     f"MLIR {p['mlir_mb_s']:.1f} MB/s (parse {p['mlir_parse_mb_s']:.1f}, print "
                     f"{p['mlir_print_mb_s']:.1f}) -> {p['speedup']:.1f}x")
    for p in r.get("stitch", []):
        lines.append(f"stitch {p['segments']:4} segments ({p['mb_in']:.2f} MB in): "
                     f"{p['time']['median_us'] / 1e3:.1f} ms, {p['mb_s']:.0f} MB/s")
    for p in r.get("ragged", []):
        lines.append(f"ragged attention {p['seqs']} seqs ({p['tokens']} q tokens): ragged "
                     f"{p['ragged']['median_us'] / 1e3:.1f} ms, padded {p['padded']['median_us'] / 1e3:.1f} ms "
                     f"-> {p['speedup']:.1f}x")
    if "cache" in r:
        c = r["cache"]
        for z in c.get("sizes", [c]):
            line = (f"compile cache ({c['mode']}) {z['module']}: cold {z['cold_s']:.2f} s, "
                    f"warm {z['warm_s'] * 1e3:.0f} ms -> {z['ratio']:.1f}x")
            if "jaxlib_ratio" in z:
                line += (f"; jaxlib cold {z['jaxlib_cold_s']:.2f} s, warm "
                         f"{z['jaxlib_warm_s'] * 1e3:.0f} ms -> {z['jaxlib_ratio']:.1f}x")
            lines.append(line)
    if "zoo" in r:
        lines += zoo.table_lines(r["zoo"])
    lines.append("targets")
    for t in r["targets"]:
        lines.append(f"  {t['target']:52} {t['ratio']:8.2f}x  goal {t['goal']:8} "
                     f"{'met' if t['met'] else 'MISSED'}")
    return "\n".join(lines)


def markdown(r: dict[str, Any]) -> str:
    """The results as Markdown tables (for docs/bench.md)."""
    m = r["machine"]
    out = [f"Machine: {m['cpu']}, {m['cores']} cores; torch {m['torch']}, jax {m['jax']}, "
           f"plugin platform {m['platform']}; torch intra-op threads {m['torch_threads']}; "
           f"1-min load average at start {m['loadavg_1m']:.1f}; {'quick' if r['quick'] else 'full'} run started "
           f"{r['started']} UTC, {r['wall_s']:.0f} s.", ""]
    if r.get("step"):
        out += ["| step size | variant | median µs | p10–p90 µs | × fused |", "| --- | --- | ---: | ---: | ---: |"]
        for s, row in r["step"].items():
            f = row["variants"][hs.FUSED]["median_us"]
            for k, v in row["variants"].items():
                out.append(f"| {s} ({row['shape']}) | {k} | {v['median_us']:.0f} | "
                           f"{v['p10_us']:.0f}–{v['p90_us']:.0f} | {v['median_us'] / f:.2f} |")
        out.append("")
    if "step_contention" in r:
        c = r["step_contention"]
        out += [f"Small step again with torch's default {c['torch_threads']} intra-op threads (not used for targets):", "",
                "| variant | median µs | p10–p90 µs |", "| --- | ---: | ---: |"]
        out += [f"| {k} | {v['median_us']:.0f} | {v['p10_us']:.0f}–{v['p90_us']:.0f} |"
                for k, v in c["variants"].items()]
        out.append("")
    if "dispatch" in r:
        out += ["| tiny-program dispatch | median µs | p10–p90 µs |", "| --- | ---: | ---: |"]
        out += [f"| {k} | {v['median_us']:.1f} | {v['p10_us']:.1f}–{v['p90_us']:.1f} |"
                for k, v in r["dispatch"].items()]
        out.append("")
    if r.get("parse"):
        out += ["| module | MB | hlobridge parse+print MB/s | MLIR parse+print MB/s (parse / print) | speed-up |",
                "| --- | ---: | ---: | ---: | ---: |"]
        out += [f"| {p['file']} | {p['mb']:.2f} | {p['ours_mb_s']:.0f} | {p['mlir_mb_s']:.1f} "
                f"({p['mlir_parse_mb_s']:.1f} / {p['mlir_print_mb_s']:.1f}) | {p['speedup']:.1f}× |"
                for p in r["parse"]]
        out.append("")
    if r.get("stitch"):
        out += ["| stitch chain | MB in | median ms | p10–p90 ms | MB/s |", "| ---: | ---: | ---: | ---: | ---: |"]
        out += [f"| {p['segments']} segments | {p['mb_in']:.2f} | {p['time']['median_us'] / 1e3:.1f} | "
                f"{p['time']['p10_us'] / 1e3:.1f}–{p['time']['p90_us'] / 1e3:.1f} | {p['mb_s']:.0f} |"
                for p in r["stitch"]]
        out.append("")
    if r.get("ragged"):
        out += ["| ragged attention | q tokens | ragged ms (p10–p90) | padded ms (p10–p90) | speed-up |",
                "| --- | ---: | ---: | ---: | ---: |"]
        for p in r["ragged"]:
            g, d = p["ragged"], p["padded"]
            out.append(f"| {p['seqs']} seqs | {p['tokens']} | {g['median_us'] / 1e3:.1f} "
                       f"({g['p10_us'] / 1e3:.1f}–{g['p90_us'] / 1e3:.1f}) | {d['median_us'] / 1e3:.1f} "
                       f"({d['p10_us'] / 1e3:.1f}–{d['p90_us'] / 1e3:.1f}) | {p['speedup']:.1f}× |")
        out.append("")
    if "cache" in r:
        c = r["cache"]
        out += ["| compile cache (on-disk) | MB text | hlobridge cold s | hlobridge warm ms | "
                "warm vs cold | jaxlib cold s | jaxlib warm ms | jaxlib warm vs cold |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for z in c.get("sizes", [c]):
            anchor = (f"{z['jaxlib_cold_s']:.2f} | {z['jaxlib_warm_s'] * 1e3:.0f} | "
                      f"{z['jaxlib_ratio']:.1f}×" if "jaxlib_ratio" in z else "– | – | –")
            out.append(f"| {z['module']} | {z.get('mb', z['module_bytes'] / 1e6):.2f} | "
                       f"{z['cold_s']:.2f} | {z['warm_s'] * 1e3:.0f} | {z['ratio']:.1f}× | {anchor} |")
        out.append("")
    if "zoo" in r:
        out += [zoo.markdown(r["zoo"])]
    out += ["| target | measured | goal | |", "| --- | ---: | --- | --- |"]
    out += [f"| {t['target']} | {t['ratio']:.2f}× | {t['goal']} | {'met' if t['met'] else '**missed**'} |"
            for t in r["targets"]]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few repetitions, small inputs (smoke run)")
    ap.add_argument("--only", default=",".join(PARTS), help=f"comma list of {','.join(PARTS)}")
    ap.add_argument("--sizes", default="small,medium,large", help="step sizes: small,medium,large")
    ap.add_argument("--no-torch-xla", dest="torch_xla", action="store_false",
                    help="skip torch_xla's call_jax (needs the jax 0.7.1 venv)")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="torch intra-op threads for the step (default 1: with more, torch's "
                         "OpenMP pool and XLA's pool fight over the cores at each hop; the small "
                         "step is also run with torch's default and recorded as step_contention)")
    ap.add_argument("--models", default="",
                    help="zoo: comma list of model-zoo names (default: every model; "
                         "--quick: hf-gpt2,timm-mixer)")
    ap.add_argument("--zoo-paths", default="infer,step_sgd",
                    help=f"zoo: comma list of {','.join(zoo.PATHS)}")
    ap.add_argument("--zoo-torch-threads", type=int, default=None,
                    help="zoo: torch intra-op threads (default: torch's default, all cores, as "
                         "XLA's pool uses)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results")
    ap.add_argument("--docs", type=Path, default=None,
                    help="also copy the plots here (make bench: docs/bench)")
    a = ap.parse_args(argv)
    only = [p for p in a.only.split(",") if p]
    bad = set(only) - set(PARTS)
    if bad:
        ap.error(f"unknown parts {sorted(bad)}")
    known = {m.name for m in zoo.MODELS}
    if bad := [m for m in a.models.split(",") if m and m not in known]:
        ap.error(f"unknown zoo models {bad}; known: {', '.join(sorted(known))}")
    if bad := [p for p in a.zoo_paths.split(",") if p and p not in zoo.PATHS]:
        ap.error(f"unknown zoo paths {bad}; known: {', '.join(zoo.PATHS)}")
    sizes = [s for s in a.sizes.split(",") if s]
    plan = Plan(a.quick)
    a.out.mkdir(parents=True, exist_ok=True)
    cache_dir = Path(os.environ.get("HLOBRIDGE_BENCH_CACHE", ROOT / ".cache"))
    default_threads = torch.get_num_threads()
    torch.set_num_threads(a.torch_threads)
    r: dict[str, Any] = {"machine": machine(), "quick": a.quick, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if "step" in only:
            print("step ...", flush=True)
            r["step"] = run_steps(plan, sizes, a.torch_xla, Path(tmp))
            txla_tiny = r["step"].pop("_txla_tiny", None)
            if "small" in sizes and default_threads != a.torch_threads:
                r["step_contention"] = contention(plan, default_threads)
        else:
            txla_tiny = None
    if "dispatch" in only:
        print("dispatch ...", flush=True)
        r["dispatch"] = parts.dispatch(*plan.dispatch)
        if txla_tiny:
            r["dispatch"]["torch_xla call_jax (subprocess)"] = txla_tiny
    if "parse" in only:
        print("parse ...", flush=True)
        r["parse"] = [parts.parse_print(parts.big_module(l, acc, cache_dir), plan.parse_reps)
                      for l, acc in plan.modules]
    if "stitch" in only:
        print("stitch ...", flush=True)
        r["stitch"] = parts.stitch(plan.stitch_chains, plan.stitch_reps)
    if "ragged" in only:
        print("ragged ...", flush=True)
        r["ragged"] = parts.ragged(plan.ragged_seqs, plan.ragged_reps, 256 if not a.quick else 64)
    if "cache" in only:
        print("cache ...", flush=True)
        r["cache"] = parts.compile_cache([parts.big_module(*m, cache_dir) for m in plan.cache_modules],
                                         plan.cache_reps)
    if "zoo" in only:
        print("zoo ...", flush=True)
        r["zoo"] = zoo.run(plan.zoo, [m for m in a.models.split(",") if m] or None,
                           [p for p in a.zoo_paths.split(",") if p],
                           a.zoo_torch_threads or default_threads)
    r["targets"] = targets(r)
    r["wall_s"] = time.perf_counter() - t_start

    pngs = []
    if r.get("step"):
        pngs.append(plots.step_plot(r["step"], a.out / "e2e_step.png"))
    if "dispatch" in r:
        pngs.append(plots.dispatch_plot(r["dispatch"], a.out / "e2e_dispatch.png"))
    if "parse" in r:
        pngs.append(plots.parse_plot(r["parse"], a.out / "e2e_parse_print.png"))
    if "ragged" in r:
        pngs.append(plots.ragged_plot(r["ragged"], a.out / "e2e_ragged.png"))
    if "stitch" in r:
        pngs.append(plots.stitch_plot(r["stitch"], r.get("cache"), a.out / "e2e_stitch_cache.png"))
    extra = []
    if r.get("zoo", {}).get("rows"):
        busy = "busy machine (load average above half the cores): not representative"
        pngs.append(plots.zoo_plot(r["zoo"]["rows"], a.out / "zoo.png",
                                   busy if r["zoo"]["busy"] else ""))
        (a.out / "zoo_table.md").write_text(zoo.markdown(r["zoo"], readme=True))
        extra.append(a.out / "zoo_table.md")
    r["plots"] = [p.name for p in pngs]
    (a.out / "e2e.json").write_text(json.dumps(r, indent=1))
    (a.out / "e2e.md").write_text(markdown(r))
    if a.docs:
        a.docs.mkdir(parents=True, exist_ok=True)
        for p in [*pngs, *extra]:
            shutil.copy(p, a.docs / p.name)
    print(table(r))
    print(f"wrote {a.out / 'e2e.json'} and {len(pngs)} plots; {r['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
