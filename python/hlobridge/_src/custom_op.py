"""``hlobridge::call_jax``: :func:`hlobridge.call_jax` as a torch custom op,
so that ``torch.compile`` captures a JAX call as ONE graph node.

How it fits together:

- The JAX function is not a tensor, so it cannot be an operator argument.
  Each distinct ``(fn, input pytree structure, static leaves)`` is registered
  once in a process-wide registry under a stable string key
  (``"<qualname>#<n>"``); the op takes ``(key: str, tensors: Tensor[])`` and
  returns ``Tensor[]`` (the output pytree's array leaves in JAX's order:
  dict keys sorted).
- Eager calls keep going straight to :func:`hlobridge._src.jax_bridge.call_jax`
  (its zero-copy hot path is untouched). When Dynamo traces a call to
  ``call_jax`` it uses :func:`_traced_call_jax` instead (registered with
  :func:`torch._dynamo.substitute_in_graph` by :func:`bind`, which
  :mod:`hlobridge._src.jax_bridge` calls when it is imported; this module never
  imports it, so the arrows run one way): the registration runs once at
  trace time, from a :func:`torch._dynamo.comptime` callback that turns the
  traced function argument back into the Python callable
  (:mod:`hlobridge._src.traced_callable`: lambdas, closures, nested
  ``def`` functions, bound methods, ``jax.jit`` and ``jnp`` functions, partials), and
  the graph gets a single ``torch.ops.hlobridge.call_jax`` node, no graph
  break. A closure's captured values are part of its registry identity.
- Eager use never imports ``torch._dynamo`` (it imports sympy and costs
  seconds): :func:`bind` defers the substitution until something imports
  Dynamo (``torch.compile`` does).
- The fake (meta) implementation is :func:`jax.eval_shape`, so Dynamo and
  AOTAutograd know output shapes without running anything.
- The autograd formula is itself a ``call_jax`` of :func:`jax.vjp`: the
  backward graph AOTAutograd builds contains a ``hlobridge::call_jax`` node
  too (key ``"<key>/vjp"``), which the hlobridge backend stitches like any
  other. The backward recomputes the JAX forward (inside XLA) instead of
  saving JAX residuals.

Outside ``torch.compile`` the op also works on its own
(``torch.ops.hlobridge.call_jax(key, tensors)``), running through
``call_jax``'s compiled-program cache.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.utils._pytree as pytree

from hlobridge._src.dynamo.raise_through import passes_through_dynamo
from hlobridge._src.errors import ArgumentError, BridgeError, CapturedTensorError, DtypeError
from hlobridge._src.dtypes import DTYPES, X64, require_torch_dtype
from hlobridge._src.signature import function_name

__all__ = ["JaxFunction", "bind", "explain_trace_error", "lookup", "register", "OP"]

# An output structure template made only of Python constants, so that Dynamo
# can rebuild the pytree in the graph: ("leaf", i) | ("none",) |
# ("tuple", kids) | ("list", kids) | ("dict", keys, kids) |
# ("namedtuple", cls, kids) (Optax states are named tuples).
Template = tuple[Any, ...]


@dataclass(frozen=True)
class JaxFunction:
    """One registered JAX function with a fixed input structure.

    ``flat(*arrays)`` calls the user function with the pytree rebuilt from the
    array leaves and the static leaves, and returns its output's array leaves
    as a list (torch pytree order)."""

    key: str
    name: str
    flat: Callable[..., list[Any]]
    structured: Callable[..., Any]
    """The same call, returning the output pytree unflattened."""
    user: Any = None
    """The user's function (for error messages)."""


@dataclass
class _Signature:
    """What :func:`jax.eval_shape` says about one input signature."""

    out_avals: list[tuple[tuple[int, ...], Any]]
    template: Template


_lock = threading.Lock()
_by_key: dict[str, JaxFunction] = {}
_by_identity: dict[tuple[Any, ...], str] = {}
_signatures: dict[tuple[Any, ...], _Signature] = {}
_templates: dict[str, Template] = {}
_num_inputs: dict[str, int] = {}
# ``hlobridge.call_jax``, set by :func:`bind`: what the op's eager
# implementation runs.
_run: Callable[..., Any] | None = None


