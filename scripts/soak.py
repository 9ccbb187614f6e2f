#!/usr/bin/env python3
"""Soak test: hlobridge's four entry points from several threads for N
minutes, checking that process resources stay flat.

Kinds of work, each thread cycling through all of them on its own objects:

* ``call_jax``      -- ``hb.call_jax`` on fresh random tensors (native fast path),
                       and every 8th call with gradients (``jax.vjp`` programs);
* ``torch_compile`` -- a ``torch.compile(backend="hlobridge")`` MLP with a
                       ``call_jax`` activation, forward + backward;
* ``train_step``    -- ``hb.compile_train_step`` (forward, backward, SGD update
                       as ONE program);
* ``stitch``        -- ``hb.stitch_program`` (``_native.stitch``) of a torch
                       and a JAX segment, then ``StitchedProgram.run`` (every
                       stitch is a fresh module with the same text, so the
                       compile is a content-cache hit).

Every 16th call of each kind is checked against eager torch (float32,
rtol=1e-4, atol=1e-4: XLA vs torch kernels on O(1) values, sums of <= 32 terms).

A sampler records RSS (``/proc/self/statm``), open file descriptors
(``/proc/self/fd``) and the thread count (``/proc/self/status``) every
``--sample-s`` seconds. After the warm-up (``--warmup-s``, default 20% of the
run, at most 120 s), the *baseline* is the median of the first ``--window``
samples and the *end* is the median of the last ``--window`` samples. The run
fails (exit 1, with a message naming the resource) when

* end RSS  > baseline RSS + max(``--rss-allow-mib`` MiB, ``--rss-allow-frac`` x baseline)
* end fds  > baseline fds + ``--fd-allow``
* end threads > baseline threads + ``--thread-allow``

or when any call raised or gave a wrong result, or when the run stalls: no
call finished for ``--stall-s`` seconds (the Python stacks of every thread
are printed, exit 1), or the sampler itself could not run for that long (a
deadlock holding the GIL: ``faulthandler``'s watchdog, which needs no GIL,
prints the stacks and exits 1). The summary (calls per kind,
resources at start / baseline / end, min / max) is printed and written as JSON
(``--json``, default ``bench-results/soak.json``).

Usage: ``make soak MINUTES=20`` or
``PJRT_DEVICE=CPU .venv/bin/python scripts/soak.py --minutes 2``.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hlobridge as hb  # noqa: E402
from hlobridge import _native  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOL = dict(rtol=1e-4, atol=1e-4)
CHECK_EVERY = 16
KINDS = ("call_jax", "torch_compile", "train_step", "stitch")


# --- resources ----------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def thread_count() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise RuntimeError("no Threads: line in /proc/self/status")


def sample() -> dict[str, float]:
    return {"rss_mib": rss_bytes() / 2**20, "fds": open_fds(), "threads": thread_count()}


# --- the work -----------------------------------------------------------------


def jax_act(h: jax.Array) -> jax.Array:
    return jnp.tanh(h) * jax.nn.sigmoid(h)


def torch_act(h: torch.Tensor) -> torch.Tensor:
    return torch.tanh(h) * torch.sigmoid(h)


def jax_dense(x: jax.Array, w: jax.Array) -> jax.Array:
    return jnp.tanh(x @ w) + 0.5 * x.sum(axis=1, keepdims=True)


class JaxMLP(torch.nn.Module):
    """torch Linear -> JAX activation -> torch Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor, act: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        h = self.fc1(x)
        h = hb.call_jax(jax_act, h) if act is None else act(h)
        return self.fc2(h)


def close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(got.detach(), want.detach(), **TOL, msg=lambda m: f"{what}: {m}")


