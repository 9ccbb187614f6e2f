"""Errors of the ``torch.compile`` backend; all derive from
:class:`hlobridge.BridgeError`."""

from __future__ import annotations

from hlobridge._native import BridgeError

__all__ = [
    "CompileBackendError",
    "UnsupportedOpError",
    "DataDependentError",
    "InputMutationError",
]


class CompileBackendError(BridgeError):
    """The hlobridge ``torch.compile`` backend cannot compile this graph."""


class UnsupportedOpError(CompileBackendError):
    """An aten op in the graph has no lowering (or no faithful one: random
    ops). The message names the op(s)."""


class DataDependentError(CompileBackendError):
    """The graph has a shape or value that depends on tensor data
    (``nonzero``, ``.item()``, boolean masking, ...)."""


class InputMutationError(CompileBackendError):
    """The graph mutates one of its inputs in place, which a StableHLO program
    (pure: new outputs only) cannot express."""
