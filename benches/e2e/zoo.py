"""The model-zoo part of the e2e benchmark (issue #16, "Speed"): every model
of the test suite's model zoo (``tests/python/model_zoo``: tiny random
Hugging Face, torchvision and timm models, imported, not copied) timed
through hlobridge against eager torch and against inductor (``torch.compile``'s
default backend), interleaved in one process after warm-up and compilation.

Paths (``--zoo-paths``), each one interleaved group of variants:

``infer``
    ``eval()`` under ``no_grad``: the eager module; ``torch.compile(model,
    backend="hlobridge", dynamic=False)``; ``torch.compile(model,
    dynamic=False)`` (inductor). BatchNorm statistics are first set from
    real batches (fresh statistics shrink activations towards subnormals,
    which eager torch does not flush and XLA does).
``step_sgd``
    one whole training step on a fixed batch: ``hb.compile_train_step``
    with ``hb.optim.SGD(momentum=0.9)`` against eager ``loss.backward()`` +
    ``torch.optim.SGD(momentum=0.9)`` and against inductor (the loss
    function, model included, under ``torch.compile``; ``backward()`` and
    eager ``torch.optim.SGD``).
``train``
    ``torch.compile`` training with the hlobridge backend (the loss function
    under ``torch.compile(backend="hlobridge")``, ``backward()``, eager
    ``torch.optim.SGD``), timed in the same group as ``step_sgd`` (the eager
    and inductor variants are shared).

Learning rates are the zoo's (0.01, times the model's ``lr_scale``). Reported
per (model, path): each variant's median and p10-p90 per-call time, the first
call of each compiled variant (trace + lower + compile, excluded from the
step times) as ``compile_s``, the largest output difference from eager on the
first call (logits, or the first step's loss), and ratios: the median of the
per-round paired ratios (the variants of one round run back to back) with its
p10-p90. For the hlobridge variants a breakdown, measured in a separate short
loop after the timing: seconds inside PJRT per call (the receipts'
``run_time_s``: input views, execution and output wait, summed over the
programs a call runs), the rest (host: Dynamo guards, AOTAutograd wrappers,
argument handling, the eager parts), executions per call, the stitched
StableHLO program's op counts and the optimized program's fusions. Every
row slower than eager gets a ``reason`` made from those measurements.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import hlobridge as hb  # noqa: E402
from hlobridge import _native  # noqa: E402
from hlobridge.dynamo import CompiledGraph, compiled_graphs  # noqa: E402
from model_zoo import MODELS, ZooModel, by_name, zoo_loss  # noqa: E402
from model_zoo.spec import calibrate_batchnorm  # noqa: E402
from timing import Stats, interleaved, summarize  # noqa: E402

PATHS = ("infer", "step_sgd", "train")
PATH_TITLES = {"infer": "torch.compile inference", "step_sgd": "compile_train_step + SGD",
               "train": "torch.compile training"}
HB, EAGER, INDUCTOR = "hlobridge", "eager", "inductor"
HB_TRAIN = "hlobridge torch.compile"
RATIOS = ((HB, EAGER), (INDUCTOR, EAGER), (HB, INDUCTOR))
SEED = 20240917
MOMENTUM = 0.9
SGD_LR = 0.01
# StableHLO ops left out of the op summary (bookkeeping, not work).
_TRIVIAL = {"constant", "return", "reshape", "broadcast_in_dim", "convert", "get_tuple_element",
            "tuple", "iota", "slice", "concatenate", "compare", "select"}
# An op in generic or pretty form (``= stablehlo.add`` / ``"stablehlo.add"(``), and
# a custom call's target (``custom_call @mhlo.erf``).
_OP = re.compile(r'(?:=\s*|^\s*|")(?:stablehlo|chlo|mhlo)\.([a-z_]+)(?:\s+@([\w.]+))?', re.M)


class ZooPlan:
    """Repetitions for a full or a ``--quick`` run: ``reps`` rounds of one
    batch per variant; the batch is sized so that the slowest variant's
    batch takes about ``batch_s`` seconds (at most ``max_batch`` calls);
    ``probe`` calls per hlobridge variant for the breakdown; ``models``: the
    default model set (``None``: the whole zoo; the quick plan takes two
    cheap ones, a Hugging Face decoder and a timm MLP-Mixer)."""

    def __init__(self, quick: bool) -> None:
        self.models: list[str] | None = ["hf-gpt2", "timm-mixer"] if quick else None
        self.reps = 5 if quick else 15
        self.batch_s = 0.02 if quick else 0.1
        self.max_batch = 10 if quick else 50
        self.warmup = 2 if quick else 3
        self.probe = 3 if quick else 10


# -- helpers ------------------------------------------------------------------
def _error(e: BaseException) -> str:
    inner = getattr(e, "inner_exception", None)  # Dynamo's BackendCompilerFailed
    if isinstance(inner, BaseException):
        e = inner
    msg = " ".join(str(e).split())
    return f"{type(e).__name__}: {msg[:300]}"


class _Timed:
    """A variant that keeps every call's duration, so that the k-th batch of
    two variants (run in the same round by :func:`timing.interleaved`) can be
    paired."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.times: list[float] = []

    def __call__(self) -> None:
        t0 = time.perf_counter()
        self.fn()
        self.times.append(time.perf_counter() - t0)

    def rounds(self, warmup: int, batch: int) -> list[float]:
        t = self.times[warmup:]
        return [sum(t[i:i + batch]) for i in range(0, len(t) - batch + 1, batch)]


