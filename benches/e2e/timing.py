"""Interleaved timing with spread: the same scheme as
``benches/call_jax_overhead.py``'s ``median_us`` (warm-up, then rounds in which
every variant runs one batch, in a fresh random order each round), but keeping
every batch's time so that the median *and* the p10/p90 spread are reported."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import TypedDict


class Stats(TypedDict):
    """Per-call microseconds over the batches: median, p10, p90, batch count."""

    median_us: float
    p10_us: float
    p90_us: float
    reps: int
    batch: int


def summarize(samples_s: list[float], batch: int) -> Stats:
    """Median and p10/p90 (µs per call) of batch times given in seconds per call."""
    us = sorted(s * 1e6 for s in samples_s)
    q = statistics.quantiles(us, n=10, method="inclusive") if len(us) > 1 else [us[0]] * 9
    return {"median_us": statistics.median(us), "p10_us": q[0], "p90_us": q[-1],
            "reps": len(us), "batch": batch}


def interleaved(variants: dict[str, Callable[[], object]], reps: int, batch: int,
                warmup: int | None = None) -> dict[str, Stats]:
    """Time each variant: ``warmup`` calls each, then ``reps`` rounds of one
    batch of ``batch`` calls per variant, variants shuffled every round."""
    for fn in variants.values():
        for _ in range(warmup if warmup is not None else max(3, batch // 10)):
            fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    order = list(variants.items())
    rng = random.Random(0)
    for _ in range(reps):
        rng.shuffle(order)
        for k, fn in order:
            t0 = time.perf_counter()
            for _ in range(batch):
                fn()
            times[k].append((time.perf_counter() - t0) / batch)
    return {k: summarize(v, batch) for k, v in times.items()}


def repeat(fn: Callable[[], object], reps: int, warmup: int = 1) -> Stats:
    """Time single calls of one slow function (seconds-scale work)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return summarize(samples, 1)
