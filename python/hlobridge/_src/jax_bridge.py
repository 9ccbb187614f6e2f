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
   body lowers to the same text and reuses the executable while another
   holder keeps it, or while it is among the most recently used
   (``HLOBRIDGE_MEMORY_CACHE_ENTRIES``): a new function object costs one
   lowering, not a second compilation (past that, the disk cache loads it).
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
  :mod:`hlobridge._src.autograd`). Otherwise outputs do not require grad.

Where the pieces live: this module holds ``call_jax``'s dispatch (native fast
path, general path, and the routes to :mod:`hlobridge._src.autograd`,
:mod:`hlobridge._src.lazy` and :mod:`hlobridge._src.custom_op`). What those paths share
lives in leaf modules that import none of them: dtype tables in
:mod:`hlobridge._src.dtypes`, pytree rebuilding and function names in
:mod:`hlobridge._src.signature`, the per-function entry tables and the native fast
path's sentinel in :mod:`hlobridge._src.entry_cache`, lowering in
:mod:`hlobridge._src.lowering`. The routes never import this module: autograd
gets ``call_jax`` as an argument, the custom op through
:func:`hlobridge._src.custom_op.bind`.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable
from typing import Any

import jax
import torch
from jax import tree_util
from torch.utils.dlpack import from_dlpack as _from_dlpack

from hlobridge import _native
from hlobridge._src import custom_op, entry_cache
from hlobridge._src.errors import ArgumentError, DtypeError
from hlobridge._src.autograd import call_with_grad
from hlobridge._src.dtypes import CODES, COMPLEX, DTYPES, FLOAT8, PLAIN
from hlobridge._src.entry_cache import MISS, Entry, fast_call, table
from hlobridge._src.lowering import lower, segment_of
from hlobridge._src.receipt import cache_accounting, run_and_record
from hlobridge._src.routing import for_device
from hlobridge._src.signature import unhashable_error

__all__ = ["call_jax", "clear_cache", "stats", "reset_stats"]

_perf = time.perf_counter
_flatten = tree_util.tree_flatten
_Tensor = torch.Tensor
_LEAF = tree_util.tree_structure(0)
_STRIDED = torch.strided

_counter_lock = threading.Lock()
_contiguous_copies = 0


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
            out = fast_call(fn, args)
        except RuntimeError:
            # torch refuses a query the fast path makes (``shape`` of a nested
            # tensor, ``is_contiguous()`` of a sparse one): the general path
            # names the problem.
            out = MISS
        if out is not MISS:
            return out
    return _call_general(fn, args, kwargs)


_PROXY_KEY = torch._C._TorchDispatchModeKey.PROXY


def _is_tracing(leaves: list[Any]) -> bool:
    """Whether this call is being traced rather than run: a tensor leaf is
    fake (also under functional or functorch wrappers) or a proxy mode
    (``make_fx``) is active. Traced calls become one ``hlobridge::call_jax``
    op, so that the caller's graph holds the JAX function as a node. Other
    tensor subclasses are real data and run."""
    for leaf in leaves:
        if isinstance(leaf, _Tensor) and type(leaf) is not _Tensor and \
                type(leaf) is not torch.nn.Parameter:
            # Imported here: fake_tensor imports sympy (seconds), which a
            # plain eager call never needs.
            from torch._subclasses.fake_tensor import is_fake

            if is_fake(leaf):
                return True
    return torch._C._get_dispatch_mode(_PROXY_KEY) is not None