def lookup(key: str) -> JaxFunction:
    """The registered function for ``key`` (raises :class:`ArgumentError`)."""
    fn = _by_key.get(key)
    if fn is None:
        raise ArgumentError(f"hlobridge::call_jax: unknown function key {key!r} (registered in "
                            f"another process? keys live in the registry of this process)")
    return fn


def _add(name: str, flat: Callable[..., list[Any]], structured: Callable[..., Any],
         identity: tuple[Any, ...], user: Any = None) -> str:
    with _lock:
        key = _by_identity.get(identity)
        if key is None:
            key = f"{name}#{len(_by_key)}"
            _by_key[key] = JaxFunction(key, name, flat, structured, user)
            _by_identity[identity] = key
        return key


def register(fn: Callable[..., Any], spec: pytree.TreeSpec, statics: tuple[Any, ...],
             fn_identity: Any = None) -> str:
    """Register ``fn`` called on the torch pytree ``spec`` whose leaves are
    ``statics`` with ``None`` in place of each tensor; returns the key. The
    same ``(fn, spec, statics)`` always gets the same key; ``fn_identity``
    (default: ``fn`` itself) stands for ``fn`` in that comparison."""
    try:
        identity = (fn if fn_identity is None else fn_identity, spec, statics)
        hash(identity)
    except TypeError:
        raise ArgumentError("call_jax: non-tensor arguments are static and must be hashable "
                            "(pass arrays as torch tensors)") from None
    is_tensor = [s is None for s in statics]

    def structured(*arrays: Any) -> Any:
        it = iter(arrays)
        full = [next(it) if t else s for t, s in zip(is_tensor, statics)]
        args, kwargs = pytree.tree_unflatten(full, spec)
        return fn(*args, **kwargs)

    def flat(*arrays: Any) -> list[Any]:
        # JAX's leaf order (dict keys sorted), the same as eval_shape's.
        return list(jax.tree_util.tree_leaves(structured(*arrays)))

    flat.__name__ = flat.__qualname__ = "main"
    return _add(function_name(fn), flat, structured, identity, fn)


def _captured_tensor(fn: Any, depth: int = 0) -> str | None:
    """Where ``fn`` holds a torch tensor it would hand to JAX: a closure
    cell, a global its code reads, a ``functools.partial`` argument, an
    attribute of a bound method's object (``None`` if nowhere)."""
    if depth > 3:
        return None
    if isinstance(fn, torch.Tensor):
        return "a tensor"
    func = getattr(fn, "func", None)
    if func is not None and isinstance(getattr(fn, "args", None), tuple):  # functools.partial
        for i, a in enumerate(fn.args):
            if isinstance(a, torch.Tensor):
                return f"partial argument {i}"
        for k, a in (getattr(fn, "keywords", None) or {}).items():
            if isinstance(a, torch.Tensor):
                return f"partial argument {k!r}"
        return _captured_tensor(func, depth + 1)
    owner = getattr(fn, "__self__", None)
    if owner is not None and hasattr(fn, "__func__"):
        for k, a in getattr(owner, "__dict__", {}).items():
            if isinstance(a, torch.Tensor):
                return f"attribute self.{k}"
        return _captured_tensor(fn.__func__, depth + 1)
    code = getattr(fn, "__code__", None)
    if code is None:
        wrapped = getattr(fn, "__wrapped__", None)
        return None if wrapped is None else _captured_tensor(wrapped, depth + 1)
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, torch.Tensor):
            return f"captured variable {name!r}"
    glb = getattr(fn, "__globals__", {})
    for name in code.co_names:
        if isinstance(glb.get(name), torch.Tensor):
            return f"global {name!r}"
    return None


def explain_trace_error(fn: Any, e: BaseException) -> BaseException:
    """The exception to raise for ``e``, raised while JAX traced ``fn``:
    :class:`CapturedTensorError` when ``fn`` closes over a torch tensor (JAX
    then fails on a tracer and a Tensor); otherwise ``e`` itself, with the
    notes hlobridge added (which input shapes JAX traced) also written into
    its message, so that ``str(e)`` shows them (``__notes__`` keeps them)."""
    if isinstance(e, BridgeError):
        return e
    where = _captured_tensor(fn)
    if where is not None:
        return CapturedTensorError(
            f"call_jax: the JAX function {function_name(fn)} closes over a torch.Tensor "
            f"({where}); JAX cannot use a torch tensor inside its program. Pass it as an "
            f"argument instead: call_jax(fn, x, t) with fn(x, t)  [JAX said: "
            f"{type(e).__name__}: {e}]")
    notes = [n for n in getattr(e, "__notes__", []) if n.startswith("hlobridge")]
    if notes and e.args and isinstance(e.args[0], str):
        e.args = ("\n".join([e.args[0], *notes]), *e.args[1:])
    return e