def _ratio(a: list[float], b: list[float]) -> dict[str, float]:
    r = sorted(x / y for x, y in zip(a, b))
    q = statistics.quantiles(r, n=10, method="inclusive") if len(r) > 1 else [r[0]] * 9
    return {"median": statistics.median(r), "p10": q[0], "p90": q[-1], "rounds": len(r)}


def _first_call(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


@contextmanager
def _pjrt_meter() -> Iterator[list[float]]:
    """Sum the receipts' ``run_time_s`` (seconds inside PJRT) and count the
    executions of every compiled hlobridge graph called inside the block:
    ``CompiledGraph.__call__`` and ``try_fast`` (the whole-step hot path) are
    wrapped for the duration (bench instrumentation; nothing else runs
    then). Yields ``[seconds, executions]``."""
    acc = [0.0, 0.0]
    call, fast = CompiledGraph.__call__, CompiledGraph.try_fast

    def counted(run: Callable[[], Any]) -> Any:
        before = _native.stats()["executions"]
        out = run()
        n = _native.stats()["executions"] - before
        if n:
            rec = hb.last_receipt()
            acc[0] += rec.run_time_s if rec is not None else 0.0
            acc[1] += n
        return out

    def call_w(self: CompiledGraph, *args: Any) -> Any:
        return counted(lambda: call(self, *args))

    def fast_w(self: CompiledGraph, args: Any) -> Any:
        return counted(lambda: fast(self, args))

    CompiledGraph.__call__ = call_w  # type: ignore[method-assign]
    CompiledGraph.try_fast = fast_w  # type: ignore[method-assign]
    try:
        yield acc
    finally:
        CompiledGraph.__call__ = call  # type: ignore[method-assign]
        CompiledGraph.try_fast = fast  # type: ignore[method-assign]


def _programs(graphs: list[Any]) -> dict[str, Any]:
    """Op counts of the stitched StableHLO programs and fusions of the
    optimized ones, over every program of ``graphs``."""
    ops: Counter[str] = Counter()
    fusions: Counter[str] = Counter()
    fused: Counter[str] = Counter()
    n = 0
    for g in graphs:
        for prog in g.programs.values():
            n += 1
            ops.update(f"{op} @{target}" if target else op
                       for op, target in _OP.findall(prog.text))
            for _name, kind, opcodes in prog.exe.fusions:
                fusions[kind] += 1
                fused.update(opcodes)
    work = Counter({k: v for k, v in ops.items() if k not in _TRIVIAL})
    return {"programs": n, "stablehlo_ops": sum(ops.values()),
            "stablehlo_top": dict(work.most_common(8)),
            "fusions": dict(fusions), "fused_transpose_copy": fused["transpose"] + fused["copy"]}


def _breakdown(fn: Callable[[], Any], calls: int, graphs: list[Any], eager_s: float
               ) -> dict[str, Any]:
    """``calls`` metered calls of ``fn``: per call, the wall time
    (``probe_ms``; it includes the meter's own few µs per program run),
    the seconds inside PJRT and the rest (``host_ms``), all from the same
    calls; plus the programs' op summary (:func:`_programs`)."""
    for _ in range(2):
        fn()
    with _pjrt_meter() as acc:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        wall = (time.perf_counter() - t0) / calls
    pjrt = acc[0] / calls
    out: dict[str, Any] = {"probe_ms": wall * 1e3, "pjrt_ms": pjrt * 1e3,
                           "host_ms": max(0.0, wall - pjrt) * 1e3,
                           "pjrt_share": min(1.0, pjrt / wall),
                           "executions_per_call": acc[1] / calls,
                           "pjrt_vs_eager": pjrt / eager_s}
    out.update(_programs(graphs))
    return out


def _reason(bd: dict[str, Any], eager_ms: float) -> str:
    """Why a row is slower than eager, from its measured breakdown."""
    top = ", ".join(f"{v} {k}" for k, v in list(bd["stablehlo_top"].items())[:5])
    prog = (f"program: {top}; {sum(bd['fusions'].values())} fusions, "
            f"{bd['fused_transpose_copy']} fused transpose/copy")
    if bd["pjrt_ms"] >= eager_ms:
        return (f"XLA execution {bd['pjrt_ms']:.2f} ms/call, {bd['pjrt_vs_eager']:.1f}x eager's "
                f"whole call ({eager_ms:.2f} ms); host {bd['host_ms']:.2f} ms; {prog}")
    return (f"host overhead {bd['host_ms']:.2f} ms/call over XLA execution "
            f"{bd['pjrt_ms']:.2f} ms (eager {eager_ms:.2f} ms); "
            f"{bd['executions_per_call']:.0f} executions/call; {prog}")


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().float() - b.detach().float()).abs().max())


