"""A partitioned FX graph lowered piece by piece and stitched into ONE
StableHLO module: the step the ``torch.compile`` backend
(:class:`~hlobridge._src.dynamo.program.CompiledGraph`) and
:func:`hlobridge.call_torch` (:mod:`hlobridge._src.call_torch.capture`)
share, so a torch function embedded in JAX is the program the backend
would run.

1. each torch piece is lowered by the engine
   (:mod:`hlobridge._src.dynamo.engine`); scalars the engine made
   parameters become one-constant segments XLA folds, other constants
   program inputs;
2. each JAX piece (a ``call_jax`` node) by ``jax.jit(...).trace`` on
   ``ShapeDtypeStruct`` s, for the target platform (Pallas kernels in
   interpret mode on ``cpu``);
3. :func:`hlobridge._native.stitch` merges them into one ``@main`` (seams
   type-checked, segments inlined, dead code removed), marking the mutated
   inputs it updates in place (:mod:`hlobridge._src.dynamo.aliasing`).

Nothing is compiled here.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import jax
import torch

from hlobridge import _native
from hlobridge._src.custom_op import lookup
from hlobridge._src.dynamo.aliasing import program_aliases
from hlobridge._src.dtypes import DTYPES as _DTYPES, X64 as _X64, require_torch_dtype
from hlobridge._src.dynamo.engine import TensorSpec, get_engine
from hlobridge._src.dynamo.partition import JaxPiece, Partition, TorchPiece
from hlobridge._src.errors import DtypeError

__all__ = ["Seg", "StitchedPartition", "mlir_type", "stitch_partition"]

Seg = tuple[str, str, str, str, list[str], list[str]]
"""One segment as :func:`hlobridge._native.stitch` takes it: ``(name,
producer, module text, entry function, input handles, output handles)``."""


@dataclass
class StitchedPartition:
    """The stitched module of a partition and how its pieces map onto it."""

    text: str
    report_json: str
    """The stitcher's report (segments, ops...), JSON."""
    segs: list[Seg]
    engines: list[str]
    """Per segment: the engine's name, ``"jax.jit"``, ``"constant"`` (a
    scalar XLA folds) or ``"reshape"`` (a 0-d input as the 1-element vector
    a torch segment takes)."""
    consts: dict[str, torch.Tensor]
    """Graph constants and engine-made tensor parameters, by handle."""
    used_args: list[int]
    """Placeholder positions the program reads, in program-input order."""
    used_consts: list[str]
    """Constants the program reads; program inputs after ``used_args``."""
    outputs: list[tuple[str, int] | None]
    """Per graph output: ``("prog", j)``, ``("arg", i)`` or ``None``."""
    plan: tuple[list[tuple[str, str, bool]], list[Seg], list[str]]
    """``(inputs, segments, outputs)`` as passed to the stitcher."""
    aliases: list[tuple[int, int]]
    """``(k, j)``: program input ``k`` is updated in place as result ``j``."""
    lower_s: float


def mlir_type(spec: TensorSpec) -> str:
    """``tensor<2x3xf32>`` for ``((2, 3), torch.float32)``."""
    shape, dt = spec
    entry = _DTYPES.get(dt)
    if entry is None:
        raise DtypeError(f"hlobridge backend: unsupported dtype {dt}")
    return "tensor<" + "".join(f"{d}x" for d in shape) + entry[0] + ">"


def stitch_partition(part: Partition, types: dict[str, TensorSpec], *, label: str,
                     platform: str, mutations: list[tuple[int, int]] | None = None
                     ) -> StitchedPartition:
    """Lower ``part``'s pieces and stitch them. ``types`` holds each
    placeholder's ``(shape, dtype)`` (placeholders without one, such as
    Python scalars, are not program inputs); it gains the constants' and
    every piece output's types. ``label`` names the graph in errors;
    ``mutations`` (``(graph output, graph input)``) are the inputs to update
    in place where they fit."""
    t0 = time.perf_counter()
    consts: dict[str, torch.Tensor] = dict(part.constants)
    for name, c in consts.items():
        types[name] = (tuple(c.shape), c.dtype)
    segs: list[Seg] = []
    engines: list[str] = []
    for piece in part.pieces:
        if isinstance(piece, TorchPiece):
            seg = _lower_torch(piece, types, consts, segs, engines, label)
            segs.append(seg)
            engines.append(get_engine().name)
        else:
            segs.append(_lower_jax(piece, types, platform))
            engines.append("jax.jit")
    used_args = [i for i, n in enumerate(part.placeholders)
                 if n in types and any(n in s[4] for s in segs)]
    used_consts = [n for n in consts if any(n in s[4] for s in segs)]
    prog_out: list[str] = []
    outputs: list[tuple[str, int] | None] = []
    placeholder_pos = {n: i for i, n in enumerate(part.placeholders)}
    for h in part.outputs:
        if h is None:
            outputs.append(None)
        elif h in placeholder_pos:
            outputs.append(("arg", placeholder_pos[h]))
        else:
            if h not in prog_out:
                prog_out.append(h)
            outputs.append(("prog", prog_out.index(h)))
    inputs = [(part.placeholders[i], mlir_type(types[part.placeholders[i]]), False)
              for i in used_args]
    inputs += [(n, mlir_type(types[n]), False) for n in used_consts]
    aliases = program_aliases(mutations or [], part.placeholders, types, used_args, outputs,
                              prog_out)
    text, report_json = _native.stitch(inputs, segs, prog_out, aliases=aliases)
    return StitchedPartition(text=text, report_json=report_json, segs=segs, engines=engines,
                             consts=consts, used_args=used_args, used_consts=used_consts,
                             outputs=outputs, plan=(inputs, segs, prog_out), aliases=aliases,
                             lower_s=time.perf_counter() - t0)