def _call_general(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Every call the native fast path does not serve (see the module docs)."""
    global _contiguous_copies
    t0 = _perf()
    leaves, treedef = _flatten((args, kwargs))
    if _is_tracing(leaves):
        return custom_op.traced_call(fn, args, kwargs)
    sig: list[Any] = []
    ins: list[torch.Tensor] = []
    py_copies = 0
    needs_grad = False
    grad = torch.is_grad_enabled()
    for leaf in leaves:
        if isinstance(leaf, _Tensor):
            dt = leaf.dtype
            if (dt not in PLAIN or not leaf.is_cpu or leaf.layout is not _STRIDED
                    or leaf.is_nested or not leaf.is_contiguous()
                    or (grad and leaf.requires_grad)):
                route = for_device(leaf.device.type)
                if route is not None and route.call_jax is not None:
                    return route.call_jax_handler()(fn, args, kwargs, leaves, treedef, t0)
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
        entry = table(owner).get(key)
    except TypeError:
        raise unhashable_error(leaves) from None
    if needs_grad:
        return call_with_grad(call_jax, fn, owner, key, treedef, leaves)
    built = None
    if entry is None:
        entry = built = _build(fn, treedef, leaves)
        table(owner)[key] = entry
        if not kwargs and not py_copies and len(ins) == len(leaves) == len(args):
            _register_fast(fn, x64, ins, entry)
    if py_copies:
        with _counter_lock:
            _contiguous_copies += py_copies
    outs = run_and_record(entry.exe, ins, shapes=entry.shapes, codes=entry.codes,
                          platform=entry.platform, segments=entry.segments,
                          accounting=cache_accounting(built), t0=t0, wrap=_from_dlpack,
                          copied=py_copies)
    return entry.out_tree.unflatten(outs)


def _register_fast(fn: Callable[..., Any], x64: bool, ins: list[torch.Tensor],
                   entry: Entry) -> None:
    """Hand a signature whose arguments are all plain tensors to the native
    fast path, which serves later calls without entering Python."""
    if any(t.dtype not in PLAIN for t in ins) or entry.out_tree.num_leaves == 0:
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
    if dt not in CODES:
        hint = ""
        if dt in FLOAT8:
            hint = (f"; pass t.view(torch.uint8) and convert inside the function with "
                    f"jax.lax.bitcast_convert_type(x, jnp.{str(dt).split('.')[-1]})")
        raise DtypeError(f"call_jax: unsupported tensor dtype {dt} (supported: "
                         f"{', '.join(str(d) for d in DTYPES)}){hint}")
    if not t.is_cpu:
        raise ArgumentError(f"call_jax: tensor on device {t.device}, but the hlobridge runtime "
                            f"is the CPU plugin; move it with .cpu()")
    track = grad and t.requires_grad
    if track and dt in COMPLEX:
        raise ArgumentError("call_jax: gradients of complex tensors are not supported; pass "
                            ".detach()ed tensors or call under torch.no_grad()")
    if not t.is_contiguous() or (dt in COMPLEX and (t.is_conj() or t.is_neg())):
        return t.detach().resolve_conj().resolve_neg().contiguous(), 1, track
    return t, 0, track


def _build(fn: Callable[..., Any], treedef: Any, leaves: list[Any]) -> Entry:
    """Lower ``fn`` for this signature and compile it (or find it compiled)."""
    tensors = [leaf for leaf in leaves if isinstance(leaf, _Tensor)]
    platform = _native.runtime().platform
    try:
        low = lower(fn, treedef, leaves, platform)
    except Exception as e:
        err = custom_op.explain_trace_error(fn, e)
        if err is e:
            raise
        raise err from e
    out_tree = low.out_tree
    exe, hit = _native.compile(low.text)
    if exe.num_outputs != out_tree.num_leaves:
        raise ArgumentError(f"call_jax: the compiled program has {exe.num_outputs} outputs but "
                            f"the function returns {out_tree.num_leaves} arrays")
    seg = segment_of(fn, low, platform, exe.fingerprint, len(tensors), exe.num_outputs)
    return Entry(exe=exe, shapes=[tuple(t.shape) for t in tensors],
                 codes=[CODES[t.dtype] for t in tensors], out_tree=out_tree, segments=(seg,),
                 platform=platform, outcome="content" if hit else "miss", lower_s=low.lower_s,
                 compile_s=0.0 if hit else exe.compile_time_s)


def clear_cache() -> None:
    """Forget every compiled signature (per-function tables and the native
    compile cache). Tensors returned earlier stay valid."""
    entry_cache.clear()
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



custom_op.bind(call_jax)
