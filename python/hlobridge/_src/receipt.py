"""Receipts: what the last hlobridge call on this thread did.

A :class:`Receipt` says where a call ran (``platform``), whether it compiled or
was served from a cache (``cache``; ``compiles`` and ``cache_hits`` are
process-wide running totals at the time of the call), which segments the
program is made of and who produced them, how many inputs were used in place
(``input_views``) or copied (``input_copies``), where the outputs live
(``output_pointers``: PJRT buffer addresses, equal to the returned tensors'
``data_ptr()``), and how long lowering, compilation and the run took.

Receipts are recorded per thread (in the native module, so that the native
``call_jax`` fast path records its own without building Python objects) and
built lazily: :func:`last_receipt` turns the stored fields into a
:class:`Receipt`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from hlobridge import _native

CacheOutcome = Literal["hit", "content", "miss"]
"""``hit``: the per-function cache served the call (no lowering);
``content``: the function was lowered again but an identical module was
already compiled; ``miss``: the module was compiled."""


@dataclass(frozen=True)
class Segment:
    """One piece of the compiled program."""

    name: str
    """The function's qualified name."""
    producer: str
    """Which frontend lowered it: ``"torch"``, ``"jax"``, or ``"pallas"`` for
    JAX code that embeds Pallas kernels (their records, with backend and
    ``auto_interpret``, are on :class:`hlobridge._src.stitching.KernelSegment`)."""
    fingerprint: str
    """Content fingerprint of the compiled module text and options."""
    num_inputs: int
    num_outputs: int


@dataclass(frozen=True)
class Receipt:
    """What one call did (see the module docs)."""

    platform: str
    compiles: int
    cache_hits: int
    cache: CacheOutcome
    segments: list[Segment]
    input_views: int
    input_copies: int
    output_pointers: tuple[int, ...]
    lower_time_s: float
    compile_time_s: float
    run_time_s: float
    total_time_s: float


class _Built(Protocol):
    outcome: CacheOutcome
    lower_s: float
    compile_s: float


def cache_accounting(built: _Built | None) -> tuple[CacheOutcome, float, float, int, int]:
    """``(cache, lower_time_s, compile_time_s, cache_hits, compiles)`` for a
    receipt: ``built`` is the program a call just built (its own outcome and
    times), or ``None`` when a per-call-site cache served it, which counts as
    one cache hit."""
    if built is None:
        hits, compiles = _native.record_cache_hit()
        return "hit", 0.0, 0.0, hits, compiles
    st = _native.stats()
    return built.outcome, built.lower_s, built.compile_s, st["cache_hits"], st["compiles"]


def record(raw: tuple[object, ...]) -> None:
    """Store the raw fields of a receipt for this thread (hot path)."""
    _native.record_receipt(raw)


def last_receipt() -> Receipt | None:
    """The receipt of this thread's last hlobridge call, or ``None``."""
    raw = _native.last_receipt_raw()
    if raw is None:
        return None
    fields = list(raw)
    fields[4] = list(fields[4])  # segments: a fresh list
    return Receipt(*fields)
