"""``hb.call_torch(fn, *args, **kwargs)``: a torch function or module inside
a JAX program.

How a call works:

1. ``(args, kwargs)`` is flattened with :mod:`jax.tree_util`. Leaves that are
   JAX arrays, tracers, numpy arrays or torch tensors (turned into JAX
   arrays, through DLPack) are the array inputs; every other leaf is
   **static**: passed to ``fn`` as it is and part of the cache key, so it
   must be hashable.
2. The function's :class:`~hlobridge._src.call_torch.capture.TorchFn` is
   looked up by the function object (weakly: the entry goes with the
   function), the pytree structure, the static values, ``module.training``
   for a module and JAX's x64 flag; a new one is made on a miss.
3. The ``TorchFn`` is called through its ``custom_vjp`` /
   ``custom_vmap`` wrapper (:mod:`~hlobridge._src.call_torch.vjp`,
   :mod:`~hlobridge._src.call_torch.embed`), which captures it for the
   arrays' types (cached per signature, then by graph content) and embeds
   the StableHLO into the program being traced.

The output is ``fn``'s output pytree (as :mod:`torch.utils._pytree` flattens
it: tuples, lists, dicts, named tuples, Hugging Face ``ModelOutput`` s) with
each tensor replaced by a JAX array; every leaf must be a tensor.

Like ``jax.jit``, ``fn`` is assumed pure: tensors it closes over (a
module's parameters when the module itself is ``fn``) are read when it is
first captured for a signature, baked into the program as constants, and
get no gradient. Pass them as inputs to train them: :func:`hlobridge.torch_module`.
Without JAX's x64 mode, 64-bit outputs come back as 32-bit arrays (as JAX
itself would make them). Called outside any JAX transformation, ``call_torch``
runs the embedded program eagerly (JAX's op-by-op dispatch of one call).
"""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Callable, Hashable
from typing import Any

import jax
import numpy as np
import torch
import torch.utils._pytree as pytree

from hlobridge._src.call_torch.capture import TorchFn
from hlobridge._src.call_torch.embed import spec_of
from hlobridge._src.call_torch.vjp import differentiable
from hlobridge._src.errors import CallTorchError

__all__ = ["call_torch", "torch_fn"]

_NARROW = {torch.int64: torch.int32, torch.float64: torch.float32,
           torch.complex128: torch.complex64, torch.uint64: torch.uint32}

_tables: dict[int, tuple[Any, dict[Hashable, TorchFn]]] = {}
_tables_lock = threading.Lock()


def _table(owner: Any) -> dict[Hashable, TorchFn]:
    """The ``TorchFn`` table of ``owner``, dropped when ``owner`` dies."""
    oid = id(owner)
    with _tables_lock:
        rec = _tables.get(oid)
        if rec is not None:
            return rec[1]

        def forget(_ref: object) -> None:
            _tables.pop(oid, None)

        try:
            ref: Any = weakref.ref(owner, forget)
        except TypeError:
            ref = owner  # keep it alive so that its id stays unique
        table: dict[Hashable, TorchFn] = {}
        _tables[oid] = (ref, table)
        return table


def _name(fn: Any) -> str:
    if isinstance(fn, torch.nn.Module):
        return type(fn).__name__
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
               or type(fn).__name__)


def _is_array(leaf: Any) -> bool:
    return isinstance(leaf, (jax.Array, jax.core.Tracer, np.ndarray, torch.Tensor))


def _as_jax(leaf: Any) -> Any:
    if isinstance(leaf, torch.Tensor):
        from hlobridge._src.interop import pt_to_jax

        return pt_to_jax(leaf.detach())
    return leaf


def torch_fn(fn: Callable[..., Any], treedef: Any, statics: tuple[Any, ...],
             extra_key: Hashable = ()) -> TorchFn:
    """The ``TorchFn`` of ``fn`` called with arguments of structure
    ``treedef`` (of ``(args, kwargs)``) whose static leaves are ``statics``
    (``None`` where an array goes)."""
    owner, part = (fn.__self__, fn.__func__) if isinstance(fn, types.MethodType) else (fn, None)
    training = getattr(fn, "training", None)  # a module's mode (torch_module's forward too)
    training = training if isinstance(training, bool) else None
    x64 = bool(jax.config.read("jax_enable_x64"))
    key = (part, treedef, statics, training, x64, extra_key)
    try:
        hash(key)
    except TypeError as e:
        raise CallTorchError(f"hb.call_torch: a static (non-array) argument of {_name(fn)} is "
                             f"not hashable: {e}") from e
    table = _table(owner)
    got = table.get(key)
    if got is None:
        got = table[key] = TorchFn(_flat(fn, treedef, statics, x64), (id(owner), key), _name(fn))
        got.jax_cache["out_specs"] = {}
    return got


