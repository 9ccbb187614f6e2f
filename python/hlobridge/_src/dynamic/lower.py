"""ONE shape-polymorphic StableHLO module for an FX graph with symbolic
sizes: torch ops and ``call_jax`` nodes alike, through ``jax.export``.

The graph (AOTAutograd's, core aten after hlobridge's decompositions) is
interpreted on JAX tracers whose shapes carry JAX symbolic dimensions
(:mod:`hlobridge._src.dynamic.symbols`): every aten op runs as its JAX
implementation (:mod:`hlobridge._src.dynamic.ops`), every
``hlobridge::call_jax`` node as the registered JAX function itself, size
arithmetic (``sym_size``, ``operator.mul`` on sizes) on JAX dimension
expressions. ``jax.export`` turns the trace into one module whose dynamic
dimensions are ``?`` and whose ``@main`` checks the shape assertions
(each dimension variable's Dynamo value range, the consistency of sizes
shared between inputs) with ``stablehlo.custom_call @shape_assertion``.

The module's parameters are the graph's tensor inputs that the program
reads, then the graph's constants (``get_attr``), static-shaped. Symbolic
size inputs (``SymInt`` placeholders) are no parameters: their value is a
dimension of some tensor input. Graph outputs that are sizes are evaluated
per call from the input shapes (:attr:`DynamicModule.outputs`).
"""

from __future__ import annotations

import contextlib
import functools
import operator
import threading
import time
from dataclasses import dataclass
from typing import Any

import jax
import sympy
import torch
import torch.fx

from hlobridge._src.custom_op import OP as CALL_JAX, lookup
from hlobridge._src.dtypes import CODES, DTYPES, X64
from hlobridge._src.dynamic.ops import lookup_op
from hlobridge._src.dynamic.symbols import expr_of, is_symbolic, jax_dims
from hlobridge._src.errors import DtypeError, DynamicShapeError

__all__ = ["DynamicModule", "graph_is_symbolic", "lower_graph", "counters"]

counters = {"lowerings": 0}
"""Process-wide count of shape-polymorphic lowerings (tests read it)."""
_lock = threading.Lock()


@dataclass(frozen=True)
class DynamicModule:
    """One graph lowered once for every shape its symbols allow."""

    text: str
    """StableHLO module text: ``?`` dimensions and shape assertions."""
    inputs: list[int]
    """Graph input position of each module parameter (before the constants)."""
    constants: list[torch.Tensor]
    """The graph's constants, passed after the inputs."""
    dtypes: list[torch.dtype]
    """dtype of every module parameter (inputs, then constants)."""
    outputs: list[tuple[str, Any] | None]
    """Per graph output: ``("prog", j)``, ``("arg", i)``, ``("size", expr)``
    (a sympy expression over the symbols) or ``None``."""
    symbols: dict[sympy.Symbol, tuple[int, int]]
    """For each torch symbol, one ``(module parameter, axis)`` it is the size
    of: how a call's concrete symbol values are read."""
    dim_names: dict[tuple[int, int], str]
    """``(module parameter, axis)`` -> a readable name (``"x.shape[1]"``)."""
    lower_s: float


def graph_is_symbolic(gm: torch.fx.GraphModule) -> bool:
    """Whether any placeholder of ``gm`` is a symbolic size or a tensor of
    symbolic shape (``torch.compile(dynamic=True)``)."""
    return any(n.op == "placeholder" and is_symbolic(n.meta.get("val", n.meta.get("example_value")))
               for n in gm.graph.nodes)


def _shape_env(gm: torch.fx.GraphModule) -> Any:
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.SymInt):
            return v.node.shape_env
        if isinstance(v, torch.Tensor):
            for d in v.shape:
                if isinstance(d, torch.SymInt):
                    return d.node.shape_env
    return None


def _op_name(target: Any) -> str:
    name = getattr(target, "name", None)
    return str(name()) if callable(name) else getattr(target, "__name__", str(target))


