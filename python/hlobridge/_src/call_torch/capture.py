"""Capturing a torch function as one StableHLO module, for given input types.

A :class:`TorchFn` is a *flat* torch function (tensors in, a list of tensors
out) with a hashable identity. :meth:`TorchFn.capture` turns it into a
:class:`Capture` for one input signature ``[(shape, torch dtype), ...]``:

1. ``make_fx`` traces the function on fake tensors with the decomposition table the
   ``torch.compile`` backend uses (:func:`hlobridge._src.dynamo.engine.decompositions`)
   and attention in its math formulation, as the backend does; a graph
   with in-place ops is then functionalized (traced again);
2. the FX graph goes through the backend's own lowering, unchanged:
   :func:`~hlobridge._src.dynamo.partition.partition` (split at
   ``hlobridge::call_jax`` nodes, refusal of random ops, data-dependent
   shapes and input mutation), then
   :func:`~hlobridge._src.dynamo.stitch_partition.stitch_partition` (the
   lowering engine for torch pieces, ``jax.jit`` for JAX pieces, and the
   Rust stitcher for the one ``@main``). Nothing is compiled here: the module is embedded into the
   caller's JAX program (:mod:`hlobridge._src.call_torch.embed`), which XLA
   compiles as a whole.

Caching, as ``call_jax``: a capture is kept per ``TorchFn`` and signature
(:meth:`TorchFn.capture`); below that, the lowered module is kept by the
*content* of the traced graph (its code, the values of its constants, the
signature), so a function defined again with the same body costs one
``make_fx`` trace and no second lowering. :func:`stats` counts both.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from hlobridge._src.errors import BridgeError, CallTorchError

__all__ = ["Capture", "Spec", "TorchFn", "clear", "stats"]

Spec = tuple[tuple[int, ...], torch.dtype]
"""One input or output type: ``(shape, torch dtype)``."""

_lock = threading.RLock()
_by_content: dict[Hashable, Capture] = {}
_stats = {"traces": 0, "lowerings": 0, "content_hits": 0, "hits": 0}


def stats() -> dict[str, int]:
    """``traces`` (``make_fx`` runs: a new function or signature),
    ``lowerings`` (graphs lowered to StableHLO), ``content_hits`` (traces
    whose graph was lowered before) and ``hits`` (captures served from a
    ``TorchFn``'s own table without tracing)."""
    with _lock:
        return dict(_stats)


def clear() -> None:
    """Forget the content-keyed captures and zero :func:`stats` (each
    ``TorchFn`` keeps its own table while it lives)."""
    with _lock:
        _by_content.clear()
        for k in _stats:
            _stats[k] = 0


@dataclass
class Capture:
    """A torch function lowered for one signature."""

    text: str
    """The stitched module; ``@main`` takes the inputs named by
    :attr:`arg_index` then :attr:`constants`."""
    arg_index: list[int]
    """Flat input position of each leading ``@main`` parameter (unused
    inputs are left out)."""
    constants: list[np.ndarray]
    """Values of the trailing ``@main`` parameters (tensors the graph holds,
    constants the engine created)."""
    outputs: list[tuple[str, int]]
    """Each flat output: ``("prog", k)`` (result ``k`` of ``@main``) or
    ``("arg", i)`` (flat input ``i`` returned as it is)."""
    out_specs: list[Spec]
    name: str = "torch"
    cache: dict[str, Any] = field(default_factory=dict)
    """What :mod:`~hlobridge._src.call_torch.embed` derives from it once
    (the ``jax.export.Exported``)."""


class TorchFn:
    """A flat torch function ``flat(*tensors) -> list[tensor]`` with an
    identity ``key`` (what makes two ``TorchFn`` s the same function) and a
    display ``name``. Derived functions (:meth:`vmapped`, :meth:`vjp`) are
    made once and kept."""

    def __init__(self, flat: Callable[..., list[torch.Tensor]], key: Hashable, name: str) -> None:
        self.flat = flat
        self.key = key
        self.name = name
        self._captures: dict[tuple[Spec, ...], Capture] = {}
        self._derived: dict[Hashable, TorchFn] = {}
        self.grad_inputs = True
        """Trace with floating inputs requiring grad (see :meth:`_trace`);
        off for backward functions, which mark their own."""
        self.jax_cache: dict[str, Any] = {}
        """The JAX callables :mod:`~hlobridge._src.call_torch.vjp` builds
        around this function (made once per ``TorchFn``)."""

    # -- derived functions ----------------------------------------------------
    def vmapped(self, in_dims: tuple[int | None, ...]) -> TorchFn:
        """This function under ``torch.func.vmap`` (batch axis 0 of every
        output): how ``jax.vmap`` re-captures at the batched shape."""
        key = ("vmap", in_dims)
        with _lock:
            got = self._derived.get(key)
            if got is None:
                inner = self.flat

                def batched(*a: torch.Tensor) -> list[torch.Tensor]:
                    return list(torch.func.vmap(lambda *x: tuple(inner(*x)), in_dims=in_dims,
                                                out_dims=0)(*a))

                got = self._derived[key] = TorchFn(batched, (self.key, key),
                                                   f"{self.name} (vmap)")
            return got

    def vjp(self, n_in: int, diff: tuple[bool, ...], out_diff: tuple[bool, ...]) -> TorchFn:
        """The torch backward of this function as a function of its own:
        ``(*primals, *cotangents of the out_diff outputs)`` -> the gradients
        of the ``diff`` inputs, traced through ``torch.autograd.grad`` (torch
        autograd's own backward, recomputing the forward in the same
        program; ``call_jax`` nodes inside differentiate through their
        registered VJP)."""
        key = ("vjp", n_in, diff, out_diff)
        with _lock:
            got = self._derived.get(key)
            if got is None:
                inner = self.flat
                diff_idx = [i for i, d in enumerate(diff) if d]

                def backward(*a: torch.Tensor) -> list[torch.Tensor]:
                    full, cts = list(a[:n_in]), a[n_in:]
                    if torch._C._functorch.maybe_current_level() is not None:
                        # Inside torch.func.vmap (jax.vmap of jax.grad):
                        # autograd.grad cannot run there, torch.func.vjp can.
                        def fwd(*d: torch.Tensor) -> tuple[torch.Tensor, ...]:
                            for i, t in zip(diff_idx, d):
                                full[i] = t
                            return tuple(o for o, keep in zip(inner(*full), out_diff) if keep)

                        _, pull = torch.func.vjp(fwd, *[full[i] for i in diff_idx])
                        return list(pull(tuple(cts)))
                    with torch.enable_grad():
                        leaves = [full[i].detach().requires_grad_() for i in diff_idx]
                        for i, t in zip(diff_idx, leaves):
                            full[i] = t
                        outs = [o for o, keep in zip(inner(*full), out_diff) if keep]
                        pairs = [(o, c) for o, c in zip(outs, cts) if o.requires_grad]
                        grads: tuple[torch.Tensor | None, ...] = (None,) * len(leaves)
                        if pairs:
                            grads = torch.autograd.grad([o for o, _ in pairs],
                                                        leaves, [c for _, c in pairs],
                                                        allow_unused=True)
                    return [torch.zeros_like(t) if g is None else g
                            for t, g in zip(leaves, grads)]

                got = self._derived[key] = TorchFn(backward, (self.key, key),
                                                   f"{self.name} (vjp)")
                got.grad_inputs = False
            return got

    # -- capture ---------------------------------------------------------------
    def capture(self, specs: list[Spec]) -> Capture:
        """The capture for inputs of these types (see the module docs)."""
        sig = tuple((tuple(int(d) for d in s), dt) for s, dt in specs)
        with _lock:
            got = self._captures.get(sig)
            if got is not None:
                _stats["hits"] += 1
                return got
            gm = self._trace(sig)
            ckey = _content_key(gm, sig)
            got = _by_content.get(ckey)
            if got is None:
                got = _lower(gm, sig, self.name)
                _by_content[ckey] = got
            else:
                _stats["content_hits"] += 1
            self._captures[sig] = got
            return got

    def _trace(self, sig: tuple[Spec, ...]) -> torch.fx.GraphModule:
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.nn.attention import SDPBackend, sdpa_kernel

        from hlobridge._src.dynamo.engine import decompositions

        _stats["traces"] += 1
        from torch._subclasses.fake_tensor import FakeTensorMode

        # Fake inputs; tensors the function closes over (a module's
        # parameters) stay real and become graph constants.
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        examples = [mode.from_tensor(torch.empty(s, dtype=dt)) for s, dt in sig]
        try:
            with sdpa_kernel([SDPBackend.MATH]), mode:
                gm = None
                if self.grad_inputs and any(e.dtype.is_floating_point for e in examples):
                    # Floating inputs marked as requiring grad, as the
                    # backend's AOTAutograd sees parameters: decompositions
                    # choose by it (``matmul`` of a 3-d activation and a 2-d
                    # weight folds into one 2-d ``mm`` instead of a ``bmm``
                    # against the weight broadcast over the batch, a copy in
                    # XLA). A function that refuses such inputs (in-place
                    # ops on them) is traced without.
                    marked = [e.detach().requires_grad_() if e.dtype.is_floating_point else e
                              for e in examples]
                    try:
                        gm = make_fx(self.flat, decomposition_table=decompositions(),
                                     tracing_mode="real")(*marked)
                    except BridgeError:
                        raise
                    except Exception:
                        gm = None
                if gm is None:
                    gm = make_fx(self.flat, decomposition_table=decompositions(),
                                 tracing_mode="real")(*examples)
                if _mutates(gm):
                    # In-place ops (the function's own, or a decomposition's:
                    # the backend's BatchNorm running statistics ``copy_``
                    # into a buffer): functionalize the decomposed graph.
                    # (Not the first trace: functionalization is a functorch
                    # transform, inside which autograd -- the backward
                    # capture -- cannot run.) A mutated input stays a
                    # ``copy_`` into it, which the partitioner refuses.
                    again = torch.func.functionalize(gm, remove="mutations_and_views")
                    gm = make_fx(again, tracing_mode="real")(*examples)
        except BridgeError:
            raise
        except Exception as e:
            raise CallTorchError(f"hb.call_torch: tracing {self.name} for inputs "
                                 f"{_describe(sig)} failed: {type(e).__name__}: {e}") from e
        return gm


def _mutates(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op == "call_function" and schema is not None and schema.is_mutable:
            return True
    return False


def _describe(sig: tuple[Spec, ...] | list[Spec]) -> str:
    return "(" + ", ".join(f"{str(dt).removeprefix('torch.')}{list(s)}" for s, dt in sig) + ")"


def _content_key(gm: torch.fx.GraphModule, sig: tuple[Spec, ...]) -> Hashable:
    """The traced graph's code, the bytes of the tensors it holds and the
    signature."""
    h = hashlib.sha256(gm.code.encode())
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = getattr(gm, str(node.target))
            if isinstance(value, torch.Tensor):
                v = value.detach().cpu().contiguous()
                h.update(f"{node.target}:{v.dtype}:{list(v.shape)}".encode())
                h.update(v.reshape(-1).view(torch.uint8).numpy().tobytes() if v.numel() else b"")
    return (h.hexdigest(), sig)


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _lower(gm: torch.fx.GraphModule, sig: tuple[Spec, ...], name: str) -> Capture:
    """Lower a traced graph with the ``torch.compile`` backend's pieces."""
    from hlobridge import _native
    from hlobridge._src.dynamo.partition import partition
    from hlobridge._src.dynamo.stitch_partition import stitch_partition

    _stats["lowerings"] += 1
    try:
        part = partition(gm)
        types_: dict[str, Spec] = dict(zip(part.placeholders, sig))
        sp = stitch_partition(part, types_, label=f"call_torch {name}",
                              platform=_native.runtime().platform)
    except BridgeError:
        raise
    except Exception as e:
        raise CallTorchError(f"hb.call_torch: lowering {name} for inputs {_describe(sig)} "
                             f"failed: {type(e).__name__}: {e}") from e
    if None in sp.outputs:
        raise CallTorchError(f"hb.call_torch: {name} returns None where a tensor belongs")
    placeholder_pos = {n: i for i, n in enumerate(part.placeholders)}
    text, consts, used_args, used_consts = sp.text, sp.consts, sp.used_args, sp.used_consts
    outputs = [o for o in sp.outputs if o is not None]
    out_specs = [types_[h] if h not in placeholder_pos else sig[placeholder_pos[h]]
                 for h in part.outputs]
    return Capture(text=text, arg_index=used_args,
                   constants=[_to_numpy(consts[n]) for n in used_consts],
                   outputs=outputs, out_specs=out_specs, name=name)

