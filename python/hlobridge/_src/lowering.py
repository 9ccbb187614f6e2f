"""Lowering one signature of a JAX function called on torch tensors to
StableHLO text, and the receipt segment that describes it.

Shared by ``call_jax``'s eager path (:mod:`hlobridge._src.jax_bridge`) and its
torch_xla lazy path (:mod:`hlobridge._src.lazy`), which stitches the lowered text
with the pending torch graph. Lowering goes through
:func:`hlobridge._src.pallas_auto.lower_traced`, so that Pallas kernels written for
GPU/TPU lower in interpret mode on the CPU platform.

Imports only the shared leaf modules (:mod:`hlobridge._src.dtypes`,
:mod:`hlobridge._src.signature`, :mod:`hlobridge._src.receipt`) and, when lowering,
the Pallas and stitching modules; never the ``call_jax`` paths.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import torch
from jax import tree_util

from hlobridge._src.errors import BridgeError, DtypeError
from hlobridge._src.dtypes import DTYPES, OUT_DTYPES, X64
from hlobridge._src.receipt import Segment
from hlobridge._src.signature import function_name, rebuild

__all__ = ["Lowered", "lower", "segment_of"]

_perf = time.perf_counter
_Tensor = torch.Tensor


@dataclass(frozen=True, slots=True)
class Lowered:
    """One signature of a JAX function lowered to StableHLO text."""

    text: str
    out_tree: Any
    lower_s: float
    jaxpr: Any
    """The traced ``ClosedJaxpr`` (to find embedded Pallas kernels)."""


def lower(fn: Callable[..., Any], treedef: Any, leaves: list[Any], platform: str) -> Lowered:
    """Lower ``fn`` for the signature given by ``treedef`` and ``leaves``
    (tensor leaves give shapes and dtypes; other leaves are static) for
    ``platform``, with x64 turned on when a 64-bit input needs it. Raises
    :class:`DtypeError` for outputs torch cannot receive."""
    tensors = [leaf for leaf in leaves if isinstance(leaf, _Tensor)]
    main = rebuild(fn, treedef, leaves)
    sds = [jax.ShapeDtypeStruct(tuple(t.shape), DTYPES[t.dtype][1])  # type: ignore[no-untyped-call]
           for t in tensors]
    x64 = jax.config.read("jax_enable_x64")  # type: ignore[no-untyped-call]
    need_x64 = not x64 and any(t.dtype in X64 for t in tensors)
    from hlobridge._src.pallas_auto import lower_traced  # cpu: Pallas kernels lower in interpret mode

    t0 = _perf()
    with jax.enable_x64(True) if need_x64 else contextlib.nullcontext():
        try:
            traced = jax.jit(main, keep_unused=True).trace(*sds)
        except Exception as e:
            if not isinstance(e, BridgeError):
                # The user's own error keeps its type; say where it came from.
                shapes = ", ".join(f"{t.dtype}{list(t.shape)}" for t in tensors)
                e.add_note(f"hlobridge.call_jax: raised while JAX traced {function_name(fn)} for "
                           f"tensor inputs ({shapes})")
            raise
        lowered = lower_traced(traced, platform)
        text = lowered.as_text()
    lower_s = _perf() - t0
    out_tree = lowered.out_tree
    for i, info in enumerate(tree_util.tree_leaves(lowered.out_info)):
        if np.dtype(info.dtype) not in OUT_DTYPES:
            raise DtypeError(f"call_jax: output {i} has dtype {info.dtype}, which torch cannot "
                             f"receive (supported: {', '.join(str(d) for d in DTYPES)})")
    return Lowered(text, out_tree, lower_s, traced.jaxpr)


def segment_of(fn: Callable[..., Any], low: Lowered, platform: str, fingerprint: str,
               num_inputs: int, num_outputs: int) -> Segment:
    """The receipt segment of a lowered function: producer ``pallas`` (with
    its kernels) when it embeds a Pallas kernel, else ``jax``."""
    from hlobridge._src.pallas import kernels_in
    from hlobridge._src.stitching import KernelSegment

    kernels = kernels_in(low.jaxpr, low.text, platform)
    name = function_name(fn)
    if kernels:
        return KernelSegment(name=name, producer="pallas", fingerprint=fingerprint,
                             num_inputs=num_inputs, num_outputs=num_outputs, kernels=kernels)
    return Segment(name=name, producer="jax", fingerprint=fingerprint,
                   num_inputs=num_inputs, num_outputs=num_outputs)
