"""``hlobridge.distributed``: start JAX's multi-process runtime from
torchrun's environment (``initialize``) for stitched programs run SPMD
across processes. The implementation lives in :mod:`hlobridge.spmd`."""

from __future__ import annotations

from hlobridge._src.spmd.runtime import (
    DistributedInfo,
    initialize,
    is_initialized,
    process_info,
    shutdown,
)
from hlobridge._src.errors import DistributedInitError

__all__ = ["DistributedInfo", "DistributedInitError", "initialize", "is_initialized",
           "process_info", "shutdown"]
