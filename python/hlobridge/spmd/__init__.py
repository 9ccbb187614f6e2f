"""Stitched hlobridge programs run SPMD across processes on JAX's
distributed runtime (``jax.distributed``: gloo on CPU, NCCL on GPU, the TPU
runtime on pods).

hlobridge's own PJRT runtime runs one process; this package is the runtime
choice for a program that spans processes:

1. :func:`initialize` (also ``hlobridge.distributed.initialize``) starts
   ``jax.distributed`` from torchrun's environment;
2. :func:`torch_segment` captures torch pieces and rewrites their
   collectives (:func:`rewrite_collectives`, a Rust stitcher pass) into the
   global-device-id form over a mesh axis;
3. :func:`stitch_spmd` stitches them with JAX segments into one module and
   wraps it as :class:`SpmdProgram`: a ``jax.export.Exported`` run as the
   per-device body of ``shard_map`` over :func:`process_mesh`, fed from each
   process's torch tensors through DLPack.

See docs/distributed.md, "Multi-process SPMD through JAX's runtime".
"""

from __future__ import annotations

from hlobridge._src.errors import (
    CollectiveRewriteError,
    DistributedInitError,
    JaxVersionError,
    SpmdArgumentError,
)
from hlobridge._src.spmd.mesh import axis_groups, process_mesh
from hlobridge._src.spmd.runtime import (
    DistributedInfo,
    initialize,
    is_initialized,
    process_info,
    shutdown,
)

__all__ = [
    "CollectiveRewriteError",
    "DistributedInfo",
    "DistributedInitError",
    "JaxVersionError",
    "SpmdArgumentError",
    "SpmdProgram",
    "TorchSegment",
    "axis_groups",
    "initialize",
    "is_initialized",
    "process_info",
    "process_mesh",
    "rewrite_collectives",
    "shutdown",
    "stitch_spmd",
    "to_global",
    "to_local",
    "torch_segment",
]


def __getattr__(name: str) -> object:
    # The program half imports torch; keep ``initialize`` light.
    if name in ("SpmdProgram", "TorchSegment", "rewrite_collectives", "stitch_spmd",
                "torch_segment"):
        from hlobridge._src.spmd import program

        return getattr(program, name)
    if name in ("to_global", "to_local"):
        from hlobridge._src.spmd import arrays

        return getattr(arrays, name)
    raise AttributeError(f"module 'hlobridge.spmd' has no attribute {name!r}")
