"""A stitched hlobridge program run SPMD on JAX's (multi-process) runtime.

- :func:`torch_segment` captures a torch module (torch.export + torch_xla)
  as a stitch segment and rewrites its collectives (``funcol.all_reduce``
  and friends, which torch_xla lowers with an empty ``replica_groups`` and a
  token) into the global-device-id form over one mesh axis, with the Rust
  pass (:func:`rewrite_collectives`). torch_xla's lifted constants (such as
  its token) become named program inputs fed by the program itself.
- :class:`SpmdProgram` wraps the fused module as a ``jax.export.Exported``
  built from its ``@main`` signature and runs it as the per-device body of
  ``shard_map`` over a mesh of all global devices. It takes each process's
  torch tensors (its block of every global input), makes global arrays
  through DLPack, and returns this process's blocks of the outputs as torch
  tensors. With ``mode="global"`` the module is written over the whole mesh
  instead: its input and output shardings go on the ``Exported``, and Shardy
  carries them through the torch and JAX segments.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from hlobridge import _native
from hlobridge._src.errors import CollectiveRewriteError, SpmdArgumentError
from hlobridge._src.spmd.arrays import to_global, to_local
from hlobridge._src.spmd.mesh import axis_groups

__all__ = ["SpmdProgram", "TorchSegment", "rewrite_collectives", "stitch_spmd", "torch_segment"]

_CHANNELS = itertools.count(1 << 12, 1 << 8)
"""Channel ids for rewritten torch collectives: a block of 256 per segment,
far above the ones JAX numbers its own from 1. Every process must capture
its segments in the same order (an SPMD program is the same everywhere)."""


def rewrite_collectives(text: str, mesh: Any, axes: str | Sequence[str] | None = None,
                        first_channel: int | None = None) -> tuple[str, dict[str, Any]]:
    """Rewrite the collectives of module ``text`` into the global-device-id
    form over mesh ``axes`` (default: every device). Returns the new text
    and the report (``rewritten``, ``tokens_dropped``, ``kept``,
    ``channels``). Raises :class:`hlobridge.CollectiveRewriteError` for a
    collective it cannot rewrite."""
    if first_channel is None:
        first_channel = next(_CHANNELS)
    out, report = _native.rewrite_collectives(text, int(mesh.devices.size),
                                              axis_groups(mesh, axes), first_channel)
    return out, json.loads(report)


@dataclass
class TorchSegment:
    """A torch module captured as a stitch segment."""

    name: str
    text: str
    inputs: list[str]
    """Handle of each ``@main`` parameter: the given input names, and
    ``<name>.const<k>`` for torch_xla's lifted constants."""
    outputs: list[str]
    constants: dict[str, torch.Tensor] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    """What the collectives rewrite did."""

    @property
    def native(self) -> tuple[str, str, str, str, list[str], list[str]]:
        """The segment tuple of :func:`hlobridge._native.stitch`."""
        return (self.name, "torch", self.text, "main", list(self.inputs), list(self.outputs))


def torch_segment(name: str, module: torch.nn.Module, examples: tuple[torch.Tensor, ...],
                  inputs: Sequence[str], outputs: Sequence[str], mesh: Any = None,
                  axes: str | Sequence[str] | None = None) -> TorchSegment:
    """Capture ``module`` on per-device ``examples`` (torch.export +
    torch_xla) as segment ``name`` whose positional inputs are the handles
    ``inputs`` and whose outputs are ``outputs``. With ``mesh``, its
    collectives are rewritten over mesh ``axes`` (all devices by default)."""
    from torch_xla.stablehlo import exported_program_to_stablehlo

    if len(inputs) != len(examples):
        raise SpmdArgumentError(f"torch_segment {name}: {len(examples)} examples but "
                                f"{len(inputs)} input names")
    shlo = exported_program_to_stablehlo(torch.export.export(module, tuple(examples)))
    bundle = shlo._bundle
    meta = bundle.stablehlo_funcs[0].meta
    handles: list[str] = []
    constants: dict[str, torch.Tensor] = {}
    for loc in meta.input_locations:
        kind = loc.type_.value
        if kind == "input_arg":
            handles.append(inputs[loc.position])
        elif kind == "constant":
            h = f"{name}.const{loc.position}"
            constants[h] = torch.as_tensor(bundle.additional_constants[loc.position]).contiguous()
            handles.append(h)
        else:
            raise SpmdArgumentError(f"torch_segment {name}: torch_xla input of kind {kind} "
                                    f"(parameters and buffers must be passed as inputs)")
    text = shlo.get_stablehlo_text()
    report: dict[str, Any] = {}
    if mesh is not None:
        text, report = rewrite_collectives(text, mesh, axes)
    return TorchSegment(name, text, handles, list(outputs), constants, report)


