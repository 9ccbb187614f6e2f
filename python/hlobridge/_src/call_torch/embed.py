"""Embedding a :class:`~hlobridge._src.call_torch.capture.Capture` into the
JAX program being traced.

The captured module becomes a ``jax.export.Exported``
(:func:`hlobridge._src.spmd.jax_private.exported_from_module`, the wrapper
``hlobridge.spmd`` runs stitched modules with) and is called with
``Exported.call``. JAX lowers that call as a ``func.call`` to a private
function of the caller's module, which XLA's call inliner inlines before
fusion: the torch ops and the JAX ops around them are one HLO computation,
and fusions cross the seam (``tests/python/test_call_torch.py``'s fusion
test). There is no callback and no host round trip.

The module holds no platform-specific op (torch_xla emits plain StableHLO),
so the ``Exported`` is marked callable from any platform
(``DisabledSafetyCheck.platform()``): the same capture embeds into a program
lowered for the CPU here or for a TPU/GPU by ``hb.compile_for``.

:func:`embedded` wraps it as a ``jax.custom_batching.custom_vmap`` function
whose batching rule re-captures the torch function under ``torch.func.vmap``
at the batched shapes (``jax.vmap`` support).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from hlobridge._src.call_torch.capture import Capture, Spec, TorchFn
from hlobridge._src.dtypes import torch_dtype_of
from hlobridge._src.errors import CallTorchError

__all__ = ["embedded", "exported", "run_capture", "spec_of"]


def spec_of(x: Any) -> Spec:
    """The torch ``(shape, dtype)`` of a JAX array or tracer."""
    dt = torch_dtype_of(x.dtype)
    if dt is None:
        raise CallTorchError(f"hb.call_torch: JAX dtype {x.dtype} has no torch dtype")
    return tuple(int(d) for d in x.shape), dt


def exported(cap: Capture) -> Any:
    """The ``jax.export.Exported`` of a capture (made once)."""
    exp = cap.cache.get("exported")
    if exp is None:
        from jax import export

        from hlobridge._src.spmd.jax_private import exported_from_module

        exp = exported_from_module(_bytes_per_bool(cap.text), f"torch_{_ident(cap.name)}")
        exp = dataclasses.replace(exp, disabled_safety_checks=(
            export.DisabledSafetyCheck.platform(),))
        cap.cache["exported"] = exp
        cap.cache["constants"] = [jnp.asarray(c) for c in cap.constants]
    return exp


_PACKED_BOOLS = re.compile(r'dense<"0x([0-9A-Fa-f]+)"> : tensor<((?:\d+x)+)i1>')


def _bytes_per_bool(text: str) -> str:
    """Bool constants as JAX's MLIR parser reads them. The stitched module
    may print a ``tensor<...xi1>`` constant bit-packed (one bit per element,
    least significant first), which hlobridge's own parser accepts and
    JAX's refuses ("elements hex data size is invalid"); spell such
    constants out with one byte per element."""

    def unpack(m: re.Match[str]) -> str:
        dims = [int(d) for d in m.group(2).rstrip("x").split("x")]
        n = int(np.prod(dims))
        data = bytes.fromhex(m.group(1))
        if len(data) in (1, n) or len(data) != (n + 7) // 8:  # a splat, or bytes already
            return m.group(0)
        bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")[:n]
        return f'dense<"0x{bits.astype(np.uint8).tobytes().hex().upper()}"> : tensor<{m.group(2)}i1>'

    return _PACKED_BOOLS.sub(unpack, text)


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)[:40] or "fn"


def run_capture(cap: Capture, arrays: tuple[Any, ...] | list[Any]) -> tuple[Any, ...]:
    """Call the captured module on the flat ``arrays`` (inside a trace)."""
    exp = exported(cap)
    args = [arrays[i] for i in cap.arg_index] + list(cap.cache["constants"])
    results = exp.call(*args) if args or exp.in_avals == () else exp.call()
    return tuple(results[k] if where == "prog" else arrays[k] for where, k in cap.outputs)


def embedded(tfn: TorchFn) -> Callable[..., tuple[Any, ...]]:
    """``f(*arrays) -> tuple of arrays``: ``tfn`` captured for the arrays'
    types and embedded; under ``jax.vmap`` it captures ``tfn.vmapped``
    instead (made once per ``TorchFn``)."""
    got = tfn.jax_cache.get("embedded")
    if got is not None:
        return got  # type: ignore[no-any-return]

    @jax.custom_batching.custom_vmap
    def call(*arrays: Any) -> tuple[Any, ...]:
        cap = tfn.capture([spec_of(a) for a in arrays])
        return run_capture(cap, arrays)

    @call.def_vmap
    def rule(axis_size: int, in_batched: Any, *arrays: Any) -> tuple[Any, Any]:
        flags = list(in_batched)
        in_dims = tuple(0 if b else None for b in flags)
        outs = embedded(tfn.vmapped(in_dims))(*arrays)
        return outs, tuple(True for _ in outs)

    tfn.jax_cache["embedded"] = call
    return call  # type: ignore[no-any-return]
