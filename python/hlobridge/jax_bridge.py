"""``call_jax``: run a JAX function on eager torch tensors through hlobridge's
PJRT runtime, zero-copy in and out.

How a call works:

1. ``(args, kwargs)`` is flattened with :mod:`jax.tree_util`. Leaves that are
   ``torch.Tensor`` are the array inputs; every other leaf (Python scalars,
   strings, ``None``-free config values, ...) is **static**: it is baked into
   the program and is part of the cache key, so it must be hashable.
2. The per-function cache is looked up with the function, the pytree
   structure, each tensor's dtype and shape, the static values and the JAX
   x64 flag. On a hit nothing is traced or lowered.
3. On a miss the function is lowered with ``jax.jit(..., keep_unused=True)``
   for the runtime's platform and the StableHLO text is compiled through
   :func:`hlobridge._native.compile`, whose cache is keyed by the module's
   content (text + compile options). A function defined again with the same
   body lowers to the same text and reuses the executable: a new function
   object costs one lowering, never a second compilation.
4. Inputs are handed to PJRT as pointers; 64-byte aligned tensors (every
   fresh torch CPU allocation) are used in place, others are copied (and
   counted). Outputs come back as DLPack capsules: the returned tensors alias
   PJRT's buffers (``data_ptr()`` equals the buffer address in the receipt).

Rules:

- Tensors must be on the CPU (the runtime's platform); others raise
  :class:`~hlobridge.ArgumentError`. Non-contiguous tensors (and complex
  tensors with a lazy conjugate/negative bit) are copied explicitly with
  ``.contiguous()``; the copy shows up in the receipt's ``input_copies`` and in
  ``stats()["contiguous_copies"]``.
- Supported dtypes: float16/32/64, bfloat16, int8/16/32/64, uint8/16/32/64,
  bool, complex64/128; others raise :class:`~hlobridge.DtypeError`.
- A new shape, dtype or static value means a new program: it is lowered and
  compiled once, then cached like the first.
- 64-bit inputs are lowered with ``jax_enable_x64`` turned on for that
  lowering (JAX would otherwise silently truncate them); otherwise the
  ambient JAX config applies.
- Like ``jax.jit``, the function is assumed pure: values it closes over are
  captured when it is first lowered for a signature.
- Gradients flow: when grad mode is on and an argument requires grad, the
  call becomes a ``torch.autograd.Function`` whose forward and backward are two
  more compiled JAX programs built with ``jax.vjp`` (see
  :mod:`hlobridge.autograd`). Otherwise outputs do not require grad.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax import tree_util
from jax._src import config as jax_config
from torch.utils.dlpack import from_dlpack as _from_dlpack

from hlobridge import _native
from hlobridge._native import ArgumentError, BridgeError, DtypeError, OutputError
from hlobridge.receipt import CacheOutcome, Segment, _record, cache_accounting

__all__ = ["call_jax", "clear_cache", "stats", "reset_stats"]

_perf = time.perf_counter
_flatten = tree_util.tree_flatten
_Tensor = torch.Tensor
_LEAF = tree_util.tree_structure(0)

# torch dtype -> (MLIR element type, JAX dtype)
_DTYPES: dict[torch.dtype, tuple[str, Any]] = {
    torch.float32: ("f32", jnp.float32),
    torch.float64: ("f64", jnp.float64),
    torch.bfloat16: ("bf16", jnp.bfloat16),
    torch.float16: ("f16", jnp.float16),
    torch.int8: ("i8", jnp.int8),
    torch.int16: ("i16", jnp.int16),
    torch.int32: ("i32", jnp.int32),
    torch.int64: ("i64", jnp.int64),
    torch.uint8: ("ui8", jnp.uint8),
    torch.uint16: ("ui16", jnp.uint16),
    torch.uint32: ("ui32", jnp.uint32),
    torch.uint64: ("ui64", jnp.uint64),
    torch.bool: ("i1", jnp.bool_),
    torch.complex64: ("complex<f32>", jnp.complex64),
    torch.complex128: ("complex<f64>", jnp.complex128),
}
_CODES: dict[torch.dtype, int] = {t: _native.ELEMENT_TYPES[m] for t, (m, _) in _DTYPES.items()}
_X64 = frozenset({torch.float64, torch.int64, torch.uint64, torch.complex128})
_COMPLEX = frozenset({torch.complex64, torch.complex128})
# dtypes that never need a second look on the hot path
_PLAIN = frozenset(_DTYPES) - _COMPLEX
_OUT_DTYPES = frozenset(np.dtype(j) for _, j in _DTYPES.values())
_STRIDED = torch.strided
_FLOAT8 = frozenset(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                                 "float8_e5m2fnuz") if hasattr(torch, n))
# What a function may return as a leaf: arrays (tracers while traced), numpy
# values and Python numbers (which JAX turns into 0-d arrays).
_OUT_LEAF_TYPES = (jax.Array, jax.core.Tracer, np.ndarray, np.generic, bool, int, float, complex)

_counter_lock = threading.Lock()
_contiguous_copies = 0


@dataclass(frozen=True, slots=True)
class _Entry:
    """A compiled signature of one function."""

    exe: _native.Executable
    shapes: list[tuple[int, ...]]
    codes: list[int]
    out_tree: Any
    segments: tuple[Segment, ...]
    platform: str
    outcome: CacheOutcome
    lower_s: float
    """Seconds spent lowering (for torch_xla calls: capturing and stitching)."""
    compile_s: float
    num_pending: int = 0
    """torch_xla calls: how many leading outputs are pending inputs' values."""