_COLLECTIVE = re.compile(r"stablehlo\.(all_reduce|all_gather|reduce_scatter|all_to_all|"
                         r"collective_permute|collective_broadcast)\b")


class SpmdProgram:
    """Module ``text`` (``@main`` takes ``input_names`` in order) run over
    ``mesh``. ``in_specs`` maps each input name to its ``PartitionSpec``
    (missing: replicated), ``out_specs`` gives one per output. Inputs named
    in ``constants`` are fed by the program (replicated).

    ``mode="shard_map"`` (default): the module is the per-device body of
    ``shard_map``; its types are per-device shapes and its collectives (the
    rewritten torch ones, or JAX's) say what crosses devices.
    ``mode="global"``: the module is written over the whole mesh (global
    shapes); the specs become its input and output shardings, Shardy
    propagates them through every segment's ops (torch ones included) and
    XLA inserts the collectives. Such a module must hold no collective of
    its own (:class:`hlobridge.CollectiveRewriteError`)."""

    def __init__(self, text: str, mesh: Any, input_names: Sequence[str],
                 in_specs: dict[str, Any], out_specs: Sequence[Any],
                 constants: dict[str, torch.Tensor] | None = None, name: str = "stitched",
                 mode: str = "shard_map"):
        import jax
        from jax.sharding import NamedSharding, PartitionSpec

        from hlobridge._src.spmd.jax_private import exported_from_module

        if mode not in ("shard_map", "global"):
            raise SpmdArgumentError(f"SpmdProgram: mode {mode!r} is not 'shard_map' or 'global'")
        if mode == "global":
            found = _COLLECTIVE.search(text)
            if found:
                raise CollectiveRewriteError(
                    f"SpmdProgram(mode='global'): the module holds a {found.group(0)}; a program "
                    f"over the whole mesh gets its collectives from XLA's partitioner (drop the "
                    f"torch collective, or use mode='shard_map' with rewritten collectives)")
        self.text = text
        self.mesh = mesh
        self.mode = mode
        self.input_names = list(input_names)
        self.constants = dict(constants or {})
        self.in_specs = [in_specs.get(n, PartitionSpec()) for n in self.input_names]
        self.out_specs = list(out_specs)
        self.shardings = [NamedSharding(mesh, s) for s in self.in_specs]
        out_shardings = [NamedSharding(mesh, s) for s in self.out_specs]
        if mode == "global":
            if len(self.shardings) != len(self.input_names):
                raise SpmdArgumentError("SpmdProgram: one spec per input")
            self.exported = exported_from_module(text, name,
                                                 shardings=(self.shardings, out_shardings))
        else:
            self.exported = exported_from_module(text, name)
        n_in, n_out = len(self.exported.in_avals), len(self.exported.out_avals)
        if n_in != len(self.input_names):
            raise SpmdArgumentError(f"SpmdProgram: @main takes {n_in} inputs, "
                                    f"{len(self.input_names)} names given")
        if n_out != len(out_specs):
            raise SpmdArgumentError(f"SpmdProgram: @main returns {n_out} outputs, "
                                    f"{len(out_specs)} out_specs given")
        if mode == "global":
            self.global_shapes = [tuple(a.shape) for a in self.exported.in_avals]
        else:
            self.global_shapes = [self._global(a.shape, s)
                                  for a, s in zip(self.exported.in_avals, self.in_specs)]
        self.user_inputs = [n for n in self.input_names if n not in self.constants]
        exp = self.exported

        def body(*args: Any) -> tuple[Any, ...]:
            return tuple(exp.call(*args))

        if mode == "global":
            self._fn = jax.jit(body, in_shardings=tuple(self.shardings),
                               out_shardings=tuple(out_shardings))
        else:
            self._fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=tuple(self.in_specs),
                                             out_specs=tuple(self.out_specs), check_vma=False))
        self._const_arrays: dict[str, Any] = {}

    def _global(self, shape: tuple[int, ...], spec: Any) -> tuple[int, ...]:
        out = list(shape)
        for d, axes in enumerate(tuple(spec)):
            if axes is None:
                continue
            for a in (axes if isinstance(axes, tuple) else (axes,)):
                out[d] *= self.mesh.shape[a]
        return tuple(out)

    def global_arrays(self, *tensors: torch.Tensor) -> list[Any]:
        """The global arrays of this process's ``tensors`` (one per input
        that is not a constant, in order)."""
        if len(tensors) != len(self.user_inputs):
            raise SpmdArgumentError(f"SpmdProgram takes {len(self.user_inputs)} tensors "
                                    f"({', '.join(self.user_inputs)}), got {len(tensors)}")
        given = dict(zip(self.user_inputs, tensors))
        out = []
        for n, sh, shape in zip(self.input_names, self.shardings, self.global_shapes):
            if n in self.constants:
                if n not in self._const_arrays:
                    self._const_arrays[n] = to_global(self.constants[n], sh, shape, n)
                out.append(self._const_arrays[n])
            else:
                out.append(to_global(given[n], sh, shape, n))
        return out

    def run_global(self, *arrays: Any) -> list[Any]:
        """Run on global arrays (from :meth:`global_arrays` or a previous
        run); returns global arrays."""
        return list(self._fn(*arrays))

    def lower(self, *arrays: Any) -> Any:
        """The ``jax.stages.Lowered`` of the program for global ``arrays``
        (``.compile().as_text()`` shows the partitioned HLO)."""
        return self._fn.lower(*arrays)

    def __call__(self, *tensors: torch.Tensor) -> list[torch.Tensor]:
        """Run on this process's blocks of the inputs; returns its blocks of
        the outputs as torch tensors."""
        return [to_local(a) for a in self.run_global(*self.global_arrays(*tensors))]


