"""Every private JAX name :mod:`hlobridge.spmd` uses, in one place, with a
version check.

``jax.export`` has no public constructor for an :class:`jax.export.Exported`
made from StableHLO text that JAX did not lower itself, so
:func:`exported_from_module` fills the dataclass's fields directly (some of
them private) and serializes the module with jaxlib's portable-artifact
serializer, as ``jax.export`` does (for a whole-mesh program, with its
shardings as ``NamedSharding``s and their ``HloSharding``s). It also parses the module with JAX's MLIR
bindings to read ``@main``'s signature, and asks ``xla_bridge`` whether the
backends started. Checked against jax/jaxlib 0.10.2
(the pinned stack); on another version the fields are checked by name and
:class:`JaxVersionError` says what changed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from hlobridge._src.errors import BridgeError, JaxVersionError

__all__ = ["JaxVersionError", "TESTED_JAX", "backends_started", "exported_from_module",
           "main_signature"]

TESTED_JAX = ("0.10.2",)
"""JAX versions this module was written against."""

_FIELDS = {
    "fun_name", "in_tree", "in_avals", "out_tree", "out_avals", "_has_named_shardings",
    "_in_named_shardings", "_out_named_shardings", "in_shardings_hlo", "out_shardings_hlo",
    "nr_devices", "platforms", "ordered_effects", "unordered_effects", "disabled_safety_checks",
    "mlir_module_serialized", "calling_convention_version", "module_kept_var_idx",
    "uses_global_constants", "_get_vjp",
}


def backends_started() -> bool:
    """True once JAX created its backends in this process (after which
    ``jax.distributed.initialize`` and ``jax_num_cpu_devices`` are too late)."""
    from jax._src import xla_bridge

    return bool(xla_bridge.backends_are_initialized())


def _check() -> None:
    from jax import export

    have = {f.name for f in dataclasses.fields(export.Exported)}
    if have != _FIELDS:
        raise JaxVersionError(
            f"jax {jax.__version__}: jax.export.Exported has fields {sorted(have ^ _FIELDS)} "
            f"different from the {'/'.join(TESTED_JAX)} hlobridge.spmd was written for")


_ELEM = {
    "f32": np.float32, "f64": np.float64, "f16": np.float16, "i8": np.int8, "i16": np.int16,
    "i32": np.int32, "i64": np.int64, "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32,
    "ui64": np.uint64, "i1": np.bool_,
}


def _dtype(elem: Any) -> Any:
    s = str(elem)
    if s == "bf16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if s not in _ELEM:
        raise JaxVersionError(f"hlobridge.spmd: element type {s} is not supported here")
    return np.dtype(_ELEM[s])


def main_signature(text: str) -> tuple[list[tuple[tuple[int, ...], Any]],
                                       list[tuple[tuple[int, ...], Any]]]:
    """``(inputs, outputs)`` of module ``text``'s ``@main``: ``(shape, dtype)``
    each. Raises :class:`BridgeError` if there is no ``@main`` or a type is
    not a static tensor."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():
        module = ir.Module.parse(text)
        main = None
        for op in module.body.operations:
            if op.operation.name == "func.func" and \
                    ir.StringAttr(op.attributes["sym_name"]).value == "main":
                main = op
        if main is None:
            raise BridgeError("hlobridge.spmd: the module has no @main function")
        fty = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)

        def conv(ty: Any) -> tuple[tuple[int, ...], Any]:
            rt = ir.RankedTensorType(ty)
            if not rt.has_static_shape:
                raise BridgeError(f"hlobridge.spmd: @main has a dynamic type {ty}")
            return tuple(rt.shape), _dtype(rt.element_type)

        return [conv(t) for t in fty.inputs], [conv(t) for t in fty.results]


def exported_from_module(text: str, name: str, platform: str = "cpu",
                         shardings: tuple[Any, Any] | None = None) -> Any:
    """A :class:`jax.export.Exported` that calls module ``text``'s ``@main``
    on its arguments (flat positional arrays in, a tuple out), for
    ``platform``. Without ``shardings`` it is lowered for one device (so it
    can be the per-device body of ``shard_map``; its own collectives name
    global device ids). With ``shardings`` = ``(in, out)`` (one
    ``NamedSharding`` per input and output, over one mesh) it is a program
    over that whole mesh: Shardy propagates the shardings through its ops and
    XLA inserts the collectives."""
    _check()
    from jax import export, tree_util
    from jax._src import core
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax
    from jax._src.lib.mlir.dialects import hlo

    ins, outs = main_signature(text)
    in_avals = tuple(core.ShapedArray(s, d) for s, d in ins)
    out_avals = tuple(core.ShapedArray(s, d) for s, d in outs)
    target = hlo.get_version_from_compatibility_requirement(
        hlo.StablehloCompatibilityRequirement.WEEK_4)
    with mlir.make_ir_context():
        from jax._src.lib.mlir import ir

        module = ir.Module.parse(text)
        serialized = _jax.mlir.serialize_portable_artifact(module, target, False)
    n_in, n_out = len(in_avals), len(out_avals)
    nr_devices, named, in_named, out_named = 1, False, (None,) * n_in, (None,) * n_out
    in_hlo, out_hlo = (None,) * n_in, (None,) * n_out
    if shardings is not None:
        ins_s, outs_s = tuple(shardings[0]), tuple(shardings[1])
        if len(ins_s) != n_in or len(outs_s) != n_out:
            raise BridgeError(f"hlobridge.spmd: {len(ins_s)}/{len(outs_s)} shardings for a "
                              f"@main of {n_in} inputs and {n_out} outputs")
        nr_devices = int(ins_s[0].mesh.devices.size) if ins_s else int(outs_s[0].mesh.devices.size)
        named, in_named, out_named = True, ins_s, outs_s
        in_hlo = tuple(s._to_xla_hlo_sharding(a.ndim) for s, a in zip(ins_s, in_avals))
        out_hlo = tuple(s._to_xla_hlo_sharding(a.ndim) for s, a in zip(outs_s, out_avals))
    return export.Exported(
        fun_name=name,
        in_tree=tree_util.tree_structure((tuple(range(n_in)), {})),
        in_avals=in_avals,
        out_tree=tree_util.tree_structure(tuple(range(n_out))),
        out_avals=out_avals,
        _has_named_shardings=named,
        _in_named_shardings=in_named,
        _out_named_shardings=out_named,
        in_shardings_hlo=in_hlo,
        out_shardings_hlo=out_hlo,
        nr_devices=nr_devices,
        platforms=(platform,),
        ordered_effects=(),
        unordered_effects=(),
        disabled_safety_checks=(),
        mlir_module_serialized=serialized,
        calling_convention_version=10,
        module_kept_var_idx=tuple(range(n_in)),
        uses_global_constants=False,
        _get_vjp=None,
    )