# id(owner) -> (weakref to owner, or owner itself if it cannot be weakly
# referenced, {key: _Entry, or an autograd plan for keys with a grad mask}). The weakref callback drops the table when the
# owner dies, before its id can be reused.
_fn_tables: dict[int, tuple[Any, dict[Any, Any]]] = {}


def _table(owner: Any) -> dict[Any, Any]:
    rec = _fn_tables.get(id(owner))
    if rec is not None:
        return rec[1]
    oid = id(owner)
    ref: Any

    def forget(_ref: object) -> None:
        _fn_tables.pop(oid, None)
        _native.fast_forget(oid)

    try:
        ref = weakref.ref(owner, forget)
    except TypeError:
        ref = owner  # keep it alive so that its id stays unique
    table: dict[Any, Any] = {}
    _fn_tables[oid] = (ref, table)
    return table


# Compiled signatures inherited through fork(): their executables belong to
# the parent's PJRT client, which a child must never use or destroy (see
# hlobridge._native's runtime docs). Kept alive here, never freed.
_inherited_tables: list[dict[int, tuple[Any, dict[Any, Any]]]] = []


def _forget_programs_after_fork() -> None:
    """``os.register_at_fork(after_in_child=...)``: start the child with no
    compiled signatures, so that its calls compile on its own client."""
    _inherited_tables.append(dict(_fn_tables))
    _fn_tables.clear()


os.register_at_fork(after_in_child=_forget_programs_after_fork)

_MISS = object()
_fast_call = _native.fast_call
_native.fast_init(torch.Tensor, torch.nn.Parameter, types.MethodType, torch.is_grad_enabled,
                  torch._C._from_dlpack, jax_config.enable_x64, _MISS)