class Worker:
    """One thread's own objects for every kind of work."""

    def __init__(self, idx: int) -> None:
        self.idx = idx
        self.gen = torch.Generator().manual_seed(1000 + idx)
        self.n = dict.fromkeys(KINDS, 0)
        # torch.compile: its own model instance (same graph: the backend's
        # executables are shared through the compile cache).
        self.cmodel = JaxMLP()
        self.compiled = torch.compile(self.cmodel, backend="hlobridge", dynamic=False)
        # whole-step capture: its own model and optimizer state.
        self.smodel = JaxMLP()
        self.step = hb.compile_train_step(self.smodel, lambda m, x, y: F.mse_loss(m(x), y),
                                          hb.optim.SGD(lr=1e-2, momentum=0.9))
        # stitching: a torch segment (torch.export -> StableHLO) and a JAX one.
        self.stitch_parts = stitch_parts()

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen)

    def call_jax(self) -> None:
        x, w = self.randn(8, 32), self.randn(32, 32) / 6
        check = self.n["call_jax"] % CHECK_EVERY == 0
        if self.n["call_jax"] % 8 == 4:
            x.requires_grad_()
            y = hb.call_jax(jax_dense, x, w)
            (gx,) = torch.autograd.grad(y.sum(), [x])
            if check:
                x2 = x.detach().clone().requires_grad_()
                (g2,) = torch.autograd.grad((torch.tanh(x2 @ w) + 0.5 * x2.sum(1, keepdim=True)).sum(), [x2])
                close(gx, g2, "call_jax gradient")
        else:
            y = hb.call_jax(jax_dense, x, w)
            if check:
                close(y, torch.tanh(x @ w) + 0.5 * x.sum(1, keepdim=True), "call_jax")

    def torch_compile(self) -> None:
        x = self.randn(8, 16)
        self.cmodel.zero_grad(set_to_none=True)
        out = self.compiled(x)
        out.sum().backward()
        if self.n["torch_compile"] % CHECK_EVERY == 0:
            with torch.enable_grad():
                ref = self.cmodel(x, act=torch_act)
            close(out, ref, "torch.compile output")
            grads = torch.autograd.grad(ref.sum(), [self.cmodel.fc1.weight])
            close(self.cmodel.fc1.weight.grad, grads[0], "torch.compile gradient")  # type: ignore[arg-type]

    def train_step(self) -> None:
        x, y = self.randn(8, 16), self.randn(8, 4)
        check = self.n["train_step"] % CHECK_EVERY == 0
        if check:
            with torch.no_grad():
                want = F.mse_loss(self.smodel(x, act=torch_act), y)
        loss = self.step(x, y)
        if check:
            close(loss, want, "train_step loss")
        if not torch.isfinite(loss):
            raise FloatingPointError("train_step loss is not finite")

    def stitch(self) -> None:
        pre, post, types = self.stitch_parts
        prog = hb.stitch_program(
            [("x", types[0]), ("w", types[1])],
            [("pre", "torch", pre, "main", ["x"], ["h"]),
             ("dense", "jax", post, "main", ["h", "w"], ["y"])],
            ["y"])
        x, w = self.randn(8, 32), self.randn(32, 32) / 6
        (y,) = prog.run(x, w)
        if self.n["stitch"] % CHECK_EVERY == 0:
            h = torch.sin(x) * 2.0
            close(y, torch.tanh(h @ w) + 0.5 * h.sum(1, keepdim=True), "stitched program")