class _Interpreter(torch.fx.Interpreter):
    """Runs an aten graph on JAX tracers (see the module docs)."""

    def __init__(self, gm: torch.fx.GraphModule, env: dict[sympy.Symbol, Any]) -> None:
        super().__init__(gm)
        self.sym_env = env

    def call_function(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if target is CALL_JAX:
            key, tensors = args
            return list(lookup(key).flat(*tensors))
        if target is operator.getitem or not isinstance(
                target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            if target in (torch.sym_max, torch.sym_min):
                return _dim_extreme(target is torch.sym_max, *args)
            if target is torch.sym_float:
                return _dim_float(args[0])
            return target(*args, **kwargs)
        if target is torch.ops.aten.sym_size.int:
            return args[0].shape[args[1]]
        if target is torch.ops.aten.sym_numel.default:
            n = 1
            for d in args[0].shape:
                n = n * d
            return n
        fn = lookup_op(target)
        if fn is None:
            raise DynamicShapeError(
                f"hlobridge dynamic shapes: no JAX lowering for {_op_name(target)}; compile "
                f"with torch.compile(..., dynamic=False) (each new shape then recompiles)")
        kwargs = {k: v for k, v in kwargs.items() if k not in ("device", "pin_memory", "layout")}
        try:
            return fn(*args, **kwargs)
        except DynamicShapeError:
            raise
        except Exception as e:
            raise DynamicShapeError(
                f"hlobridge dynamic shapes: {_op_name(target)} cannot be lowered with symbolic "
                f"sizes ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                f"compile with torch.compile(..., dynamic=False)") from e


def _dim_extreme(is_max: bool, a: Any, b: Any) -> Any:
    """``max``/``min`` of two sizes, either of which may be a JAX symbolic
    dimension (compared symbolically, as JAX does)."""
    from jax._src import core

    return (core.max_dim if is_max else core.min_dim)(a, b)


def _dim_float(d: Any) -> Any:
    """``sym_float`` of a size (``2.0 / numel`` in a mean's backward): a
    weakly typed float scalar, so that it keeps the tensor's dtype as a
    Python float does in torch."""
    if isinstance(d, int):
        return float(d)
    from jax._src import core, dtypes
    from jax._src.lax import lax as lax_internal

    return lax_internal._convert_element_type(core.dimension_as_value(d),
                                              dtypes.canonicalize_dtype(float), weak_type=True)


def _jax_dtype(dt: torch.dtype) -> Any:
    entry = DTYPES.get(dt)
    if entry is None or dt not in CODES:
        raise DtypeError(f"hlobridge dynamic shapes: unsupported dtype {dt}")
    return entry[1]


def lower_graph(gm: torch.fx.GraphModule, names: dict[str, str] | None = None) -> DynamicModule:
    """Lower ``gm`` (placeholders with symbolic ``val`` metadata) once, as
    one shape-polymorphic module (see the module docs)."""
    t0 = time.perf_counter()
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    vals = [n.meta.get("val") for n in placeholders]
    tensor_pos = [i for i, v in enumerate(vals) if isinstance(v, torch.Tensor)]
    for i, v in enumerate(vals):
        if v is not None and not isinstance(v, (torch.Tensor, torch.SymInt, int, float, bool)):
            raise DynamicShapeError(f"hlobridge dynamic shapes: graph input "
                                    f"{placeholders[i].name} is a {type(v).__name__}")
    consts = [(n, getattr(gm, str(n.target))) for n in nodes if n.op == "get_attr"]
    shapes = [tuple(vals[i].shape) for i in tensor_pos] + [tuple(c.shape) for _, c in consts]
    dtypes = [vals[i].dtype for i in tensor_pos] + [c.dtype for _, c in consts]
    jshapes, env = jax_dims(shapes, _shape_env(gm))
    # Where each symbol can be read at call time.
    where: dict[sympy.Symbol, tuple[int, int]] = {}
    dim_names: dict[tuple[int, int], str] = {}
    for k, i in enumerate(tensor_pos):
        label = (names or {}).get(placeholders[i].name, placeholders[i].name)
        for a, d in enumerate(vals[i].shape):
            e = expr_of(d)
            if isinstance(e, sympy.Symbol):
                where.setdefault(e, (k, a))
            if isinstance(d, torch.SymInt):
                dim_names[(k, a)] = f"{label}.shape[{a}]"
    for i, v in enumerate(vals):
        if isinstance(v, torch.SymInt) and is_symbolic(v):
            missing = expr_of(v).free_symbols - set(where)
            if missing:
                raise DynamicShapeError(
                    f"hlobridge dynamic shapes: the symbolic size input {placeholders[i].name} "
                    f"({expr_of(v)}) is no dimension of any tensor input; compile with "
                    f"torch.compile(..., dynamic=False)")
    x64 = any(d in X64 for d in dtypes) or any(
        isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].dtype in X64 for n in nodes)
    out_node = next(n for n in nodes if n.op == "output")
    out_args = list(out_node.args[0])  # type: ignore[arg-type]
    pos_of = {n: i for i, n in enumerate(placeholders)}
    outputs: list[tuple[str, Any] | None] = []
    prog_out: list[torch.fx.Node] = []
    for o in out_args:
        if o is None:
            outputs.append(None)
        elif not isinstance(o, torch.fx.Node):
            outputs.append(("size", sympy.Integer(int(o))))
        elif o in pos_of:
            outputs.append(("arg", pos_of[o]))
        elif isinstance(o.meta.get("val"), torch.SymInt):
            outputs.append(("size", expr_of(o.meta["val"])))
        else:
            if o not in prog_out:
                prog_out.append(o)
            outputs.append(("prog", prog_out.index(o)))

    n_in = len(tensor_pos)

    def fn(*arrays: Any) -> list[Any]:
        interp = _Interpreter(gm, env)
        values: dict[torch.fx.Node, Any] = {}
        it = iter(arrays[:n_in])
        for i, n in enumerate(placeholders):
            v = vals[i]
            if isinstance(v, torch.Tensor):
                values[n] = next(it)
            elif isinstance(v, torch.SymInt):
                values[n] = _to_jax_dim(expr_of(v), env)
            else:
                values[n] = v
        for (n, _), a in zip(consts, arrays[n_in:]):
            values[n] = a
        for n in nodes:
            if n.op in ("placeholder", "get_attr", "output"):
                continue
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda x: values[x])
            values[n] = getattr(interp, n.op)(n.target, args, kwargs)
        return [values[o] for o in prog_out]

    fn.__name__ = fn.__qualname__ = "main"
    with _lock, (jax.enable_x64(True) if x64 else contextlib.nullcontext()):
        sds = [jax.ShapeDtypeStruct(s, _jax_dtype(d))  # type: ignore[no-untyped-call]
               for s, d in zip(jshapes, dtypes)]
        try:
            exported = jax.export.export(jax.jit(fn, keep_unused=True))(*sds)
        except DynamicShapeError:
            raise
        except Exception as e:
            raise DynamicShapeError(
                f"hlobridge dynamic shapes: the graph cannot be exported with symbolic sizes "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); compile "
                f"with torch.compile(..., dynamic=False)") from e
        text = exported.mlir_module()
        counters["lowerings"] += 1
    return DynamicModule(text=text, inputs=tensor_pos,
                         constants=[c.detach().contiguous() for _, c in consts],
                         dtypes=dtypes, outputs=outputs, symbols=where, dim_names=dim_names,
                         lower_s=time.perf_counter() - t0)


def _to_jax_dim(e: sympy.Expr, env: dict[sympy.Symbol, Any]) -> Any:
    """A torch size expression over the symbols as a JAX dimension."""
    if isinstance(e, sympy.Integer):
        return int(e)
    if isinstance(e, sympy.Symbol):
        return env[e]
    args = [_to_jax_dim(a, env) for a in e.args]
    if isinstance(e, sympy.Add):
        return functools.reduce(operator.add, args)
    if isinstance(e, sympy.Mul):
        return functools.reduce(operator.mul, args)
    name = type(e).__name__
    if name in ("FloorDiv", "CleanDiv"):
        return args[0] // args[1]
    if name in ("Mod", "PythonMod"):
        return args[0] % args[1]
    raise DynamicShapeError(f"hlobridge dynamic shapes: the size {e} has no JAX form")