def call_jax(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Run ``fn(*args, **kwargs)`` as a compiled JAX program on torch tensors.

    ``args``/``kwargs`` are pytrees whose ``torch.Tensor`` leaves become JAX
    arrays inside ``fn``; other leaves are static. Returns ``fn``'s output
    pytree with every array leaf as a ``torch.Tensor`` that aliases the PJRT
    output buffer. See the module docs for the rules, and
    :func:`hlobridge.last_receipt` for what the call did.
    """
    if not kwargs:
        try:
            out = _fast_call(fn, args)
        except RuntimeError:
            # torch refuses a query the fast path makes (``shape`` of a nested
            # tensor, ``is_contiguous()`` of a sparse one): the general path
            # names the problem.
            out = _MISS
        if out is not _MISS:
            return out
    return _call_general(fn, args, kwargs)


_PROXY_KEY = torch._C._TorchDispatchModeKey.PROXY


def _is_tracing(leaves: list[Any]) -> bool:
    """Whether this call is being traced rather than run: a tensor leaf is
    fake (also under functional or functorch wrappers) or a proxy mode
    (``make_fx``) is active. Traced calls become one ``hlobridge::call_jax``
    op, so that the caller's graph holds the JAX function as a node. Other
    tensor subclasses are real data and run."""
    from torch._subclasses.fake_tensor import is_fake

    for leaf in leaves:
        if isinstance(leaf, _Tensor) and type(leaf) is not _Tensor and \
                type(leaf) is not torch.nn.Parameter and is_fake(leaf):
            return True
    return torch._C._get_dispatch_mode(_PROXY_KEY) is not None


def _call_general(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Every call the native fast path does not serve (see the module docs)."""
    global _contiguous_copies
    t0 = _perf()
    leaves, treedef = _flatten((args, kwargs))
    if _is_tracing(leaves):
        from hlobridge.custom_op import traced_call
        return traced_call(fn, args, kwargs)
    sig: list[Any] = []
    ins: list[torch.Tensor] = []
    py_copies = 0
    needs_grad = False
    grad = torch.is_grad_enabled()
    for leaf in leaves:
        if isinstance(leaf, _Tensor):
            dt = leaf.dtype
            if (dt not in _PLAIN or not leaf.is_cpu or leaf.layout is not _STRIDED
                    or leaf.is_nested or not leaf.is_contiguous()
                    or (grad and leaf.requires_grad)):
                if leaf.device.type == "xla":
                    from hlobridge.lazy import call_jax_lazy
                    return call_jax_lazy(fn, leaves, treedef, t0)
                leaf, copied, track = _check_tensor(leaf, grad)
                py_copies += copied
                needs_grad |= track
            sig.append((dt, leaf.shape))
            ins.append(leaf)
        else:
            sig.append((type(leaf), leaf))
    if isinstance(fn, types.MethodType):
        owner, sub = fn.__self__, fn.__func__
    else:
        owner, sub = fn, None
    x64 = jax.config.read("jax_enable_x64")  # type: ignore[no-untyped-call]
    key = (sub, treedef, tuple(sig), x64)
    try:
        entry = _table(owner).get(key)
    except TypeError:
        raise _unhashable(leaves) from None
    if needs_grad:
        return call_with_grad(fn, owner, key, treedef, leaves)
    built = None
    if entry is None:
        entry = built = _build(fn, treedef, leaves)
        _table(owner)[key] = entry
        if not kwargs and not py_copies and len(ins) == len(leaves) == len(args):
            _register_fast(fn, x64, ins, entry)
    outcome, lower_s, compile_s, hits, compiles = cache_accounting(built)
    caps, out_ptrs, views, copies, run_s = _native.execute(
        entry.exe, [t.data_ptr() for t in ins], entry.shapes, entry.codes, ins)
    result = entry.out_tree.unflatten([_from_dlpack(c) for c in caps])
    if py_copies:
        with _counter_lock:
            _contiguous_copies += py_copies
    _record((entry.platform, compiles, hits, outcome, entry.segments, views - py_copies,
             copies + py_copies, tuple(out_ptrs), lower_s, compile_s, run_s, _perf() - t0))
    return result


def _register_fast(fn: Callable[..., Any], x64: bool, ins: list[torch.Tensor],
                   entry: _Entry) -> None:
    """Hand a signature whose arguments are all plain tensors to the native
    fast path, which serves later calls without entering Python."""
    if any(t.dtype not in _PLAIN for t in ins) or entry.out_tree.num_leaves == 0:
        return
    single = entry.out_tree == _LEAF
    _native.fast_register(fn, x64, [t.dtype for t in ins], entry.codes, entry.shapes, entry.exe,
                          None if single else entry.out_tree, entry.segments, entry.platform)


def _check_tensor(t: torch.Tensor, grad: bool) -> tuple[torch.Tensor, int, bool]:
    """The slow path for one tensor: raise on what cannot be used, copy what
    must be made dense. Returns the tensor to use, 1 if it is a copy, and
    whether autograd must track the call."""
    if t.is_nested:
        raise ArgumentError("call_jax: nested tensors are not supported; pass the components "
                            "(t.unbind()) or a padded tensor (t.to_padded_tensor(0.0))")
    if t.layout is not _STRIDED:
        raise ArgumentError(f"call_jax: {t.layout} tensors are not supported; pass a dense "
                            f"tensor (t.to_dense())")
    dt = t.dtype
    if dt not in _CODES:
        hint = ""
        if dt in _FLOAT8:
            hint = (f"; pass t.view(torch.uint8) and convert inside the function with "
                    f"jax.lax.bitcast_convert_type(x, jnp.{str(dt).split('.')[-1]})")
        raise DtypeError(f"call_jax: unsupported tensor dtype {dt} (supported: "
                         f"{', '.join(str(d) for d in _DTYPES)}){hint}")
    if not t.is_cpu:
        raise ArgumentError(f"call_jax: tensor on device {t.device}, but the hlobridge runtime "
                            f"is the CPU plugin; move it with .cpu()")
    track = grad and t.requires_grad
    if track and dt in _COMPLEX:
        raise ArgumentError("call_jax: gradients of complex tensors are not supported; pass "
                            ".detach()ed tensors or call under torch.no_grad()")
    if not t.is_contiguous() or (dt in _COMPLEX and (t.is_conj() or t.is_neg())):
        return t.detach().resolve_conj().resolve_neg().contiguous(), 1, track
    return t, 0, track


def _rebuild(fn: Callable[..., Any], treedef: Any, leaves: list[Any]) -> Callable[..., Any]:
    """``main(*arrays)``: ``fn`` called on the pytree ``treedef`` with the
    tensor leaves replaced by ``arrays`` and the static leaves kept. Named
    ``main`` so that the lowered module does not depend on ``fn``'s name."""
    is_tensor = [isinstance(leaf, _Tensor) for leaf in leaves]
    statics = [None if t else leaf for t, leaf in zip(is_tensor, leaves)]

    def main(*arrays: Any) -> Any:
        it = iter(arrays)
        full = [next(it) if t else s for t, s in zip(is_tensor, statics)]
        a, kw = tree_util.tree_unflatten(treedef, full)
        out = fn(*a, **kw)
        _check_outputs(fn, out)
        return out

    main.__name__ = main.__qualname__ = "main"
    return main


def _check_outputs(fn: Callable[..., Any], out: Any) -> None:
    """Raise :class:`OutputError` for a result leaf torch cannot receive."""
    for path, leaf in tree_util.tree_flatten_with_path(out)[0]:
        if not isinstance(leaf, _OUT_LEAF_TYPES):
            where = f" at {tree_util.keystr(path)}" if path else ""
            raise OutputError(f"call_jax: {_name(fn)} returned a {type(leaf).__qualname__}"
                              f"{where}, which is not an array; return arrays or numbers only "
                              f"(keep other values outside the function)")


def _name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn))


