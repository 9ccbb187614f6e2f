"""Torch's symbolic sizes as JAX's, and back.

Dynamo (``dynamic=True``, or a dimension it marked dynamic) gives each
dynamic size a ``sympy`` symbol (``s0``, ``s77``) in a shape environment;
``jax.export`` gives each dimension variable a :class:`jax.export` symbolic
dimension. :func:`jax_dims` builds ONE JAX symbolic scope for a set of torch
sizes, with the value ranges Dynamo recorded for each symbol as JAX
constraints (so that ``jax.export`` emits them as shape assertions);
:func:`torch_size` turns a JAX dimension expression back into a torch size
(``SymInt`` arithmetic on the torch symbols), which is how the fake
implementation of ``call_jax`` keeps its output sizes symbolic.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import jax
import sympy
import torch

from hlobridge._src.errors import DynamicShapeError

__all__ = ["is_symbolic", "expr_of", "jax_dims", "torch_size", "spec_string"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_symbolic(x: Any) -> bool:
    """Whether ``x`` is a ``SymInt`` or a tensor with one in its shape."""
    if isinstance(x, torch.SymInt):
        return not isinstance(x.node.expr, sympy.Integer)
    if isinstance(x, torch.Tensor):
        return any(is_symbolic(d) for d in x.shape)
    return False


def expr_of(d: Any) -> sympy.Expr:
    """The sympy expression of a size (an ``int`` becomes an ``Integer``)."""
    if isinstance(d, torch.SymInt):
        return d.node.expr  # type: ignore[no-any-return]
    return sympy.Integer(int(d))


def spec_string(e: sympy.Expr) -> str:
    """``e`` in ``jax.export.symbolic_shape``'s syntax (``2*s0 + 1``,
    ``floordiv(s0, 2)``, ``mod(s0, 2)``); raises
    :class:`~hlobridge.errors.DynamicShapeError` for what JAX cannot say."""
    if isinstance(e, sympy.Integer):
        return str(int(e))
    if isinstance(e, sympy.Symbol):
        return str(e)
    if isinstance(e, (sympy.Add, sympy.Mul)):
        e = sympy.expand(e)  # JAX's syntax has no parentheses: a sum of products
    if isinstance(e, sympy.Add):
        return " + ".join(spec_string(a) for a in e.args)
    if isinstance(e, sympy.Mul):
        if any(isinstance(a, sympy.Add) for a in e.args):
            raise DynamicShapeError(f"hlobridge dynamic shapes: the symbolic size {e} has no "
                                    f"JAX symbolic form; compile with "
                                    f"torch.compile(..., dynamic=False)")
        return "*".join(spec_string(a) for a in e.args)
    name = type(e).__name__
    if name in ("FloorDiv", "CleanDiv", "IntTrueDiv") and len(e.args) == 2:
        return f"floordiv({spec_string(e.args[0])}, {spec_string(e.args[1])})"
    if name in ("Mod", "PythonMod") and len(e.args) == 2:
        return f"mod({spec_string(e.args[0])}, {spec_string(e.args[1])})"
    if name == "Max" and len(e.args) == 2:
        return f"max({spec_string(e.args[0])}, {spec_string(e.args[1])})"
    if name == "Min" and len(e.args) == 2:
        return f"min({spec_string(e.args[0])}, {spec_string(e.args[1])})"
    if isinstance(e, sympy.Pow) and isinstance(e.args[0], sympy.Symbol) and \
            isinstance(e.args[1], sympy.Integer) and int(e.args[1]) > 0:
        return "*".join([spec_string(e.args[0])] * int(e.args[1]))
    raise DynamicShapeError(f"hlobridge dynamic shapes: the symbolic size {e} has no JAX "
                            f"symbolic form; compile with torch.compile(..., dynamic=False)")


def _constraints(symbols: Iterable[sympy.Symbol], shape_env: Any) -> list[str]:
    """JAX constraints for Dynamo's value range of each symbol (JAX assumes
    ``>= 1`` itself; Dynamo's usual lower bound is 2, as it specialises the
    sizes 0 and 1)."""
    out = []
    ranges = getattr(shape_env, "var_to_range", {}) if shape_env is not None else {}
    for s in sorted(symbols, key=str):
        r = ranges.get(s)
        if r is None:
            continue
        lo, hi = r.lower, r.upper
        if isinstance(lo, sympy.Integer) and int(lo) > 1:
            out.append(f"{s} >= {int(lo)}")
        if isinstance(hi, sympy.Integer) and int(hi) < 2**62:
            out.append(f"{s} <= {int(hi)}")
    return out


def jax_dims(shapes: Sequence[Sequence[Any]], shape_env: Any = None
             ) -> tuple[list[tuple[Any, ...]], dict[sympy.Symbol, Any]]:
    """JAX shapes (symbolic where the torch size is) for torch ``shapes``,
    all in one JAX symbolic scope, and the JAX dimension of every torch
    symbol they mention."""
    exprs = [[expr_of(d) for d in s] for s in shapes]
    symbols: set[sympy.Symbol] = set()
    for s in exprs:
        for e in s:
            symbols |= e.free_symbols  # type: ignore[arg-type]
    if not symbols:
        return [tuple(int(e) for e in s) for s in exprs], {}
    order = sorted(symbols, key=str)
    flat = [spec_string(e) for s in exprs for e in s]
    spec = ", ".join([*(str(s) for s in order), *flat])
    dims = jax.export.symbolic_shape(spec, constraints=_constraints(order, shape_env))
    env = dict(zip(order, dims[:len(order)]))
    it = iter(dims[len(order):])
    out = [tuple(next(it) for _ in s) for s in exprs]
    return out, env


def torch_size(d: Any, env: dict[str, Any]) -> Any:
    """A JAX dimension (an ``int`` or a symbolic expression) as a torch size:
    its variables replaced by ``env[name]`` (``SymInt`` s or ints)."""
    if isinstance(d, int):
        return d
    text = str(d)
    names = {m for m in _NAME.findall(text)} - {"floordiv", "mod", "max", "min", "non_negative"}
    missing = names - set(env)
    if missing:
        raise DynamicShapeError(f"hlobridge dynamic shapes: the size {text} uses "
                                f"{', '.join(sorted(missing))}, which no input carries")
    scope = {"floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b,
             "max": torch.sym_max, "min": torch.sym_min, "non_negative": lambda a: torch.sym_max(a, 0),
             **{n: env[n] for n in names}}
    return eval(text, {"__builtins__": {}}, scope)  # noqa: S307  (JAX's own expression syntax)