def _vjp_key(key: str) -> str:
    """The key of ``key``'s VJP: ``flat(*primals, *cotangents)`` returns the
    cotangent of every primal (float0 zeros for non-float primals)."""
    base = lookup(key)
    n = _num_inputs[key]

    def vjp(*arrays: Any) -> list[Any]:
        primals, cts = arrays[:n], arrays[n:]
        out, pull = jax.vjp(base.flat, *primals)
        it = iter(cts)
        full = [next(it) if jnp.issubdtype(o.dtype, jnp.inexact)
                else np.zeros(o.shape, jax.dtypes.float0) for o in out]
        return [g if jnp.issubdtype(p.dtype, jnp.inexact) else jnp.zeros(p.shape, p.dtype)
                for g, p in zip(pull(full), primals)]

    vjp.__name__ = vjp.__qualname__ = "main"
    return _add(f"{base.name} (vjp)", vjp, vjp, ("vjp", key))


def _jax_dtype(dt: torch.dtype) -> Any:
    entry = DTYPES.get(dt)
    if entry is None:
        raise DtypeError(f"call_jax: unsupported tensor dtype {dt}")
    return entry[1]


def _template(tree: Any, counter: list[int]) -> Template:
    if isinstance(tree, jax.ShapeDtypeStruct):
        counter[0] += 1
        return ("leaf", counter[0] - 1)
    if tree is None:
        return ("none",)
    if isinstance(tree, tuple) and not hasattr(tree, "_fields"):
        return ("tuple", tuple(_template(t, counter) for t in tree))
    if isinstance(tree, tuple):
        return ("namedtuple", type(tree), tuple(_template(t, counter) for t in tree))
    if isinstance(tree, list):
        return ("list", tuple(_template(t, counter) for t in tree))
    if isinstance(tree, dict):
        keys = tuple(sorted(tree))  # JAX's leaf order
        return ("dict", keys, tuple(_template(tree[k], counter) for k in keys))
    raise ArgumentError(f"call_jax under torch.compile: the JAX function returns a "
                        f"{type(tree).__qualname__}, a pytree node torch cannot rebuild; return "
                        f"arrays in tuples, named tuples, lists or dicts")


def signature(key: str, specs: Sequence[tuple[tuple[int, ...], torch.dtype]]) -> _Signature:
    """Output avals and structure template of ``key`` on inputs of these
    ``(shape, dtype)``, from :func:`jax.eval_shape` (cached)."""
    ck = (key, tuple((tuple(s), d) for s, d in specs))
    sig = _signatures.get(ck)
    if sig is not None:
        return sig
    fn = lookup(key)
    sds = [jax.ShapeDtypeStruct(tuple(s), _jax_dtype(d)) for s, d in specs]  # type: ignore[no-untyped-call]
    x64 = any(d in X64 for _, d in specs)
    with jax.enable_x64(True) if x64 else contextlib.nullcontext():
        try:
            out_tree = jax.eval_shape(fn.structured, *sds)
        except Exception as e:
            if not isinstance(e, BridgeError):
                shapes = ", ".join(f"{d}{list(s)}" for s, d in specs)
                e.add_note(f"hlobridge.call_jax: raised while JAX traced {fn.name} for tensor "
                           f"inputs ({shapes})")
            err = explain_trace_error(fn.user, e)
            if err is e:
                raise
            raise err from e
    leaves = jax.tree_util.tree_leaves(out_tree)
    out_avals = [(tuple(o.shape), o.dtype) for o in leaves]
    for _, dt in out_avals:
        require_torch_dtype(dt, "call_jax")
    sig = _Signature(out_avals, _template(out_tree, [0]))
    _signatures[ck] = sig
    _templates.setdefault(key, sig.template)
    _num_inputs.setdefault(key, len(specs))
    return sig


