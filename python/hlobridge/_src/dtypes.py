"""Dtype tables shared by every hlobridge path that hands torch tensors to a
compiled JAX/StableHLO program.

One table (:data:`DTYPES`) says which torch dtypes hlobridge accepts and what
each one is in MLIR text and in JAX; the other tables are derived from it:
the runtime's element-type codes (:data:`CODES`), the dtypes that need JAX's
x64 mode (:data:`X64`), the complex ones (:data:`COMPLEX`), those the hot
path never has to look at twice (:data:`PLAIN`) and the output dtypes torch
can receive (:data:`OUT_DTYPES`). The reverse lookups are here too: torch
dtype by element-type code (:data:`BY_CODE`), by MLIR name
(:data:`BY_MLIR`) and by JAX/numpy dtype (:func:`torch_dtype_of`,
:func:`require_torch_dtype`). The MLIR names and codes are the native
module's (``_native.ELEMENT_TYPES``, from ``python/src/dtype.rs``): a name
it does not know fails at import.

This module is a leaf: it imports only torch, JAX, numpy, the native
module and the error classes, so that ``call_jax``, its autograd/lazy/custom-op paths, Pallas
tracing, stitching and the ``torch.compile`` backend can all import it
without importing each other.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import torch

from hlobridge import _native
from hlobridge._src.errors import DtypeError

__all__ = ["BY_CODE", "BY_MLIR", "CODES", "COMPLEX", "DTYPES", "FLOAT8", "OUT_DTYPES", "PLAIN",
           "X64", "require_torch_dtype", "torch_dtype_of"]

DTYPES: dict[torch.dtype, tuple[str, Any]] = {
    torch.float32: ("f32", jnp.float32),
    torch.float64: ("f64", jnp.float64),
    torch.bfloat16: ("bf16", jnp.bfloat16),
    torch.float16: ("f16", jnp.float16),
    torch.int8: ("i8", jnp.int8),
    torch.int16: ("i16", jnp.int16),
    torch.int32: ("i32", jnp.int32),
    torch.int64: ("i64", jnp.int64),
    torch.uint8: ("ui8", jnp.uint8),
    torch.uint16: ("ui16", jnp.uint16),
    torch.uint32: ("ui32", jnp.uint32),
    torch.uint64: ("ui64", jnp.uint64),
    torch.bool: ("i1", jnp.bool_),
    torch.complex64: ("complex<f32>", jnp.complex64),
    torch.complex128: ("complex<f64>", jnp.complex128),
}
"""Supported torch dtype -> (MLIR element type, JAX dtype)."""

CODES: dict[torch.dtype, int] = {t: _native.ELEMENT_TYPES[m] for t, (m, _) in DTYPES.items()}
"""Supported torch dtype -> the native runtime's element-type code."""

BY_CODE: dict[int, torch.dtype] = {c: t for t, c in CODES.items()}
"""The native runtime's element-type code -> torch dtype (the supported ones)."""

BY_MLIR: dict[str, torch.dtype] = {m: t for t, (m, _) in DTYPES.items()}
"""MLIR element type (``f32``, ``complex<f32>``) -> torch dtype (the supported ones)."""

X64: frozenset[torch.dtype] = frozenset({torch.float64, torch.int64, torch.uint64, torch.complex128})
"""Dtypes that JAX truncates unless ``jax_enable_x64`` is on while lowering."""

COMPLEX: frozenset[torch.dtype] = frozenset({torch.complex64, torch.complex128})

PLAIN: frozenset[torch.dtype] = frozenset(DTYPES) - COMPLEX
"""Dtypes that never need a second look on the hot path (no conjugate or
negative bit, no refusal of gradients)."""

OUT_DTYPES: frozenset[np.dtype[Any]] = frozenset(np.dtype(j) for _, j in DTYPES.values())
"""Numpy dtypes of program outputs that torch can receive."""

FLOAT8: frozenset[torch.dtype] = frozenset(
    getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(torch, n))
"""torch's float8 dtypes (unsupported; named in the error so it can give the fix)."""


def torch_dtype_of(dtype: Any) -> torch.dtype | None:
    """The torch dtype of a JAX/numpy ``dtype``, or ``None`` when torch cannot
    receive it."""
    want = np.dtype(dtype)
    for t, (_, j) in DTYPES.items():
        if np.dtype(j) == want:
            return t
    return None


def require_torch_dtype(dtype: Any, where: str) -> torch.dtype:
    """:func:`torch_dtype_of`, raising :class:`DtypeError` (naming ``where``,
    e.g. ``call_jax``) when torch cannot receive ``dtype``."""
    t = torch_dtype_of(dtype)
    if t is None:
        raise DtypeError(f"{where}: the JAX function returns dtype {dtype}, which torch cannot "
                         "receive")
    return t
