"""The JAX function of a ``call_jax`` that Dynamo is tracing, as a Python
object: what :mod:`hlobridge._src.custom_op` registers under a key.

Dynamo hands :func:`hlobridge._src.custom_op.traced_call` its arguments as
``VariableTracker`` objects, and only some of them are Python constants
(module-level functions, ``functools.partial`` of those). :func:`materialize`
turns every callable ``call_jax`` accepts eagerly back into the object:

- functions, lambdas and nested ``def`` functions made inside the compiled region:
  rebuilt from their code, globals, defaults and closure cells, whose
  contents must be Python values (a captured torch tensor raises
  :class:`~hlobridge.CapturedTensorError`: pass it as an argument);
- functions, ``jax.jit``-wrapped functions, ``jnp`` functions and other
  objects from outside the compiled region: the object itself, with an
  identity guard (Dynamo's own guard on a closure only checks its code, so
  rebinding a name to a closure over another constant would otherwise reuse
  the old program);
- bound methods and ``functools.partial``: rebuilt from their parts.

Besides the object, :func:`materialize` returns its *identity*: a hashable
token that is equal for two traces of the same function over the same
captured values (code, closure contents, defaults) and differs otherwise, so
that retracing a nested function reuses its key and two closures over
different constants never share one.

Only :mod:`hlobridge._src.custom_op` imports this module, and only while
Dynamo traces: it imports Dynamo internals.
"""

from __future__ import annotations

import functools
import types
from typing import Any

from torch._dynamo import variables as V
from torch._dynamo.guards import GuardBuilder
from torch._dynamo.guards import install_guard

from hlobridge._src.errors import ArgumentError, CapturedTensorError

__all__ = ["materialize"]


def _tensor_error(where: str) -> CapturedTensorError:
    return CapturedTensorError(
        f"call_jax: the JAX function closes over a torch.Tensor ({where}); JAX cannot use a "
        f"captured torch tensor. Pass it as an argument instead: call_jax(fn, x, t) with "
        f"fn(x, t)")


def _guarded_value(vt: Any, value: Any) -> Any:
    """``value``, with an identity guard on ``vt``'s source if it has one."""
    source = getattr(vt, "source", None)
    if source is not None:
        install_guard(source.make_guard(GuardBuilder.ID_MATCH))
    return value


def _hashable(x: Any) -> Any:
    try:
        hash(x)
    except TypeError:
        return ("id", id(x))
    return x


def materialize(tx: Any, vt: Any, where: str = "function") -> tuple[Any, Any]:
    """``(object, identity)`` of the traced value ``vt`` (see the module docs)."""
    if isinstance(vt, V.TensorVariable):
        raise _tensor_error(where)
    if isinstance(vt, V.NestedUserFunctionVariable):
        return _nested(tx, vt)
    if isinstance(vt, V.UserMethodVariable):
        fn, fid = materialize(tx, vt.fn, where)
        obj, oid = materialize(tx, vt.obj, f"{where}.__self__")
        return types.MethodType(fn, obj), ("method", fid, oid)
    if isinstance(vt, V.FunctoolsPartialVariable):
        fn, fid = materialize(tx, vt.func, where)
        args = [materialize(tx, a, f"{where} partial argument") for a in vt.args]
        kws = {k: materialize(tx, v, f"{where} partial argument {k}")
               for k, v in vt.keywords.items()}
        obj = functools.partial(fn, *[a for a, _ in args], **{k: v for k, (v, _) in kws.items()})
        ident = ("partial", fid, tuple(i for _, i in args),
                 tuple(sorted((k, i) for k, (_, i) in kws.items())))
        return obj, ident
    if isinstance(vt, V.NNModuleVariable):
        mod = tx.output.get_submodule(vt.module_key)
        return mod, ("id", id(mod))
    if type(vt) is V.UserFunctionVariable:
        return _guarded_value(vt, vt.fn), vt.fn
    if isinstance(vt, (V.TupleVariable, V.ListVariable)) and not vt.is_python_constant():
        items = [materialize(tx, i, where) for i in vt.items]
        seq = [o for o, _ in items]
        obj = tuple(seq) if isinstance(vt, V.TupleVariable) else seq
        return obj, (type(obj).__name__, tuple(i for _, i in items))
    if vt.is_python_constant():
        value = vt.as_python_constant()
        return value, _hashable(value)
    value = getattr(vt, "value", None)
    if value is None:
        value = getattr(vt, "fn", None)
    if value is not None:
        return _guarded_value(vt, value), ("id", id(value))
    raise ArgumentError(f"call_jax under torch.compile: cannot pass {vt.python_type().__name__} "
                        f"({where}) into the JAX function; pass arrays as tensor arguments and "
                        f"Python values as static arguments")


def _nested(tx: Any, vt: Any) -> tuple[Any, Any]:
    """A function made inside the compiled region, rebuilt with its closure."""
    code = vt.get_code()
    names = code.co_freevars
    cells: list[Any] = []
    contents: list[Any] = []
    if vt.closure is not None:
        for name, cell_vt in zip(names, vt.closure.items):
            if isinstance(cell_vt, V.CellVariable):
                inner = tx.output.side_effects.load_cell(cell_vt)
            else:
                inner = cell_vt
            value, ident = materialize(tx, inner, f"captured variable {name!r}")
            cells.append(types.CellType(value))
            contents.append(ident)
    defaults = vt.defaults.as_python_constant() if vt.defaults else None
    fn = types.FunctionType(code, vt.f_globals, vt.fn_name.as_python_constant(),
                            defaults, tuple(cells) if names else None)
    if vt.kwdefaults:
        fn.__kwdefaults__ = vt.kwdefaults.keys_as_python_constant()
    ident = ("nested", code, id(vt.f_globals), _hashable(defaults), tuple(contents))
    return fn, ident