def stitch_parts() -> tuple[str, str, tuple[str, str]]:
    """Module texts of the two segments (lowered once per process)."""
    global _PARTS
    if _PARTS is None:
        from torch_xla.stablehlo import exported_program_to_stablehlo  # type: ignore[import-not-found]

        class Pre(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return torch.sin(x) * 2.0

        x, w = torch.zeros(8, 32), torch.zeros(32, 32)
        ep = torch.export.export(Pre(), (x,))
        pre = exported_program_to_stablehlo(ep).get_stablehlo_text("forward")
        post = jax.jit(jax_dense).lower(jnp.zeros((8, 32)), jnp.zeros((32, 32))).as_text()
        _PARTS = (pre, post, ("tensor<8x32xf32>", "tensor<32x32xf32>"))
    return _PARTS


_PARTS: tuple[str, str, tuple[str, str]] | None = None


# --- driver -------------------------------------------------------------------


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--sample-s", type=float, default=2.0, help="seconds between resource samples")
    ap.add_argument("--warmup-s", type=float, default=None,
                    help="seconds before the baseline (default: 20%% of the run, at most 120)")
    ap.add_argument("--window", type=int, default=10, help="samples in the baseline and end medians")
    ap.add_argument("--rss-allow-mib", type=float, default=64.0)
    ap.add_argument("--rss-allow-frac", type=float, default=0.05)
    ap.add_argument("--fd-allow", type=int, default=2)
    ap.add_argument("--thread-allow", type=int, default=2)
    ap.add_argument("--stall-s", type=float, default=180.0,
                    help="fail when no call finishes (or the sampler cannot run) for this long")
    ap.add_argument("--json", type=Path, default=ROOT / "bench-results" / "soak.json")
    a = ap.parse_args()

    duration = a.minutes * 60.0
    warmup = a.warmup_s if a.warmup_s is not None else min(120.0, 0.2 * duration)
    t_start = time.monotonic()
    start = sample()
    # Until the summary replaces it: a run killed by the watchdog (or by
    # anything else) leaves a failed record, never a stale pass.
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps({"minutes": a.minutes, "threads": a.threads, "passed": False,
                                  "failures": ["the run did not finish (killed, or stopped by the "
                                               "stall watchdog: see its stderr)"]}, indent=1))
    faulthandler.dump_traceback_later(max(600.0, a.stall_s), exit=True)  # setup compiles
    print(f"[soak] setting up {a.threads} workers (compiles happen here)", flush=True)
    workers = [Worker(i) for i in range(a.threads)]
    for w in workers:  # first call of every kind in this thread: compiles, checks
        for kind in KINDS:
            getattr(w, kind)()
            w.n[kind] += 1
    setup_s = time.monotonic() - t_start
    print(f"[soak] setup {setup_s:.1f}s; running {a.minutes:g} min from {a.threads} threads, "
          f"warm-up {warmup:.0f}s", flush=True)

    stop = threading.Event()
    errors: list[str] = []
    err_lock = threading.Lock()

    def run(w: Worker) -> None:
        i = w.idx  # threads start on different kinds
        while not stop.is_set():
            kind = KINDS[i % len(KINDS)]
            i += 1
            try:
                getattr(w, kind)()
            except Exception:  # noqa: BLE001 - every failure is reported and fails the run
                with err_lock:
                    errors.append(f"thread {w.idx} {kind} call {w.n[kind]}:\n{traceback.format_exc()}")
                    if len(errors) >= 5:
                        stop.set()
            w.n[kind] += 1

    threads = [threading.Thread(target=run, args=(w,), name=f"soak-{w.idx}", daemon=True) for w in workers]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    samples: list[dict[str, float]] = []
    next_print = t0 + 30
    last_calls, last_progress = -1, t0
    stalled = ""
    while not stop.is_set():
        # Re-armed every sample: if this loop cannot run for --stall-s
        # (a native deadlock that holds the GIL), the C watchdog thread
        # dumps every thread's Python stack and exits the process with 1.
        faulthandler.dump_traceback_later(a.stall_s, exit=True)
        now = time.monotonic()
        if now - t0 >= duration:
            break
        s = sample()
        s["t"] = round(now - t0, 2)
        s["calls"] = sum(sum(w.n.values()) for w in workers)
        samples.append(s)
        if s["calls"] != last_calls:
            last_calls, last_progress = s["calls"], now
        elif now - last_progress > a.stall_s:
            stalled = f"no call finished for {now - last_progress:.0f}s (calls stuck at {last_calls})"
            print(f"[soak] STALLED: {stalled}; stacks of every thread:", file=sys.stderr, flush=True)
            faulthandler.dump_traceback(all_threads=True)
            break
        if now >= next_print:
            print(f"[soak] t={s['t']:.0f}s calls={s['calls']} rss={s['rss_mib']:.1f} MiB "
                  f"fds={s['fds']} threads={s['threads']}", flush=True)
            next_print = now + 30
        stop.wait(a.sample_s)
    faulthandler.cancel_dump_traceback_later()
    stop.set()
    deadline = time.monotonic() + (5.0 if stalled else 120.0)
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]

    after = [s for s in samples if s["t"] >= warmup]
    failures: list[str] = []
    if stalled:
        failures.append(f"stalled: {stalled} (stacks above)")
    if hung:
        failures.append(f"threads still running after stop: {hung}")
    if errors:
        failures.append(f"{len(errors)} call(s) failed; first:\n{errors[0]}")
    summary: dict[str, Any] = {
        "minutes": a.minutes, "threads": a.threads, "warmup_s": warmup, "sample_s": a.sample_s,
        "setup_s": round(setup_s, 1), "cpus": len(os.sched_getaffinity(0)),
        "gemm_donate": os.environ.get("HLOBRIDGE_GEMM_DONATE", "default"),
        "calls": {k: sum(w.n[k] for w in workers) for k in KINDS},
        "allowance": {"rss_mib": a.rss_allow_mib, "rss_frac": a.rss_allow_frac,
                      "fds": a.fd_allow, "threads": a.thread_allow},
        "resources": {}, "errors": errors[:5],
    }
    if len(after) < 2 * a.window:
        failures.append(f"only {len(after)} samples after the {warmup:.0f}s warm-up; need {2 * a.window} "
                        f"(run longer, or lower --window / --sample-s)")
    for key in ("rss_mib", "fds", "threads"):
        allxs = [s[key] for s in samples]
        r: dict[str, float] = {"before_setup": start[key], "start": allxs[0] if allxs else float("nan"),
                               "end_last": allxs[-1] if allxs else float("nan"),
                               "min": min(allxs, default=float("nan")), "max": max(allxs, default=float("nan"))}
        if len(after) >= 2 * a.window:
            base = statistics.median(s[key] for s in after[: a.window])
            end = statistics.median(s[key] for s in after[-a.window:])
            allow = {"rss_mib": max(a.rss_allow_mib, a.rss_allow_frac * base),
                     "fds": a.fd_allow, "threads": a.thread_allow}[key]
            r.update(baseline=base, end=end, growth=end - base, allowed=allow)
            if end - base > allow:
                failures.append(f"{key} grew from {base:g} (median of the first {a.window} samples after "
                                f"warm-up) to {end:g} (median of the last {a.window}): +{end - base:g} > "
                                f"allowed +{allow:g}")
        summary["resources"][key] = r
    summary["samples"] = samples
    summary["passed"] = not failures
    summary["failures"] = failures

    a.json.write_text(json.dumps(summary, indent=1))
    print("\n== soak summary")
    print(f"  {a.minutes:g} min, {a.threads} threads, {summary['cpus']} cpu(s), "
          f"HLOBRIDGE_GEMM_DONATE={summary['gemm_donate']}")
    print("  calls: " + ", ".join(f"{k} {n}" for k, n in summary["calls"].items()))
    for key, r in summary["resources"].items():
        line = (f"  {key:<8} before setup {r['before_setup']:.1f}, first sample {r['start']:.1f}, "
                f"min {r['min']:.1f}, max {r['max']:.1f}")
        if "baseline" in r:
            line += f", baseline {r['baseline']:.1f} -> end {r['end']:.1f} (allowed +{r['allowed']:.1f})"
        print(line)
    print(f"  json: {a.json}")
    if failures:
        print("\nSOAK FAILED:\n  " + "\n  ".join(failures), file=sys.stderr, flush=True)
        if hung:  # worker threads stuck in native code: do not wait for them at exit
            os._exit(1)
        return 1
    print("  PASSED: RSS, fds and threads flat; every checked result matched eager torch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