# -- one group ------------------------------------------------------------------
def _time_group(fns: dict[str, Callable[[], Any]], plan: ZooPlan
                ) -> tuple[dict[str, Stats], dict[str, list[float]], int]:
    """Interleaved timing of ``fns`` (already compiled and warm); returns the
    stats, each variant's per-round batch times and the batch size."""
    slowest = 0.0
    for fn in fns.values():  # size the batch on the slowest variant
        t0 = time.perf_counter()
        fn()
        slowest = max(slowest, time.perf_counter() - t0)
    batch = max(1, min(plan.max_batch, round(plan.batch_s / max(slowest, 1e-6))))
    timed = {k: _Timed(f) for k, f in fns.items()}
    stats = interleaved(timed, plan.reps, batch, warmup=plan.warmup)  # type: ignore[arg-type]
    return stats, {k: t.rounds(plan.warmup, batch) for k, t in timed.items()}, batch


def _row(spec: ZooModel, path: str, stats: dict[str, Stats], rounds: dict[str, list[float]],
         names: dict[str, str]) -> dict[str, Any]:
    """A result row; ``names`` maps the row's roles (hlobridge, eager,
    inductor) to the group's variant names."""
    variants = {role: stats[v] for role, v in names.items() if v in stats}
    ratios = {f"{a}/{b}": _ratio(rounds[names[a]], rounds[names[b]])
              for a, b in RATIOS if names.get(a) in stats and names.get(b) in stats}
    return {"model": spec.name, "library": spec.library, "path": path, "variants": variants,
            "ratios": ratios, "compile_s": {}, "max_abs_diff": {}, "errors": {}}