@dataclass(frozen=True, slots=True)
class Lowered:
    """One signature of a JAX function lowered to StableHLO text."""

    text: str
    out_tree: Any
    lower_s: float
    jaxpr: Any
    """The traced ``ClosedJaxpr`` (to find embedded Pallas kernels)."""


def lower(fn: Callable[..., Any], treedef: Any, leaves: list[Any], platform: str) -> Lowered:
    """Lower ``fn`` for the signature given by ``treedef`` and ``leaves``
    (tensor leaves give shapes and dtypes; other leaves are static) for
    ``platform``, with x64 turned on when a 64-bit input needs it. Raises
    :class:`DtypeError` for outputs torch cannot receive."""
    tensors = [leaf for leaf in leaves if isinstance(leaf, _Tensor)]
    main = _rebuild(fn, treedef, leaves)
    sds = [jax.ShapeDtypeStruct(tuple(t.shape), _DTYPES[t.dtype][1])  # type: ignore[no-untyped-call]
           for t in tensors]
    x64 = jax.config.read("jax_enable_x64")  # type: ignore[no-untyped-call]
    need_x64 = not x64 and any(t.dtype in _X64 for t in tensors)
    from hlobridge.pallas_auto import lower_traced  # cpu: Pallas kernels lower in interpret mode

    t0 = _perf()
    with jax.enable_x64(True) if need_x64 else contextlib.nullcontext():
        try:
            traced = jax.jit(main, keep_unused=True).trace(*sds)
        except Exception as e:
            if not isinstance(e, BridgeError):
                # The user's own error keeps its type; say where it came from.
                shapes = ", ".join(f"{t.dtype}{list(t.shape)}" for t in tensors)
                e.add_note(f"hlobridge.call_jax: raised while JAX traced {_name(fn)} for "
                           f"tensor inputs ({shapes})")
            raise
        lowered = lower_traced(traced, platform)
        text = lowered.as_text()
    lower_s = _perf() - t0
    out_tree = lowered.out_tree
    for i, info in enumerate(tree_util.tree_leaves(lowered.out_info)):
        if np.dtype(info.dtype) not in _OUT_DTYPES:
            raise DtypeError(f"call_jax: output {i} has dtype {info.dtype}, which torch cannot "
                             f"receive (supported: {', '.join(str(d) for d in _DTYPES)})")
    return Lowered(text, out_tree, lower_s, traced.jaxpr)


