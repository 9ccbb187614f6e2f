"""The errors of :mod:`hlobridge.spmd` (all :class:`hlobridge.BridgeError`)."""

from __future__ import annotations

from hlobridge._native import ArgumentError, BridgeError, CollectiveRewriteError
from hlobridge.spmd._jax_private import JaxVersionError

__all__ = ["CollectiveRewriteError", "DistributedInitError", "JaxVersionError",
           "SpmdArgumentError"]


class DistributedInitError(BridgeError):
    """``hlobridge.distributed.initialize`` cannot start JAX's distributed
    runtime: torchrun's environment is missing or malformed, the port is out
    of range, JAX's backend is already running, or the coordinator timed out."""


class SpmdArgumentError(ArgumentError):
    """A tensor given to an SPMD program does not fit its input: wrong count,
    shape or dtype for this process's part of the global array."""
