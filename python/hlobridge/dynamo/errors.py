"""Errors of the ``torch.compile`` backend; all derive from
:class:`hlobridge.BridgeError`."""

from __future__ import annotations

from hlobridge._native import BridgeError

__all__ = [
    "CompileBackendError",
    "UnsupportedOpError",
    "DataDependentError",
    "InputMutationError",
    "DistributedNotSupportedError",
    "CollectiveNotSupportedError",
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


class DistributedNotSupportedError(CompileBackendError):
    """A ``torch.distributed`` setup hlobridge would run silently wrong:
    :func:`hlobridge.compile_train_step` on a model wrapped in
    ``DistributedDataParallel`` (process group of more than one rank) or FSDP,
    or with DTensor parameters. The message says what to do instead
    (``docs/distributed.md``)."""


class CollectiveNotSupportedError(UnsupportedOpError):
    """A collective (``_c10d_functional.all_reduce``, ``wait_tensor``, ...,
    or its lowering ``stablehlo.all_reduce``/``all_gather``/...) in a graph
    hlobridge would compile for one device, where it does nothing. The
    message names the op(s) and says what to do instead."""
