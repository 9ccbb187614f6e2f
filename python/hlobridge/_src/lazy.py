"""``call_jax`` on torch_xla lazy tensors: the pending torch graph and the
JAX function run as ONE compiled program.

With torch_xla, ``y = torch.relu(x @ w)`` on ``xla`` tensors only records a
graph; nothing has run yet. When such tensors reach
:func:`hlobridge.call_jax`, hlobridge

1. takes the pending graph that produces them as StableHLO
   (``torch_xla._XLAC._get_stablehlo``), whose parameters are the graph's
   device-data leaves in the order ``_get_tensors_xla_device_data_node``
   lists them;
2. lowers the JAX function for the tensors' shapes and dtypes;
3. stitches the two with the Rust stitcher into one module (segments
   ``torch_xla lazy graph`` [torch] and the function [jax]), compiles it
   once through hlobridge's PJRT runtime, and runs it;
4. hands the results back as ``xla`` tensors that alias the PJRT output
   buffers (DLPack, zero-copy on the CPU), so later torch ops keep building
   lazily on top of them.

The inputs are device data read in place (DLPack views of torch_xla's
buffers). The pending inputs' values are outputs of the same program and
are written back into the input tensors (``_replace_xla_tensor``), so their
graph never runs a second time when torch_xla syncs later.

Caching: the key is torch_xla's hash of the pending graph plus the JAX
function's signature (as for eager calls), so a training loop that builds
the same graph every step compiles once and then only looks the program up;
neither the torch graph nor the JAX function is lowered again.

Limits: every tensor argument must be an ``xla`` tensor (mixing devices is
an :class:`~hlobridge.ArgumentError`), and gradients through ``call_jax`` on
lazy tensors are not supported (an ``ArgumentError``; detach, or use eager
CPU tensors, where autograd works).
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable
from typing import Any

import jax
import torch
import torch_xla
from torch_xla.utils import dlpack as xla_dlpack

from hlobridge import _native
from hlobridge._src.errors import ArgumentError, DtypeError
from hlobridge._src.dtypes import CODES, DTYPES
from hlobridge._src.entry_cache import Entry, table
from hlobridge._src.lowering import lower, segment_of
from hlobridge._src.receipt import Segment, cache_accounting, run_and_record
from hlobridge._src.signature import function_name, unhashable_error

__all__ = ["call_jax_lazy", "call_jax_routed"]

_X = torch_xla._XLAC
_perf = time.perf_counter
TORCH_SEGMENT = "torch_xla lazy graph"


def _mlir_type(t: torch.Tensor) -> str:
    elem = DTYPES[t.dtype][0]
    return f"tensor<{''.join(f'{d}x' for d in t.shape)}{elem}>"


def _check(tensors: list[torch.Tensor]) -> None:
    grad = torch.is_grad_enabled()
    for i, t in enumerate(tensors):
        if t.device.type != "xla":
            raise ArgumentError(
                f"call_jax: tensor argument {i} is on {t.device}, but other arguments are torch_xla "
                f"lazy tensors; put every tensor on the same xla device")
        if t.dtype not in CODES:
            raise DtypeError(f"call_jax: unsupported tensor dtype {t.dtype} (tensor argument {i})")
        if grad and t.requires_grad:
            raise ArgumentError(
                "call_jax: gradients through call_jax on torch_xla lazy tensors are not supported; "
                "pass .detach()ed tensors, call under torch.no_grad(), or use eager CPU tensors "
                "(where call_jax is differentiable)")


def call_jax_routed(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                    leaves: list[Any], treedef: Any, t0: float) -> Any:
    """``call_jax`` on xla tensors (the ``xla`` row of :mod:`hlobridge._src.routing`)."""
    return call_jax_lazy(fn, leaves, treedef, t0)


def call_jax_lazy(fn: Callable[..., Any], leaves: list[Any], treedef: Any, t0: float) -> Any:
    """Run ``fn`` on the pytree ``treedef``/``leaves`` whose tensor leaves are
    torch_xla lazy tensors, fused with their pending graph (module docs)."""
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    _check(tensors)
    tids = [_X._xla_get_tensor_id(t) for t in tensors]
    is_data = [_X._get_tensors_xla_device_data_node([t])[0] == [tid]
               for t, tid in zip(tensors, tids)]
    # The pending tensors, each once; then the program inputs: the pending
    # graph's device-data leaves, plus data arguments not among them.
    pending: list[torch.Tensor] = []
    pending_pos: dict[int, int] = {}
    for t, tid, data in zip(tensors, tids, is_data):
        if not data and tid not in pending_pos:
            pending_pos[tid] = len(pending)
            pending.append(t)
    if pending:
        data_ids, data_vals = _X._get_tensors_xla_device_data_node(pending)
        graph = _X._get_graph_hash(pending)
    else:
        data_ids, data_vals, graph = [], [], b""
    inputs: list[torch.Tensor] = list(data_vals)
    input_pos = {i: k for k, i in enumerate(data_ids)}
    for t, tid, data in zip(tensors, tids, is_data):
        if data and tid not in input_pos:
            input_pos[tid] = len(inputs)
            inputs.append(t)
    # Where each argument comes from: a program input or a pending output.
    wiring = tuple(("p", input_pos[tid]) if data else ("t", pending_pos[tid])
                   for tid, data in zip(tids, is_data))
    sig = tuple((leaf.dtype, tuple(leaf.shape)) if isinstance(leaf, torch.Tensor)
                else (type(leaf), leaf) for leaf in leaves)
    if isinstance(fn, types.MethodType):
        owner, sub = fn.__self__, fn.__func__
    else:
        owner, sub = fn, None
    x64 = jax.config.read("jax_enable_x64")  # type: ignore[no-untyped-call]
    key = ("xla", graph, tuple((tuple(v.shape), v.dtype) for v in inputs), wiring, sub, treedef,
           sig, x64)
    try:
        entry = table(owner).get(key)
    except TypeError:
        raise unhashable_error(leaves) from None
    built = None
    if entry is None:
        entry = built = _build(fn, treedef, leaves, inputs, len(data_ids), pending, wiring)
        table(owner)[key] = entry
    views = [torch.from_dlpack(xla_dlpack.to_dlpack(v)) for v in inputs]
    # The first num_pending outputs are the pending graph's (not results).
    outs = run_and_record(entry.exe, views, shapes=entry.shapes, codes=entry.codes,
                          platform=entry.platform, segments=entry.segments,
                          accounting=cache_accounting(built), t0=t0, wrap=xla_dlpack.from_dlpack,
                          skip_outputs=entry.num_pending)
    for t, value in zip(pending, outs[:entry.num_pending]):
        _X._replace_xla_tensor(t, value)
    return entry.out_tree.unflatten(outs[entry.num_pending:])


def _build(fn: Callable[..., Any], treedef: Any, leaves: list[Any], inputs: list[torch.Tensor],
           num_graph_inputs: int, pending: list[torch.Tensor],
           wiring: tuple[tuple[str, int], ...]) -> Entry:
    """Capture the pending graph (whose parameters are the first
    ``num_graph_inputs`` program inputs), lower ``fn``, stitch and compile."""
    platform = _native.runtime().platform
    t0 = _perf()
    low = lower(fn, treedef, leaves, platform)
    num_out = low.out_tree.num_leaves
    prog_inputs = [(f"p{k}", _mlir_type(v), False) for k, v in enumerate(inputs)]
    segments: list[tuple[str, str, str, str, list[str], list[str]]] = []
    if pending:
        torch_text = _X._get_stablehlo(pending, "", [], False).decode()
        # A torch_xla collective (xm.all_reduce, ...) lowers to a one-replica
        # no-op here: refuse it by name instead of computing a wrong value.
        from hlobridge._src.distributed_guard import check_stablehlo_collectives

        check_stablehlo_collectives(torch_text, where="call_jax on torch_xla lazy tensors")
        segments.append((TORCH_SEGMENT, "torch", torch_text, "main",
                         [f"p{k}" for k in range(num_graph_inputs)],
                         [f"t{k}" for k in range(len(pending))]))
    jax_name = function_name(fn)
    segments.append((jax_name, "jax", low.text, "main", [f"{w}{k}" for w, k in wiring],
                     [f"o{k}" for k in range(num_out)]))
    outputs = [f"t{k}" for k in range(len(pending))] + [f"o{k}" for k in range(num_out)]
    fused, _report = _native.stitch(prog_inputs, segments, outputs)
    capture_s = _perf() - t0
    exe, hit = _native.compile(fused)
    segs: list[Segment] = []
    if pending:
        segs.append(Segment(name=TORCH_SEGMENT, producer="torch", fingerprint=exe.fingerprint,
                            num_inputs=num_graph_inputs, num_outputs=len(pending)))
    segs.append(segment_of(fn, low, platform, exe.fingerprint, len(wiring), num_out))
    return Entry(exe=exe, shapes=[tuple(v.shape) for v in inputs],
                 codes=[CODES[v.dtype] for v in inputs], out_tree=low.out_tree,
                 segments=tuple(segs), platform=platform, outcome="content" if hit else "miss",
                 lower_s=capture_s, compile_s=0.0 if hit else exe.compile_time_s,
                 num_pending=len(pending))
