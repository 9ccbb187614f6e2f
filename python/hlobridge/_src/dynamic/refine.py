"""Specialising a shape-polymorphic module to a call's concrete shapes:
the ONE place hlobridge refines.

:func:`refine` prefers the native pass, ``hlobridge._native.refine_shapes``
(Rust, over hlobridge's own IR: shape propagation, folding of
``get_dimension_size`` and the shape arithmetic, shape assertions checked,
dynamism dropped). Where the extension lacks it, :func:`refine` falls back to
the StableHLO refinement that ships with jaxlib (``refine_polymorphic_shapes``
in its MLIR bindings, what ``jax.export`` uses itself): ``@main`` becomes a
private function called from a new ``@main`` with the concrete argument
types (a ``stablehlo.convert`` to each dynamic type, as JAX does when it
calls an exported function), then the pass refines and inlines.

When the native pass refuses a module with
:class:`~hlobridge.errors.ShapeRefinementError` (an op it has no rule for
yet), jaxlib's pass serves that call and ``counters["native_fallback"]``
counts it; a :class:`~hlobridge.errors.ShapeAssertionError` is final.

Both raise :class:`~hlobridge.errors.ShapeAssertionError` when the shapes
violate a ``shape_assertion`` and :class:`~hlobridge.errors.ShapeRefinementError`
for any other failure. :data:`counters` counts refinements by route.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence

from hlobridge import _native
from hlobridge._src.errors import BridgeError, ShapeAssertionError, ShapeRefinementError

__all__ = ["refine", "route", "counters", "last_fallback"]

counters = {"native": 0, "jaxlib": 0, "native_fallback": 0}
"""Refinements done per route, process-wide; ``native_fallback``: native
refusals (:class:`ShapeRefinementError`) that jaxlib's pass then served."""
last_fallback: list[str] = []
"""The native pass's message for the last refinement that fell back."""
_lock = threading.Lock()
_ASSERTION = re.compile(r"Input shapes do not match[^\n]*")


def route() -> str:
    """``"native"`` when ``hlobridge._native.refine_shapes`` exists, else
    ``"jaxlib"``."""
    return "native" if hasattr(_native, "refine_shapes") else "jaxlib"


def refine(text: str, shapes: Sequence[Sequence[int]]) -> str:
    """``text`` (a module whose ``@main`` has dynamic dimensions)
    specialised to arguments of these ``shapes``, as module text without
    dynamic shapes."""
    shapes = [[int(d) for d in s] for s in shapes]
    if route() == "native":
        try:
            out = _native.refine_shapes(text, shapes)
        except ShapeRefinementError as e:
            # An op the native pass has no rule for yet: jaxlib's pass, counted
            # (``counters["native_fallback"]``) and remembered (``last_fallback``).
            counters["native_fallback"] += 1
            last_fallback[:] = [str(e)]
        else:
            counters["native"] += 1
            return out  # type: ignore[no-any-return]
    out = _refine_jaxlib(text, shapes)
    counters["jaxlib"] += 1
    return out


def _refine_jaxlib(text: str, shapes: list[list[int]]) -> str:
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import func as func_dialect
    from jax._src.lib.mlir.dialects import hlo

    with _lock, mlir.make_ir_context(), ir.Location.unknown():
        try:
            module = ir.Module.parse(text)
        except Exception as e:
            raise ShapeRefinementError(f"hlobridge refine: cannot parse the module: {e}") from e
        main = next((op for op in module.body.operations
                     if "sym_name" in op.attributes
                     and ir.StringAttr(op.attributes["sym_name"]).value == "main"), None)
        if main is None:
            raise ShapeRefinementError("hlobridge refine: the module has no @main")
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        if len(ftype.inputs) != len(shapes):
            raise ShapeRefinementError(f"hlobridge refine: @main takes {len(ftype.inputs)} "
                                       f"arguments, got {len(shapes)} shapes")
        static = []
        for k, (t, s) in enumerate(zip(ftype.inputs, shapes)):
            rt = ir.RankedTensorType(t)
            if rt.rank != len(s) or any(not rt.is_dynamic_dim(a) and rt.get_dim_size(a) != d
                                        for a, d in enumerate(s)):
                dims = ["?" if rt.is_dynamic_dim(a) else str(rt.get_dim_size(a))
                        for a in range(rt.rank)]
                err = ShapeAssertionError(
                    f"hlobridge refine: argument {k} has shape {list(s)}; the program takes "
                    f"[{', '.join(dims)}]")
                err.dim = f"args[{k}]"
                raise err
            static.append(ir.RankedTensorType.get(s, rt.element_type))
        main.attributes["sym_name"] = ir.StringAttr.get("_hb_dynamic_main")
        main.attributes["sym_visibility"] = ir.StringAttr.get("private")
        with ir.InsertionPoint(module.body):
            f = func_dialect.FuncOp("main", ir.FunctionType.get(static, ftype.results))
            f.attributes["sym_visibility"] = ir.StringAttr.get("public")
            block = f.add_entry_block()
            with ir.InsertionPoint(block):
                args = [hlo.convert(t, a) for t, a in zip(ftype.inputs, block.arguments)]
                call = func_dialect.CallOp(ftype.results,
                                           ir.FlatSymbolRefAttr.get("_hb_dynamic_main"), args)
                func_dialect.ReturnOp(call.results)
        code = mlir.module_to_bytecode(module)
        try:
            refined = _jax.mlir.refine_polymorphic_shapes(
                code, enable_shape_assertions=True, validate_static_shapes=True,
                enable_shardy=False)
        except BridgeError:
            raise
        except Exception as e:
            msg = str(e)
            m = _ASSERTION.search(msg)
            if m is not None:
                raise ShapeAssertionError(f"hlobridge refine: {m.group(0)}") from None
            raise ShapeRefinementError(f"hlobridge refine: {msg.splitlines()[0]}") from e
        return str(ir.Module.parse(refined))