def _lower_torch(piece: TorchPiece, types: dict[str, TensorSpec], consts: dict[str, torch.Tensor],
                 segs: list[Seg], engines: list[str], label: str) -> Seg:
    lowered = get_engine().lower(piece.gm, [types[h] for h in piece.inputs])
    # Backstop behind the FX-level refusal: a collective torch_xla
    # lowered would be a one-replica no-op (docs/distributed.md).
    from hlobridge._src.distributed_guard import check_stablehlo_collectives

    check_stablehlo_collectives(lowered.text, f"hlobridge backend ({label}, {piece.name})")
    handles: list[str] = []
    for k, p in enumerate(lowered.params):
        if isinstance(p, int) and p in lowered.widened:
            # A 0-d input the engine traced as its 1-element vector: a
            # reshape segment between (XLA folds it).
            name = f"{piece.name}_vec{p}"
            shape, dt = types[piece.inputs[p]]
            types[name] = ((1,), dt)
            segs.append((name, "torch", _vector_module(mlir_type((shape, dt)),
                                                       mlir_type(((1,), dt))),
                         "main", [piece.inputs[p]], [name]))
            engines.append("reshape")
            handles.append(name)
            continue
        if isinstance(p, int):
            handles.append(piece.inputs[p])
            continue
        name = f"{piece.name}_const{k}"
        types[name] = (tuple(p.shape), p.dtype)
        handles.append(name)
        if p.dim() == 0 and p.dtype in _DTYPES:
            # A scalar the engine made a parameter: a constant segment,
            # so that XLA can fold it.
            segs.append((name, "torch", _scalar_module(p), "main", [], [name]))
            engines.append("constant")
        else:
            consts[name] = p
    for h, spec in zip(piece.outputs, lowered.outputs):
        types[h] = spec
    return (piece.name, "torch", lowered.text, "main", handles, piece.outputs)


def _lower_jax(piece: JaxPiece, types: dict[str, TensorSpec], platform: str) -> Seg:
    fn = lookup(piece.key)
    specs = [types[h] for h in piece.inputs]
    sds = [jax.ShapeDtypeStruct(s, _DTYPES[d][1]) for s, d in specs]  # type: ignore[no-untyped-call]
    need_x64 = any(d in _X64 for _, d in specs)
    from hlobridge._src.pallas_auto import lower_traced, producer_of  # cpu: Pallas in interpret mode

    with jax.enable_x64(True) if need_x64 else contextlib.nullcontext():
        traced = jax.jit(fn.flat, keep_unused=True).trace(*sds)
        lowered = lower_traced(traced, platform)
        text = lowered.as_text()
    out_info = jax.tree_util.tree_leaves(lowered.out_info)
    for h, info in zip(piece.outputs, out_info):
        types[h] = (tuple(info.shape), require_torch_dtype(info.dtype, "hlobridge backend"))
    return (piece.name, producer_of(traced), text, "main", piece.inputs, piece.outputs)


def _vector_module(scalar: str, vector: str) -> str:
    """A module whose ``main`` reshapes a 0-d tensor to its 1-element vector."""
    return (f"module @vector {{\n  func.func public @main(%arg0: {scalar}) -> {vector} {{\n"
            f"    %0 = stablehlo.reshape %arg0 : ({scalar}) -> {vector}\n"
            f"    return %0 : {vector}\n  }}\n}}\n")


def _scalar_module(value: torch.Tensor) -> str:
    """A module whose ``main()`` returns the 0-d constant ``value``."""
    # numpy has no bfloat16: through float32 (exact), then JAX's bfloat16.
    arr = (value.numpy() if value.dtype is not torch.bfloat16
           else jax.numpy.asarray(value.float().numpy(), dtype=jax.numpy.bfloat16))
    need_x64 = value.dtype in _X64
    with jax.enable_x64(True) if need_x64 else contextlib.nullcontext():
        return jax.jit(lambda: arr).lower().as_text()  # type: ignore[no-any-return]
