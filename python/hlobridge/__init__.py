"""hlobridge: PyTorch and JAX in one compiled StableHLO program.

Errors raised by hlobridge all derive from :class:`BridgeError` and live in
:mod:`hlobridge.errors`.

``import hlobridge`` is light: every public name is imported on first use
(torch and JAX with :func:`call_jax`, :func:`pt_to_jax` or :func:`jax_to_pt`).
:data:`_PUBLIC` is the one list of public names: it drives the lazy imports
and ``__all__`` (``__init__.pyi`` repeats it for type checkers; a test keeps
the two equal). The implementation lives in ``hlobridge/_src``.
"""

from __future__ import annotations

import importlib
from typing import Any

from hlobridge import _native  # first: the native module registers hlobridge.errors' classes
from hlobridge._src import config as _config
from hlobridge._src.errors import __all__ as _ERRORS

_MODULE = ""
"""Marks an entry that is a submodule (``hb.ops``), not a name in a module."""

_PUBLIC: dict[str, str] = {
    # name: the module that defines it (or _MODULE: the name is a submodule)
    **dict.fromkeys(_ERRORS, "hlobridge._src.errors"),
    **dict.fromkeys(("Runtime", "__version__", "format_module", "runtime"), "hlobridge._native"),
    **dict.fromkeys(("Receipt", "Segment", "last_receipt"), "hlobridge._src.receipt"),
    **dict.fromkeys(("call_jax", "clear_cache", "stats", "reset_stats"), "hlobridge._src.jax_bridge"),
    **dict.fromkeys(("pt_to_jax", "jax_to_pt"), "hlobridge._src.interop"),
    **dict.fromkeys(("trace_pallas", "PallasSegment"), "hlobridge._src.pallas"),
    "stitch_program": "hlobridge._src.stitching",
    **dict.fromkeys(("compile_for", "TargetExecutable"), "hlobridge._src.compile_for"),
    **dict.fromkeys(("compile_train_step", "TrainStep"), "hlobridge._src.train_step"),
    "viz": "hlobridge._src.viz",
    **dict.fromkeys(("call_torch", "torch_module"), "hlobridge._src.call_torch"),
    # public submodules; `hb.export(...)` calls the module (hlobridge/export.py)
    **dict.fromkeys(("devices", "distributed", "dynamo", "errors", "export", "ops", "optim",
                     "pallas", "serve", "spmd", "tpu_adapter"), _MODULE),
}

_REGISTERS_OP = frozenset(("call_jax", "compile_train_step", "TrainStep"))
"""Names whose first use also teaches Dynamo to capture ``call_jax`` as one
``hlobridge::call_jax`` node (``hlobridge._src.custom_op``)."""

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    where = _PUBLIC.get(name)
    if where is None:
        raise AttributeError(f"module 'hlobridge' has no attribute {name!r}")
    if where == _MODULE:
        value = importlib.import_module(f"hlobridge.{name}")
    else:
        value = getattr(importlib.import_module(where), name)
        if name in _REGISTERS_OP:
            importlib.import_module("hlobridge._src.custom_op")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


_config.check_environment()
_config.default_onednn_library()
