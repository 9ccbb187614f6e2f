"""hlobridge: PyTorch and JAX in one compiled StableHLO program.

Errors raised by hlobridge all derive from :class:`BridgeError`.

``import hlobridge`` is light: torch and JAX are imported on first use of
:func:`call_jax`, :func:`pt_to_jax` or :func:`jax_to_pt`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hlobridge._native import (
    AcceleratorNotInstalledError,
    ArgumentError,
    BridgeError,
    BufferDeletedError,
    CollectiveRewriteError,
    CompileError,
    DtypeError,
    FileError,
    ForkError,
    InvalidIrError,
    OutOfMemoryError,
    OutputError,
    ParseError,
    PjrtError,
    PluginError,
    PluginLoadError,
    PluginNotFoundError,
    Runtime,
    StitchError,
    TargetError,
    UnknownTargetError,
    __version__,
    format_module,
    runtime,
)
from hlobridge.receipt import Receipt, Segment, last_receipt

if TYPE_CHECKING:
    from hlobridge.interop import jax_to_pt, pt_to_jax
    from hlobridge import ops
    from hlobridge.jax_bridge import call_jax, clear_cache, reset_stats, stats
    from hlobridge.pallas import PallasLoweringError, PallasSegment, trace_pallas
    from hlobridge.stitching import stitch_program
    from hlobridge.compile_for import TargetExecutable, compile_for
    from hlobridge.train_step import TrainStep, compile_train_step
    from hlobridge import optim
    from hlobridge import export, serve
    from hlobridge import distributed, spmd
    from hlobridge import devices, tpu_adapter
    from hlobridge.dynamo.errors import CollectiveNotSupportedError, DistributedNotSupportedError

_LAZY = {
    "call_jax": "hlobridge.jax_bridge",
    "clear_cache": "hlobridge.jax_bridge",
    "stats": "hlobridge.jax_bridge",
    "reset_stats": "hlobridge.jax_bridge",
    "pt_to_jax": "hlobridge.interop",
    "jax_to_pt": "hlobridge.interop",
    "trace_pallas": "hlobridge.pallas",
    "PallasLoweringError": "hlobridge.pallas",
    "PallasSegment": "hlobridge.pallas",
    "stitch_program": "hlobridge.stitching",
    "compile_for": "hlobridge.compile_for",
    "TargetExecutable": "hlobridge.compile_for",
    "compile_train_step": "hlobridge.train_step",
    "TrainStep": "hlobridge.train_step",
    "DistributedNotSupportedError": "hlobridge.dynamo.errors",
    "CollectiveNotSupportedError": "hlobridge.dynamo.errors",
}
# Submodules loaded on first attribute access (``hb.ops.ragged_paged_attention``).
_LAZY_MODULES = {"ops": "hlobridge.ops", "pallas": "hlobridge.pallas", "optim": "hlobridge.optim",
                 "devices": "hlobridge.devices", "tpu_adapter": "hlobridge.tpu_adapter",
                 "distributed": "hlobridge.distributed", "spmd": "hlobridge.spmd",
                 # `hb.export(...)` calls the module (hlobridge/export.py); `hb.serve.Client`.
                 "export": "hlobridge.export", "serve": "hlobridge.serve"}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None and name in _LAZY_MODULES:
        import importlib

        module = importlib.import_module(_LAZY_MODULES[name])
        globals()[name] = module
        return module
    if mod is None:
        raise AttributeError(f"module 'hlobridge' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(mod), name)
    if name in ("call_jax", "compile_train_step", "TrainStep"):
        # Teaches Dynamo to capture call_jax as one hlobridge::call_jax node.
        importlib.import_module("hlobridge.custom_op")
    globals()[name] = value
    return value


__all__ = [
    "AcceleratorNotInstalledError",
    "ArgumentError",
    "BridgeError",
    "BufferDeletedError",
    "CollectiveRewriteError",
    "CollectiveNotSupportedError",
    "CompileError",
    "DistributedNotSupportedError",
    "DtypeError",
    "FileError",
    "ForkError",
    "InvalidIrError",
    "OutOfMemoryError",
    "OutputError",
    "ParseError",
    "PjrtError",
    "PallasLoweringError",
    "PallasSegment",
    "PluginError",
    "PluginLoadError",
    "PluginNotFoundError",
    "Receipt",
    "Runtime",
    "Segment",
    "StitchError",
    "TargetError",
    "TargetExecutable",
    "UnknownTargetError",
    "__version__",
    "TrainStep",
    "call_jax",
    "clear_cache",
    "compile_for",
    "compile_train_step",
    "export",
    "devices",
    "distributed",
    "format_module",
    "jax_to_pt",
    "last_receipt",
    "ops",
    "optim",
    "pt_to_jax",
    "reset_stats",
    "runtime",
    "serve",
    "spmd",
    "stats",
    "stitch_program",
    "tpu_adapter",
    "trace_pallas",
]