def _infer(spec: ZooModel, plan: ZooPlan) -> dict[str, Any]:
    torch.manual_seed(SEED)
    model = spec.build()
    calibrate_batchnorm(spec, model)
    model.eval()
    xs = spec.inputs()
    fns: dict[str, Callable[[], Any]] = {}
    compile_s: dict[str, float] = {}
    diffs: dict[str, float] = {}
    errors: dict[str, str] = {}
    graphs: list[Any] = []
    with torch.no_grad():
        eager_m = copy.deepcopy(model)
        ref = spec.logits(eager_m, *xs)
        fns[EAGER] = lambda: spec.logits(eager_m, *xs)
        for name, backend in ((HB, "hlobridge"), (INDUCTOR, "inductor")):
            n0 = len(compiled_graphs())
            m = torch.compile(copy.deepcopy(model), backend=backend, dynamic=False)
            try:
                out, compile_s[name] = _first_call(lambda m=m: spec.logits(m, *xs))
            except Exception as e:  # noqa: BLE001 - recorded as the cell's named error
                errors[name] = _error(e)
                continue
            if name == HB:
                graphs = compiled_graphs()[n0:]
            diffs[name] = _max_diff(out, ref)
            fns[name] = lambda m=m: spec.logits(m, *xs)
        stats, rounds, batch = _time_group(fns, plan)
        row = _row(spec, "infer", stats, rounds, {HB: HB, EAGER: EAGER, INDUCTOR: INDUCTOR})
        if HB in fns:
            row["breakdown"] = _breakdown(fns[HB], plan.probe, graphs,
                                          stats[EAGER]["median_us"] / 1e6)
    row.update(compile_s=compile_s, max_abs_diff=diffs, errors=errors, batch=batch)
    return row


def _train(spec: ZooModel, plan: ZooPlan, paths: list[str]) -> list[dict[str, Any]]:
    """``step_sgd`` and/or ``train``: one interleaved group."""
    torch.manual_seed(SEED)
    model = spec.build().train()
    batch = (*spec.inputs(),)
    batch = (*batch, spec.target(batch))
    loss_fn = zoo_loss(spec)
    lr = SGD_LR * spec.lr_scale
    fns: dict[str, Callable[[], Any]] = {}
    compile_s: dict[str, float] = {}
    losses: dict[str, float] = {}
    errors: dict[str, str] = {}
    graphs: dict[str, list[Any]] = {}

    def torch_step(m: torch.nn.Module, loss: Callable[..., torch.Tensor]) -> Callable[[], Any]:
        opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=MOMENTUM)

        def step() -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            out = loss(*batch)
            out.backward()
            opt.step()
            return out.detach()

        return step

    def add(name: str, make: Callable[[], Callable[[], Any]]) -> None:
        n0 = len(compiled_graphs())
        try:
            fn = make()
            out, compile_s[name] = _first_call(fn)
        except Exception as e:  # noqa: BLE001 - recorded as the cell's named error
            errors[name] = _error(e)
            return
        losses[name] = float(out)
        graphs[name] = compiled_graphs()[n0:]
        fns[name] = fn

    eager_m = copy.deepcopy(model)
    add(EAGER, lambda: torch_step(eager_m, functools.partial(loss_fn, eager_m)))
    if EAGER not in fns:
        raise RuntimeError(f"eager training step failed: {errors[EAGER]}")
    compile_s.pop(EAGER)
    if "step_sgd" in paths:
        def make_step() -> Callable[[], Any]:
            step = hb.compile_train_step(copy.deepcopy(model), loss_fn,
                                         hb.optim.SGD(lr=lr, momentum=MOMENTUM))
            return lambda: step(*batch)
        add(HB, make_step)
    for name, backend in ((HB_TRAIN, "hlobridge"), (INDUCTOR, "inductor")):
        if name == HB_TRAIN and "train" not in paths:
            continue

        def make(backend: str = backend) -> Callable[[], Any]:
            m = copy.deepcopy(model)
            return torch_step(m, torch.compile(functools.partial(loss_fn, m), backend=backend,
                                               dynamic=False))
        add(name, make)
    stats, rounds, nbatch = _time_group(fns, plan)
    rows = []
    for path, hb_name in (("step_sgd", HB), ("train", HB_TRAIN)):
        if path not in paths:
            continue
        row = _row(spec, path, stats, rounds, {HB: hb_name, EAGER: EAGER, INDUCTOR: INDUCTOR})
        row["batch"] = nbatch
        for role, v in ((HB, hb_name), (INDUCTOR, INDUCTOR)):
            if v in compile_s:
                row["compile_s"][role] = compile_s[v]
            if v in losses:
                row["max_abs_diff"][role] = abs(losses[v] - losses[EAGER])
            if v in errors:
                row["errors"][role] = errors[v]
        if hb_name in fns:
            row["breakdown"] = _breakdown(fns[hb_name], plan.probe, graphs[hb_name],
                                          stats[EAGER]["median_us"] / 1e6)
        rows.append(row)
    return rows