def stitch_spmd(inputs: Sequence[tuple[str, str]], segments: Sequence[Any], outputs: Sequence[str],
                mesh: Any, in_specs: dict[str, Any], out_specs: Sequence[Any],
                name: str = "stitched", mode: str = "shard_map") -> SpmdProgram:
    """Stitch ``segments`` (:class:`TorchSegment` or native segment tuples)
    into one module with program ``inputs`` ``(name, MLIR type)`` (per-device
    types for ``mode="shard_map"``, global ones for ``mode="global"``) and
    ``outputs`` (handle names), then wrap it as an :class:`SpmdProgram`.
    The constants of torch segments are appended to the inputs."""
    constants: dict[str, torch.Tensor] = {}
    native = []
    for seg in segments:
        if isinstance(seg, TorchSegment):
            constants.update(seg.constants)
            native.append(seg.native)
        else:
            native.append(tuple(seg))
    plan_inputs = [(n, ty, False) for n, ty in inputs]
    for h, t in constants.items():
        dt = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64",
              torch.int32: "i32", torch.bool: "i1"}[t.dtype]
        dims = "".join(f"{d}x" for d in t.shape)
        plan_inputs.append((h, f"tensor<{dims}{dt}>", False))
    text, _report = _native.stitch(plan_inputs, native, list(outputs))
    return SpmdProgram(text, mesh, [p[0] for p in plan_inputs], in_specs, out_specs, constants,
                       name, mode)