@torch.library.custom_op("hlobridge::call_jax", mutates_args=())
def _call_jax_op(key: str, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Run the registered JAX function ``key`` on ``tensors`` (eager impl)."""
    fn = lookup(key)
    if key not in _templates:
        # Run for real while traced (make_fx(tracing_mode="real")): the fake
        # implementation never ran, so record the output structure here.
        signature(key, [(tuple(t.shape), t.dtype) for t in tensors])
    if _run is None:
        raise ArgumentError("hlobridge::call_jax: the op runs through hlobridge.call_jax; import it "
                            "first (hlobridge.call_jax)")
    with torch.no_grad():
        outs = _run(fn.flat, *[t.detach() for t in tensors])
    return list(outs)


OP = torch.ops.hlobridge.call_jax.default


def _symbolic_signature(key: str, tensors: Sequence[torch.Tensor]
                        ) -> list[tuple[tuple[Any, ...], Any]]:
    """Output sizes (symbolic) and dtypes of ``key`` on fake tensors with
    symbolic sizes (``torch.compile(dynamic=True)``), recording the output
    structure: :mod:`hlobridge._src.dynamic.fake`."""
    from hlobridge._src.dynamic.fake import symbolic_outputs

    tree, outs = symbolic_outputs(lookup(key), tensors, _jax_dtype,
                                  any(t.dtype in X64 for t in tensors))
    for _, dt in outs:
        require_torch_dtype(dt, "call_jax")
    _templates.setdefault(key, _template(tree, [0]))
    _num_inputs.setdefault(key, len(tensors))
    return outs


@_call_jax_op.register_fake
def _call_jax_fake(key: str, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    from hlobridge._src.dynamic.fake import any_symbolic

    if tensors and any_symbolic(tensors):
        return [tensors[0].new_empty(shape, dtype=require_torch_dtype(dt, "call_jax"))
                for shape, dt in _symbolic_signature(key, tensors)]
    # int() specializes a symbolic size (torch.compile(dynamic=True)) to its
    # value, with a guard: a JAX program has static shapes.
    sig = signature(key, [(tuple(int(d) for d in t.shape), t.dtype) for t in tensors])
    if not tensors:
        raise ArgumentError("call_jax under torch.compile needs at least one tensor argument")
    ref = tensors[0]
    return [ref.new_empty(shape, dtype=require_torch_dtype(dt, "call_jax"))
            for shape, dt in sig.out_avals]


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    key, tensors = inputs
    ctx.key = key
    ctx.save_for_backward(*tensors)


def _backward(ctx: Any, grads: list[torch.Tensor | None]) -> tuple[None, list[torch.Tensor | None]]:
    primals = list(ctx.saved_tensors)
    from hlobridge._src.dynamic.fake import any_symbolic

    avals = (_symbolic_signature(ctx.key, primals) if any_symbolic(primals) else
             signature(ctx.key, [(tuple(t.shape), t.dtype) for t in primals]).out_avals)
    cts: list[torch.Tensor] = []
    for g, (shape, dt) in zip(grads, avals):
        if not jnp.issubdtype(dt, jnp.inexact):
            continue
        cts.append(g if g is not None
                   else primals[0].new_zeros(shape, dtype=require_torch_dtype(dt, "call_jax")))
    outs = torch.ops.hlobridge.call_jax(_vjp_key(ctx.key), [*primals, *cts])
    return None, [g if p.dtype.is_floating_point or p.dtype.is_complex else None
                  for g, p in zip(outs, primals)]


_call_jax_op.register_autograd(_backward, setup_context=_setup_context)


def _set_local(ctx: Any, name: str, value: Any) -> None:
    """Bind the traced frame's local ``name`` to the constant ``value``."""
    from torch._dynamo.variables.builder import SourcelessBuilder

    tx = ctx._i_will_not_complain_if_bc_breaks_InstructionTranslator()
    tx.symbolic_locals[name] = SourcelessBuilder.create(tx, value)


@passes_through_dynamo  # an hlobridge error keeps its class through torch.compile
def _comptime_register(ctx: Any) -> None:
    """Dynamo compile time, in :func:`traced_call`'s frame: register the
    traced ``fn`` and set the local ``key``."""
    from hlobridge._src.traced_callable import materialize

    tx = ctx._i_will_not_complain_if_bc_breaks_InstructionTranslator()
    fn_vt = ctx.get_local("fn")._i_will_not_complain_if_bc_breaks_VariableTracker()
    fn, identity = materialize(tx, fn_vt)
    spec = ctx.get_local("spec").as_python_constant()
    statics_vt = ctx.get_local("statics")._i_will_not_complain_if_bc_breaks_VariableTracker()
    statics, statics_id = materialize(tx, statics_vt, "static argument")
    key = register(fn, spec, tuple(statics), ("traced", identity, statics_id))
    # Trace the JAX function now, on the fake inputs' shapes: an error here
    # reaches the user by name (Dynamo wraps errors of the op's fake
    # implementation in a TorchRuntimeError that drops them). int()
    # specializes a symbolic size (dynamic=True), with a guard.
    tensors_vt = ctx.get_local("tensors")._i_will_not_complain_if_bc_breaks_VariableTracker()
    fakes = [t.as_proxy().node.meta["example_value"] for t in tensors_vt.items]
    from hlobridge._src.dynamic.fake import any_symbolic

    if any_symbolic(fakes):  # sizes stay symbolic: hlobridge._src.dynamic
        _symbolic_signature(key, fakes)
    else:
        signature(key, [(tuple(int(d) for d in f.shape), f.dtype) for f in fakes])
    _set_local(ctx, "key", key)


def _comptime_template(ctx: Any) -> None:
    """Dynamo compile time: set the local ``template`` to the output
    structure of ``key``, which the fake implementation recorded when the op
    was traced just before."""
    _set_local(ctx, "template", _templates[ctx.get_local("key").as_python_constant()])


def _fill(t: Template, outs: Sequence[torch.Tensor]) -> Any:
    kind = t[0]
    if kind == "leaf":
        return outs[t[1]]
    if kind == "none":
        return None
    if kind == "dict":
        return {k: _fill(c, outs) for k, c in zip(t[1], t[2])}
    if kind == "namedtuple":
        return t[1](*[_fill(c, outs) for c in t[2]])
    kids = [_fill(c, outs) for c in t[1]]
    return tuple(kids) if kind == "tuple" else kids


def _traced_call_jax(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """What Dynamo traces in place of :func:`hlobridge.call_jax`: one
    ``hlobridge::call_jax`` node, outputs rebuilt into ``fn``'s pytree."""
    return traced_call(fn, args, kwargs)


def traced_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``call_jax(fn, *args, **kwargs)`` as one ``hlobridge::call_jax`` op
    call: what tracers (Dynamo, ``make_fx``) record. Also the route of
    :func:`hlobridge.call_jax` on traced tensors (fake, functional or
    proxied), e.g. inside :func:`hlobridge.compile_train_step`."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    statics = tuple(None if isinstance(x, torch.Tensor) else x for x in leaves)
    if torch.compiler.is_dynamo_compiling():
        from torch._dynamo.comptime import comptime

        key = ""
        comptime(_comptime_register)
        outs = torch.ops.hlobridge.call_jax(key, tensors)
        template: Template = ()
        comptime(_comptime_template)
        return _fill(template, outs)
    key = register(fn, spec, statics)
    outs = torch.ops.hlobridge.call_jax(key, tensors)
    return _fill(_templates[key], outs)


def bind(call_jax: Callable[..., Any]) -> None:
    """Wire the op to :func:`hlobridge.call_jax` (``hlobridge._src.jax_bridge``
    calls this once, when it is imported): the op's eager implementation
    runs through ``call_jax``, and Dynamo traces ``call_jax`` as one
    ``hlobridge::call_jax`` node (:func:`torch._dynamo.substitute_in_graph`)."""
    global _run
    if _run is not None:
        return
    _run = call_jax
    if "torch._dynamo" in sys.modules:
        _substitute()
    else:
        sys.meta_path.insert(0, _OnDynamoImport())


def _substitute() -> None:
    assert _run is not None
    torch._dynamo.substitute_in_graph(_run)(_traced_call_jax)


class _OnDynamoImport(importlib.abc.MetaPathFinder):
    """Runs :func:`_substitute` right after ``torch._dynamo`` is imported
    (and then leaves ``sys.meta_path``)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch._dynamo":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        load = loader.exec_module

        def exec_module(module: Any) -> None:
            load(module)
            _substitute()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