def run(plan: ZooPlan, models: list[str] | None, paths: list[str],
        threads: int) -> dict[str, Any]:
    """The zoo part: every model (or those named) through ``paths``."""
    bad = [p for p in paths if p not in PATHS]
    if bad:
        raise ValueError(f"unknown zoo paths {bad}; known: {', '.join(PATHS)}")
    models = models or plan.models
    specs = [by_name(n) for n in models] if models else list(MODELS)
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    t_start = time.perf_counter()
    load0 = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    try:
        for spec in specs:
            groups: list[tuple[str, Callable[[], list[dict[str, Any]]]]] = []
            if "infer" in paths:
                groups.append(("infer", lambda spec=spec: [_infer(spec, plan)]))
            train_paths = [p for p in paths if p != "infer"]
            if train_paths:
                groups.append((",".join(train_paths),
                               lambda spec=spec: _train(spec, plan, train_paths)))
            for label, group in groups:
                torch._dynamo.reset()
                t0 = time.perf_counter()
                try:
                    got = group()
                except Exception as e:  # noqa: BLE001 - the row carries the named error
                    got = [{"model": spec.name, "library": spec.library, "path": p,
                            "error": _error(e)} for p in label.split(",")]
                for row in got:
                    if "error" not in row:
                        row["group_s"] = time.perf_counter() - t0
                        slow = row["ratios"].get(f"{HB}/{EAGER}")
                        row["reason"] = (_reason(row["breakdown"],
                                                 row["variants"][EAGER]["median_us"] / 1e3)
                                         if slow and slow["median"] > 1.0 and "breakdown" in row
                                         else None)
                    rows.append(row)
                    print("  zoo " + _line(row), flush=True)
    finally:
        torch.set_num_threads(saved)
        torch._dynamo.reset()
    load1 = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    # Busy: other work was running when the part started, or the load at
    # the end exceeds what the part's own threads (torch's `threads` plus
    # XLA's) account for by more than half the cores.
    busy = load0 > 0.5 * cores or load1 > max(threads, cores) + 0.5 * cores
    return {"torch_threads": threads, "paths": paths, "reps": plan.reps,
            "batch_s": plan.batch_s, "seed": SEED, "loadavg_1m": [load0, load1],
            "busy": busy, "wall_s": time.perf_counter() - t_start, "rows": rows}


# -- reporting ----------------------------------------------------------------
def _fmt_ratio(r: dict[str, float] | None) -> str:
    if r is None:
        return "–"
    return f"{r['median']:.2f}× ({r['p10']:.2f}–{r['p90']:.2f})"


