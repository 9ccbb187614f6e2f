"""Receipts: what the last hlobridge call on this thread did.

A :class:`Receipt` says where a call ran (``platform``), whether it compiled or
was served from a cache (``cache``; ``compiles`` and ``cache_hits`` are
process-wide running totals at the time of the call), which segments the
program is made of and who produced them, how many inputs were used in place
(``input_views``) or copied (``input_copies``), where the outputs live
(``output_pointers``: PJRT buffer addresses, equal to the returned tensors'
``data_ptr()``), and how long lowering, compilation and the run took.

Receipts are recorded per thread, in the native module: Python call paths run
their program and store a :class:`Receipt` through :func:`run_and_record`;
the native ``call_jax`` fast path stores its fields without building Python
objects, and :func:`last_receipt` builds the :class:`Receipt` when asked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from hlobridge import _native

_perf = time.perf_counter

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


@dataclass(frozen=True, slots=True)
class Accounting:
    """How a call got its program: the cache fields of its :class:`Receipt`."""

    cache: CacheOutcome
    lower_time_s: float
    compile_time_s: float
    cache_hits: int
    compiles: int


def cache_accounting(built: _Built | None) -> Accounting:
    """The accounting of a call through a per-call-site cache: ``built`` is
    the program the call just built (its own outcome and times), or ``None``
    when the cache served it, which counts as one cache hit."""
    if built is None:
        hits, compiles = _native.record_cache_hit()
        return Accounting("hit", 0.0, 0.0, hits, compiles)
    st = _native.stats()
    return Accounting(built.outcome, built.lower_s, built.compile_s, st["cache_hits"], st["compiles"])


def compile_accounting(cache: CacheOutcome, compile_time_s: float) -> Accounting:
    """The accounting of a call that compiled (``miss``), found its module
    compiled already (``content``) or held its executable (``hit``), with the
    process-wide totals as they stand."""
    st = _native.stats()
    return Accounting(cache, 0.0, compile_time_s, st["cache_hits"], st["compiles"])


def run_and_record(exe: Any, inputs: Sequence[Any], *, platform: str, segments: Sequence[Segment],
                   accounting: Accounting, t0: float, wrap: Callable[[Any], Any],
                   shapes: Sequence[Sequence[int]] | None = None, codes: Sequence[int] | None = None,
                   copied: int = 0, skip_outputs: int = 0) -> list[Any]:
    """Run a compiled program and record this thread's :class:`Receipt`; the
    one place a Python call path does both. Returns the outputs, each DLPack
    capsule passed through ``wrap`` (``torch.from_dlpack``...).

    ``inputs`` are tensors. With ``shapes`` and ``codes`` (element type codes)
    they go in by pointer (``_native.execute``; the CPU runtime), otherwise as
    DLPack capsules (``_native.execute_dlpack``; any runtime). ``copied``:
    inputs the caller already copied (made contiguous), moved from the
    receipt's views to its copies. ``skip_outputs``: leading outputs that are
    not the call's results (left out of ``output_pointers``). ``t0``: the
    ``time.perf_counter()`` the call started at."""
    if shapes is not None and codes is not None:
        caps, ptrs, views, copies, run_s = _native.execute(
            exe, [t.data_ptr() for t in inputs], shapes, codes, inputs)
        outs = [wrap(c) for c in caps]
        pointers = tuple(ptrs[skip_outputs:])
    else:
        from torch.utils.dlpack import to_dlpack

        caps, views, copies, run_s = _native.execute_dlpack(exe, [to_dlpack(t) for t in inputs])
        outs = [wrap(c) for c in caps]
        pointers = tuple(o.data_ptr() for o in outs[skip_outputs:])
    record(Receipt(platform, accounting.compiles, accounting.cache_hits, accounting.cache,
                   list(segments), views - copied, copies + copied, pointers,
                   accounting.lower_time_s, accounting.compile_time_s, run_s, _perf() - t0))
    return outs


def record(receipt: Receipt) -> None:
    """Store ``receipt`` as this thread's last one."""
    _native.record_receipt(receipt)


def last_receipt() -> Receipt | None:
    """The receipt of this thread's last hlobridge call, or ``None``."""
    raw = _native.last_receipt_raw()
    if raw is None:
        return None
    if isinstance(raw, Receipt):
        return replace(raw, segments=list(raw.segments))  # a fresh list
    # The native call_jax fast path stores its fields (Receipt's, in order)
    # without building Python objects.
    fields = list(raw)
    fields[4] = list(fields[4])  # segments: a fresh list
    return Receipt(*fields)
