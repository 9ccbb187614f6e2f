"""Pallas kernels written for GPU/TPU run on the CPU platform in interpret
mode, automatically.

JAX lowers a ``pallas_call`` without ``interpret=True`` for the ``cpu``
platform by raising a bare ``ValueError: Only interpret mode is supported on
CPU backend``. Every place where hlobridge lowers a JAX function for its
runtime (``call_jax`` and its autograd/lazy paths through
:func:`hlobridge._src.lowering.lower`, the ``torch.compile`` backend and
``hb.compile_train_step`` through :mod:`hlobridge._src.dynamo.program`) lowers with
:func:`lower_traced` instead of ``traced.lower(...)``. For the ``cpu``
platform that passes JAX a lowering rule override for the ``pallas_call``
primitive (``LoweringParameters.override_lowering_rules``): a kernel written
without ``interpret=True`` is lowered exactly as with ``interpret=True`` -- the
same HLO interpreter lowering as ``hb.trace_pallas(..., target="cpu")``. The
jaxpr keeps the kernel as written, which is how receipts tell such a kernel
apart (:func:`hlobridge.pallas.kernels_in` marks it ``auto_interpret``).

Scope and rules:

- Only the ``cpu`` platform falls back, and only inside hlobridge's own
  lowerings: the override is a per-lowering parameter (part of JAX's lowering
  cache key), so plain ``jax.jit`` in the same process keeps JAX's behavior,
  and ``cuda``/``tpu`` lowerings keep every kernel as written.
- ``HLOBRIDGE_PALLAS_AUTO_INTERPRET=0`` turns the fallback off (read at each
  lowering; signatures already compiled stay cached): such a kernel then
  raises :class:`~hlobridge.pallas.PallasLoweringError` naming the kernel and
  the fix, never JAX's bare ``ValueError``.
- Kernels that already have an ``interpret`` setting (``True`` or JAX's TPU/GPU
  interpreter parameters) are lowered as written.

Uses private JAX APIs of the pinned jax 0.10.x (``mlir.LoweringParameters``,
the registered ``pallas_call`` lowering rule, ``Traced.lower``'s
``_private_parameters``).
"""

from __future__ import annotations

import functools
import sys
import traceback
from typing import Any

from jax._src.interpreters import mlir

from hlobridge._src import config
from hlobridge._src.errors import BridgeError
from hlobridge._src.pallas import PallasLoweringError, kernel_name, pallas_eqns

__all__ = ["ENV", "auto_interpret_enabled", "cpu_interpret_error", "kernel_lowering_error",
           "lowering_parameters", "lower_traced", "producer_of"]

ENV = "HLOBRIDGE_PALLAS_AUTO_INTERPRET"
"""Environment variable: ``0`` turns the CPU interpret fallback off."""

_JAX_CPU_MESSAGE = "Only interpret mode is supported on CPU backend"


def auto_interpret_enabled() -> bool:
    """Whether kernels without ``interpret=True`` lower in interpret mode on
    ``cpu`` (``HLOBRIDGE_PALLAS_AUTO_INTERPRET`` is not ``0``)."""
    return config.get_flag(ENV)


def cpu_interpret_error(kernels: str) -> PallasLoweringError:
    """The named error for a kernel without ``interpret=True`` on ``cpu``
    when the fallback is off, with the fix."""
    return PallasLoweringError(
        kernels, "cpu", "the kernel was written for GPU/TPU (no interpret=True) and the CPU backend runs "
        f"Pallas only in interpret mode; fix: unset {ENV}=0 (hlobridge then interprets it automatically), "
        "pass interpret=True to pl.pallas_call, or lower it with hb.trace_pallas(kernel, ..., target='cpu')")


def _jax_rule() -> Any:
    # The rule JAX registered for every platform (it dispatches per platform).
    from jax._src.pallas.pallas_call import pallas_call_p

    return mlir._lowerings[pallas_call_p].rule


def _auto_rule(ctx: Any, *in_nodes: Any, interpret: Any, **params: Any) -> Any:
    return _jax_rule()(ctx, *in_nodes, interpret=interpret if interpret else True, **params)


