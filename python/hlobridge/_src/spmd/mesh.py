"""Meshes over every process's devices, and the replica groups of a mesh
axis in the global device ids that a stitched program's collectives name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["axis_groups", "process_mesh"]


def process_mesh(axis_names: tuple[str, str] = ("dp", "tp")) -> Any:
    """A 2-D mesh ``(processes, local devices)`` over all global devices:
    the first axis spans the processes, the second each process's own
    devices (ordered by process, then device id)."""
    import jax
    from jax.sharding import Mesh

    devs = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    grid = np.array(devs, dtype=object).reshape(jax.process_count(), -1)
    return Mesh(grid, axis_names)


def axis_groups(mesh: Any, axes: str | Sequence[str] | None = None) -> list[list[int]]:
    """Replica groups for a collective over mesh ``axes`` (default: all), in
    global device ids: positions in ``mesh.devices.flat``, the device
    assignment of an SPMD program over ``mesh`` (what JAX's own ``psum``
    emits)."""
    names = list(mesh.axis_names)
    if axes is None:
        axes = names
    elif isinstance(axes, str):
        axes = [axes]
    unknown = [a for a in axes if a not in names]
    if unknown:
        raise ValueError(f"axis_groups: mesh has axes {names}, not {unknown}")
    ids = np.arange(mesh.devices.size).reshape(mesh.devices.shape)
    keep = [names.index(a) for a in axes]
    rest = [i for i in range(len(names)) if i not in keep]
    moved = np.transpose(ids, rest + keep).reshape(-1, int(np.prod([ids.shape[i] for i in keep])))
    return [[int(d) for d in row] for row in moved]
