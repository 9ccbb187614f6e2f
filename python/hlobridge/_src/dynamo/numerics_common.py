"""What the numerics decompositions (``numerics_decomp``) share: the
per-thread guard that makes a decomposition's inner call of its own op
decline, so the tracer records the op itself, and small helpers."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch

_busy = threading.local()


@contextlib.contextmanager
def inner_call(op: Any) -> Iterator[None]:
    """While active, the numerics decomposition of ``op`` declines."""
    stack: set[Any] = getattr(_busy, "ops", None) or set()
    _busy.ops = stack
    stack.add(op)
    try:
        yield
    finally:
        stack.discard(op)


def declines(op: Any) -> bool:
    return op in (getattr(_busy, "ops", None) or ())


def reduced_dims(x: torch.Tensor, dim: Any) -> list[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return [d % max(x.dim(), 1) for d in dims]


def as_int64(i: torch.Tensor) -> torch.Tensor:
    """``i`` with an int64 HLO type (torch_xla may report int64 for a 32-bit
    value; adding an int64 zero emits the convert)."""
    return i + i.new_zeros((), dtype=torch.int64)


HALF = (torch.bfloat16, torch.float16)


REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64,
            torch.complex32: torch.float16}
