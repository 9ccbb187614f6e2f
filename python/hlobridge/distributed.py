"""``hlobridge.distributed``: start JAX's multi-process runtime from
torchrun's environment (``initialize``) for stitched programs run SPMD
across processes. The implementation lives in :mod:`hlobridge.spmd`."""

from __future__ import annotations

from hlobridge.spmd.runtime import (
    DistributedInfo,
    initialize,
    is_initialized,
    process_info,
    shutdown,
)
from hlobridge.spmd.errors import DistributedInitError

__all__ = ["DistributedInfo", "DistributedInitError", "initialize", "is_initialized",
           "process_info", "shutdown"]
