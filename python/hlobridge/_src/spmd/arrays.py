"""Torch tensors <-> global ``jax.Array``s of a multi-process mesh, through
DLPack.

Each process holds its own part of a global array: the block its devices
cover (for an input sharded over the process axis, its rows; for a
replicated one, the whole array). :func:`to_global` wraps the process's torch
tensor as a JAX array without copying (``jax.dlpack.from_dlpack``) and hands
it to ``jax.make_array_from_process_local_data``, which places each local
device's shard; :func:`to_local` gives back the process's block of a global
array as a torch tensor (zero-copy through DLPack when one local shard covers
it).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import torch

from hlobridge._src.errors import SpmdArgumentError

__all__ = ["local_block", "to_global", "to_local"]


def local_block(sharding: Any, global_shape: tuple[int, ...]) -> tuple[slice, ...]:
    """The block of the global array this process's devices hold (the
    bounding box of their shards)."""
    idx = list(sharding.addressable_devices_indices_map(global_shape).values())
    out = []
    for d, size in enumerate(global_shape):
        starts = [i[d].start or 0 for i in idx]
        stops = [size if i[d].stop is None else i[d].stop for i in idx]
        out.append(slice(min(starts), max(stops)))
    return tuple(out)


def _as_jax(t: torch.Tensor) -> Any:
    t = t.detach()
    if t.device.type != "cpu":
        return jax.dlpack.from_dlpack(t.contiguous())
    t = t.contiguous()
    try:
        return jax.dlpack.from_dlpack(t)
    except Exception:  # noqa: BLE001 -- e.g. an alignment JAX refuses: fall back to a host view
        return t.numpy()


def to_global(t: torch.Tensor, sharding: Any, global_shape: tuple[int, ...],
              name: str = "input") -> Any:
    """The global array of ``global_shape`` with ``sharding`` whose part on
    this process is ``t``. Raises :class:`SpmdArgumentError` if ``t`` is not
    this process's block."""
    block = local_block(sharding, global_shape)
    want = tuple(s.stop - s.start for s in block)
    if not isinstance(t, torch.Tensor):
        raise SpmdArgumentError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != want:
        raise SpmdArgumentError(
            f"{name}: this process holds the block {[(s.start, s.stop) for s in block]} of a "
            f"global {list(global_shape)} array, so its tensor must have shape {list(want)}; "
            f"got {list(t.shape)}")
    return jax.make_array_from_process_local_data(sharding, _as_jax(t), global_shape)


def to_local(a: Any) -> torch.Tensor:
    """This process's block of global array ``a`` as a torch tensor."""
    shards = a.addressable_shards
    if a.sharding.is_fully_replicated or len(shards) == 1:
        return torch.from_dlpack(shards[0].data)
    block = local_block(a.sharding, a.shape)
    out = torch.empty([s.stop - s.start for s in block],
                      dtype=torch.from_numpy(np.zeros((), a.dtype)).dtype)
    for s in shards:
        dst = tuple(slice((i.start or 0) - b.start,
                          (dim if i.stop is None else i.stop) - b.start)
                    for i, b, dim in zip(s.index, block, a.shape))
        out[dst] = torch.from_dlpack(s.data)
    return out