def _weak(fn: Callable[..., Any]) -> Callable[[], Callable[..., Any]]:
    """A way back to ``fn`` that does not keep its owner alive (the
    ``TorchFn`` lives in the owner's table, which goes with the owner)."""
    owner = fn.__self__ if isinstance(fn, types.MethodType) else fn
    try:
        ref = weakref.ref(owner)
    except TypeError:
        return lambda: fn  # the table keeps such an owner alive anyway
    if isinstance(fn, types.MethodType):
        func = fn.__func__
        return lambda: types.MethodType(func, ref())
    return ref  # type: ignore[return-value]


def _flat(fn: Callable[..., Any], treedef: Any, statics: tuple[Any, ...],
          x64: bool) -> Callable[..., list[torch.Tensor]]:
    out_specs: dict[Any, Any] = {}
    get = _weak(fn)
    name = _name(fn)

    def flat(*tensors: torch.Tensor) -> list[torch.Tensor]:
        it = iter(tensors)
        leaves = [next(it) if s is None else s for s in statics]
        args, kwargs = jax.tree_util.tree_unflatten(treedef, leaves)
        fn = get()
        if fn is None:
            raise CallTorchError(f"hb.call_torch: {name} was garbage-collected")
        out = fn(*args, **kwargs)
        outs, spec = pytree.tree_flatten(out)
        bad = [type(o).__name__ for o in outs if not isinstance(o, torch.Tensor)]
        if bad:
            raise CallTorchError(f"hb.call_torch: {name} returned a {bad[0]} leaf; every "
                                 f"output leaf must be a tensor")
        if not x64:
            outs = [o.to(_NARROW[o.dtype]) if o.dtype in _NARROW else o for o in outs]
        out_specs[_sig(tensors)] = spec
        return outs

    flat.out_specs = out_specs  # type: ignore[attr-defined]
    return flat


def _sig(tensors: Any) -> tuple[Any, ...]:
    return tuple((tuple(int(d) for d in t.shape), t.dtype) for t in tensors)


def call_torch(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Run the torch function or module ``fn(*args, **kwargs)`` as StableHLO
    embedded in the JAX program being traced (``jax.jit``, ``jax.grad``,
    ``jax.vmap``), or eagerly outside one. See the module docs."""
    if not callable(fn):
        raise CallTorchError(f"hb.call_torch: {type(fn).__name__} is not callable")
    with_paths, treedef = jax.tree_util.tree_flatten_with_path((args, kwargs))
    leaves = [leaf for _, leaf in with_paths]
    statics = tuple(None if _is_array(leaf) else leaf for leaf in leaves)
    arrays = [_as_jax(leaf) for leaf in leaves if _is_array(leaf)]
    tfn = torch_fn(fn, treedef, statics)
    # Inputs torch cannot differentiate (a module's buffers, e.g. BatchNorm's
    # running statistics), named by the function itself.
    nondiff = getattr(fn, "nondiff", None)
    if nondiff is not None and "nondiff" not in tfn.jax_cache:
        paths = [p for p, leaf in with_paths if _is_array(leaf)]
        tfn.jax_cache["nondiff"] = frozenset(i for i, p in enumerate(paths) if nondiff(p))
    outs = differentiable(tfn, fn)(*arrays)
    specs = tfn.flat.out_specs  # type: ignore[attr-defined]
    sig = tuple(spec_of(a) for a in arrays)
    spec = specs.get(sig)
    if spec is None:  # traced under another signature's name only (cannot happen today)
        raise CallTorchError(f"hb.call_torch: no output structure recorded for {_name(fn)}")
    return pytree.tree_unflatten(list(outs), spec)