def segment_of(fn: Callable[..., Any], low: Lowered, platform: str, fingerprint: str,
               num_inputs: int, num_outputs: int) -> Segment:
    """The receipt segment of a lowered function: producer ``pallas`` (with
    its kernels) when it embeds a Pallas kernel, else ``jax``."""
    from hlobridge.pallas import kernels_in
    from hlobridge.stitching import KernelSegment

    kernels = kernels_in(low.jaxpr, low.text, platform)
    if kernels:
        return KernelSegment(name=_name(fn), producer="pallas", fingerprint=fingerprint,
                             num_inputs=num_inputs, num_outputs=num_outputs, kernels=kernels)
    return Segment(name=_name(fn), producer="jax", fingerprint=fingerprint,
                   num_inputs=num_inputs, num_outputs=num_outputs)


def _build(fn: Callable[..., Any], treedef: Any, leaves: list[Any]) -> _Entry:
    """Lower ``fn`` for this signature and compile it (or find it compiled)."""
    tensors = [leaf for leaf in leaves if isinstance(leaf, _Tensor)]
    platform = _native.runtime().platform
    low = lower(fn, treedef, leaves, platform)
    out_tree = low.out_tree
    exe, hit = _native.compile(low.text)
    if exe.num_outputs != out_tree.num_leaves:
        raise ArgumentError(f"call_jax: the compiled program has {exe.num_outputs} outputs but "
                            f"the function returns {out_tree.num_leaves} arrays")
    seg = segment_of(fn, low, platform, exe.fingerprint, len(tensors), exe.num_outputs)
    return _Entry(exe=exe, shapes=[tuple(t.shape) for t in tensors],
                  codes=[_CODES[t.dtype] for t in tensors], out_tree=out_tree, segments=(seg,), platform=platform,
                  outcome="content" if hit else "miss", lower_s=low.lower_s,
                  compile_s=0.0 if hit else exe.compile_time_s)


def _unhashable(leaves: list[Any]) -> ArgumentError:
    for leaf in leaves:
        if isinstance(leaf, _Tensor):
            continue
        try:
            hash(leaf)
        except TypeError:
            kind = type(leaf).__module__ + "." + type(leaf).__qualname__
            hint = (" (pass arrays as torch tensors, e.g. torch.from_numpy(a) or "
                    "hlobridge.jax_to_pt(a))" if hasattr(leaf, "__array__") else "")
            return ArgumentError(f"call_jax: non-tensor arguments are static and must be "
                                 f"hashable; got an unhashable {kind}{hint}")
    return ArgumentError("call_jax: the arguments cannot be used as a cache key")


def clear_cache() -> None:
    """Forget every compiled signature (per-function tables and the native
    compile cache). Tensors returned earlier stay valid."""
    _fn_tables.clear()
    _native.fast_clear()
    _native.clear_compile_cache()


def stats() -> dict[str, int]:
    """Process-wide counters: the native runtime's (``input_views``,
    ``input_copies``, ``input_copied_bytes``, ``outputs``, ``compiles``,
    ``cache_hits``, ``executions``) plus ``contiguous_copies`` (inputs that
    ``call_jax`` made contiguous before handing them over)."""
    d = _native.stats()
    d["contiguous_copies"] = _contiguous_copies
    return d


def reset_stats() -> None:
    """Reset every counter of :func:`stats` to zero."""
    global _contiguous_copies
    _native.reset_stats()
    with _counter_lock:
        _contiguous_copies = 0


from hlobridge.autograd import call_with_grad  # noqa: E402  (imports this module)