def _line(row: dict[str, Any]) -> str:
    head = f"{row['model']:24} {row['path']:9}"
    if "error" in row:
        return f"{head} ERROR {row['error']}"
    v = row["variants"]
    ms = ", ".join(f"{k} {s['median_us'] / 1e3:.2f}" for k, s in v.items())
    rs = "  ".join(f"{k} {_fmt_ratio(r)}" for k, r in row["ratios"].items())
    errs = "".join(f"  [{k} failed: {e}]" for k, e in row["errors"].items())
    return f"{head} {ms} ms  {rs}{errs}"


def table_lines(zoo: dict[str, Any]) -> list[str]:
    """Plain-text lines for the console summary."""
    lines = [f"model zoo (torch threads {zoo['torch_threads']}; ms per call, ratio median "
             f"(p10-p90 of paired rounds); load average {zoo['loadavg_1m'][0]:.1f} -> "
             f"{zoo['loadavg_1m'][1]:.1f}{', BUSY: not representative' if zoo['busy'] else ''})"]
    lines += ["  " + _line(r) for r in zoo["rows"]]
    return lines


def _cell(row: dict[str, Any], role: str) -> str:
    if role in row["errors"]:
        return f"`{row['errors'][role].split(':')[0]}`"
    return _fmt_ratio(row["ratios"].get(f"{role}/{EAGER}"))


def markdown(zoo: dict[str, Any], readme: bool = False) -> str:
    """The ratio table as Markdown; ``readme`` gives the shorter block
    written to ``zoo_table.md`` for the README."""
    out = []
    if zoo.get("busy"):
        out += [f"**Busy machine**: 1-minute load average {zoo['loadavg_1m'][0]:.1f} at the "
                f"start and {zoo['loadavg_1m'][1]:.1f} at the end on {os.cpu_count()} cores; "
                "torch's OpenMP threads slow down by large factors when the cores are "
                "oversubscribed, so these ratios are not representative.", ""]
    if readme:
        out += [f"Model zoo, per call, hlobridge and inductor against eager torch (lower is better; "
                f"median of paired interleaved rounds, p10–p90 in parentheses; torch "
                f"{zoo['torch_threads']} threads; compile time excluded, shown in seconds). "
                "Generated by `make bench` (`benches/e2e/zoo.py`).", ""]
    out += ["| model | path | eager ms | hlobridge / eager | inductor / eager | "
            "hlobridge / inductor | compile s (hlobridge / inductor) | slower than eager: "
            "measured reason |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in zoo["rows"]:
        path = PATH_TITLES.get(r["path"], r["path"])
        if "error" in r:
            out.append(f"| {r['model']} | {path} | – | `{r['error']}` | | | | |")
            continue
        c = r["compile_s"]
        comp = " / ".join(f"{c[k]:.1f}" if k in c else "–" for k in (HB, INDUCTOR))
        eager = r["variants"][EAGER]["median_us"] / 1e3
        hbi = r["ratios"].get(f"{HB}/{INDUCTOR}")
        out.append(f"| {r['model']} | {path} | {eager:.2f} | {_cell(r, HB)} | "
                   f"{_cell(r, INDUCTOR)} | {_fmt_ratio(hbi)} | {comp} | {r.get('reason') or ''} |")
    errors = [(r, k, e) for r in zoo["rows"] if "error" not in r for k, e in r["errors"].items()]
    if errors:
        out += ["", "Variants that failed:", ""]
        out += [f"- {r['model']} / {PATH_TITLES.get(r['path'], r['path'])} / {k}: `{e}`"
                for r, k, e in errors]
    return "\n".join(out) + "\n"


def targets(zoo: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's goal, per path: the slowest model's hlobridge / eager."""
    rows = []
    for path in zoo["paths"]:
        rs = [(r["ratios"][f"{HB}/{EAGER}"]["median"], r["model"]) for r in zoo["rows"]
              if r["path"] == path and "error" not in r and f"{HB}/{EAGER}" in r["ratios"]]
        if rs:
            worst, model = max(rs)
            rows.append({"target": f"zoo {PATH_TITLES[path]}: slowest hlobridge/eager ({model})",
                         "ratio": worst, "goal": "<= 1.0x", "met": worst <= 1.0})
    return rows