def _strict_rule(ctx: Any, *in_nodes: Any, interpret: Any, **params: Any) -> Any:
    if not interpret:
        raise cpu_interpret_error(kernel_name(params))
    return _jax_rule()(ctx, *in_nodes, interpret=interpret, **params)


# Built once: LoweringParameters is part of JAX's lowering cache key, so
# equal parameters must be the same rules. Built on first need, because
# importing JAX's Pallas costs a first call_jax tens of milliseconds.
@functools.cache
def _parameters(auto: bool) -> Any:
    from jax._src.pallas.pallas_call import pallas_call_p

    rule = _auto_rule if auto else _strict_rule
    return mlir.LoweringParameters(override_lowering_rules=((pallas_call_p, rule),))


_PALLAS_MODULE = "jax._src.pallas.pallas_call"


def lowering_parameters(platform: str) -> Any:
    """JAX lowering parameters for ``platform``: the ``pallas_call`` override
    on ``cpu`` (interpret, or the named error when the fallback is off),
    ``None`` (JAX's defaults) for any other platform."""
    if platform != "cpu" or _PALLAS_MODULE not in sys.modules:
        # No pallas_call can be in a program until JAX's Pallas is imported.
        return None
    return _parameters(auto_interpret_enabled())


def lower_traced(traced: Any, platform: str) -> Any:
    """``traced.lower(lowering_platforms=(platform,))`` for a ``jax.jit(...).trace(...)``
    result, with the ``cpu`` Pallas rule of :func:`lowering_parameters`. A
    bare "Only interpret mode is supported on CPU backend" from JAX, or any
    other error raised inside JAX's Pallas lowering (Mosaic GPU's
    ``NotImplementedError``, ...), becomes a
    :class:`~hlobridge.pallas.PallasLoweringError` naming the kernel(s) and
    the fix."""
    try:
        return traced.lower(lowering_platforms=(platform,), _private_parameters=lowering_parameters(platform))
    except BridgeError:
        raise
    except Exception as e:
        names = [kernel_name(dict(q.params)) for q in pallas_eqns(traced.jaxpr.jaxpr)
                 if not q.params.get("interpret")]
        if isinstance(e, ValueError) and _JAX_CPU_MESSAGE in str(e):
            raise cpu_interpret_error(", ".join(names) or "pallas_call") from e
        files = [f.filename for f in traceback.extract_tb(e.__traceback__)]
        if not names or not any("/pallas/" in f for f in files):
            raise
        raise kernel_lowering_error(", ".join(names), platform, e, files) from e


def kernel_lowering_error(kernels: str, platform: str, e: BaseException,
                          files: list[str]) -> PallasLoweringError:
    """The named error for a kernel JAX's Pallas lowering for ``platform``
    refused (a raw ``NotImplementedError`` from Mosaic GPU, ...), with the fix."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    reason = f"JAX's Pallas lowering raised {type(e).__name__}: {first}"
    if any("/mosaic_gpu/" in f for f in files) or "Mosaic GPU" in str(e):
        reason += ("; JAX lowered it with Mosaic GPU (its choice for a pallas_call without GPU "
                   "compiler_params), which does not support this kernel. Fix: lower it with Triton "
                   "(what hb.trace_pallas does by default): pass compiler_params="
                   "jax.experimental.pallas.triton.CompilerParams() to pl.pallas_call, or build the "
                   "program with hb.trace_pallas(kernel_fn, ..., target='cuda', backend='triton')")
    else:
        reason += (f"; the kernel uses something the {platform} Pallas backend does not support: "
                   f"rewrite that part of the kernel, or pick another backend with "
                   f"hb.trace_pallas(..., backend=...)")
    return PallasLoweringError(kernels, platform, reason)


def producer_of(traced: Any) -> str:
    """Receipt producer of a traced JAX function (``jax.jit(...).trace(...)``):
    ``"pallas"`` when it embeds a ``pallas_call``, else ``"jax"``."""
    return "pallas" if next(pallas_eqns(traced.jaxpr.jaxpr), None) is not None else "jax"
