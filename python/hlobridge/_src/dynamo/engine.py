"""Lowering engines: one interface that turns a torch FX graph piece into a
StableHLO module.

An engine receives a :class:`torch.fx.GraphModule` (aten ops, placeholders =
the piece's inputs, output = a tuple of tensors) and the concrete
``(shape, dtype)`` of every input, and returns a :class:`LoweredPiece`:
the module text, for each parameter of its ``@main`` where the value comes
from (an input of the piece, or a constant the engine created), and the
concrete output specs.

Engines:

- ``"torch_xla_lazy"`` (default): runs the FX graph on ``xla`` device
  tensors under torch_xla's lazy tensor tracing and reads the traced graph
  with ``torch_xla._XLAC._get_stablehlo``. Parameters are mapped back to
  inputs by lazy-tensor id (torch_xla orders them as it likes). Scalars are
  inlined as constants. Ops torch_xla falls back to CPU for are refused
  (:class:`UnsupportedOpError` naming them), and so is any device
  execution during the trace (a data-dependent value).

Select with ``HLOBRIDGE_TORCH_ENGINE`` (only ``torch_xla_lazy`` today); the
receipt's segments name the engine that ran.
"""

from __future__ import annotations

import copy
import functools
import os
import threading
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.fx

from hlobridge._src import config
from hlobridge._src.errors import CompileBackendError, DataDependentError, UnsupportedOpError
from hlobridge._src.dynamo.attention_decomp import attention_decompositions
from hlobridge._src.dynamo.bag_lowerings import bag_decompositions
from hlobridge._src.dynamo.jax_lowerings import jax_lowerings
from hlobridge._src.dynamo.numerics_decomp import complex_var_mean, numerics_decompositions

__all__ = ["TensorSpec", "LoweredPiece", "LoweringEngine", "TorchXlaLazyEngine", "decompositions",
           "get_engine"]

TensorSpec = tuple[tuple[int, ...], torch.dtype]
"""A concrete tensor type: ``(shape, dtype)``."""


@dataclass(frozen=True)
class LoweredPiece:
    """The StableHLO of one torch graph piece."""

    text: str
    """Module text; the entry function is ``main``."""
    params: list[int | torch.Tensor]
    """For each parameter of ``main``: the index of the piece input it is, or
    a CPU tensor (a constant the engine created: pass it as a program input)."""
    outputs: list[TensorSpec]
    """Concrete type of each result of ``main``."""
    engine: str
    widened: tuple[int, ...] = ()
    """Piece inputs that are 0-d but whose ``main`` parameter is their
    1-element vector (``tensor<1xi1>`` for a 0-d bool): reshape them
    before the call."""


class LoweringEngine(Protocol):
    """Lowers torch FX graph pieces to StableHLO."""

    name: str

    def lower(self, gm: torch.fx.GraphModule, inputs: list[TensorSpec]) -> LoweredPiece:
        """Lower ``gm`` for inputs of these concrete types."""
        ...


class TorchXlaLazyEngine:
    """torch_xla lazy-tensor tracing (see the module docs)."""

    name = "torch_xla_lazy"
    _lock = threading.Lock()

    def __init__(self) -> None:
        os.environ.setdefault("PJRT_DEVICE", "CPU")
        import torch_xla

        self._xla = torch_xla
        self._device = torch_xla.device()

    def lower(self, gm: torch.fx.GraphModule, inputs: list[TensorSpec]) -> LoweredPiece:
        """Trace ``gm`` on lazy ``xla`` tensors and return its StableHLO.

        A used 0-d bool input is traced as a 1-element vector (a bool trace
        value would be 0 or 1, which torch_xla inlines or merges with
        another equal scalar): its ``main`` parameter is ``tensor<1xi1>``,
        listed in :attr:`LoweredPiece.widened`. A used 0-d input of another
        dtype that is not a parameter is accepted only when a second trace
        with another value for it gives the same program (the op reads its
        shape, not its value: ``zeros_like``, ``fill``, a zero gradient's
        cotangent); otherwise torch_xla baked its value in, and the graph
        is refused by name."""
        scalars = _used_scalars(gm, inputs)
        widened = frozenset(i for i in scalars if inputs[i][1] == torch.bool)
        text, params, specs = self._trace(gm, inputs, widened, salted=frozenset())
        kept = {p for p in params if isinstance(p, int)}
        missing = frozenset(i for i in scalars if i not in kept)
        if missing:
            text2, params2, _ = self._trace(gm, inputs, widened, salted=missing)
            if text2 != text or not _same_params(params, params2):
                i = min(missing)
                raise CompileBackendError(
                    f"hlobridge backend: torch_xla inlined the 0-d {inputs[i][1]} input "
                    f"{_placeholder_names(gm)[i]} as a constant; pass it as a 1-element tensor "
                    f"or keep it out of the compiled region")
        return LoweredPiece(text=text, params=params, outputs=specs, engine=self.name,
                            widened=tuple(sorted(widened)))

    def _trace(self, gm: torch.fx.GraphModule, inputs: list[TensorSpec], widened: frozenset[int],
               salted: frozenset[int]
               ) -> tuple[str, list[int | torch.Tensor], list[TensorSpec]]:
        """One lazy trace of ``gm``: the StableHLO text, ``main``'s
        parameters and the output specs. Inputs in ``salted`` get another
        trace value than usual."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from torch_xla.debug import metrics

        C = self._xla._XLAC
        with self._lock, unset_fake_temporarily(), torch.no_grad():
            dev = self._device
            gm = _on_device(gm, dev, inputs, widened)
            ins = [_trace_value((1,) if i in widened else shape, dt,
                                i + _SALT if i in salted else i).to(dev)
                   for i, (shape, dt) in enumerate(inputs)]
            index = {C._xla_get_tensor_id(t): i for i, t in enumerate(ins)}
            metrics.clear_counters()
            try:
                outs = gm(*ins)
                fallbacks = metrics.executed_fallback_ops()
                if fallbacks:
                    names = ", ".join(sorted(set(fallbacks)))
                    raise UnsupportedOpError(f"hlobridge backend: torch_xla has no lowering for "
                                             f"{names}")
                if metrics.counter_value("ExecuteComputation"):
                    raise DataDependentError(
                        "hlobridge backend: lowering the graph needed a tensor's value (a "
                        "data-dependent shape or a .item()); such graphs are not supported")
                outs = list(outs)
                if not all(isinstance(o, torch.Tensor) for o in outs):
                    raise CompileBackendError("hlobridge backend: a torch graph piece returns a "
                                              "non-tensor value")
                ids, values = C._get_tensors_xla_device_data_node(outs)
                text = C._get_stablehlo(outs, C._xla_get_default_device(), [],
                                        False).decode("utf-8")
            except (RuntimeError, IndexError, ValueError, NotImplementedError) as e:
                # torch_xla's own lowering failed on an op of the graph (its
                # message names it): named, at capture time (docs/op_numerics.md)
                raise UnsupportedOpError(f"hlobridge backend: torch_xla failed to lower the "
                                         f"graph: {type(e).__name__}: {e}") from e
            finally:
                C._clear_pending_irs(str(dev))
            params: list[int | torch.Tensor] = []
            for tid, value in zip(ids, values):
                i = index.get(tid)
                params.append(i if i is not None else value.detach().cpu().clone())
            specs = [(tuple(o.shape), o.dtype) for o in outs]
        return text, params, specs


_SALT = 4099
"""Added to an input's trace-value index for the second trace that tells an
unused 0-d input from an inlined one (odd, so no wide value repeats)."""


def decompositions() -> dict[Any, Any]:
    """The decomposition table graphs are traced with before an engine
    lowers them: core aten (the op set torch_xla lowers best, as its own
    export path), with the normalizations spelled out (see
    :func:`_accurate_norms`) and training-mode batch norm's running
    statistics computed as torch does.

    torch_xla lowers ``_native_batch_norm_legit_functional`` (and the
    in-place variants) to ``stablehlo.batch_norm_training`` and updates
    ``running_var`` with that op's *biased* batch variance, where torch uses
    the unbiased one (``n/(n-1)`` times larger: 6.7% for a 1x1 feature map
    and batch 16). Here the running statistics are computed as torch does.

    Weight normalization's backward (``_weight_norm_interface_backward``,
    which autograd emits for ``nn.utils.parametrizations.weight_norm``, e.g.
    in Wav2Vec2's positional convolution) has no decomposition in torch and
    no torch_xla lowering: it is spelled out here as torch's differentiable
    formula."""
    from torch._decomp import core_aten_decompositions

    aten = torch.ops.aten
    table = dict(core_aten_decompositions())
    table[aten._native_batch_norm_legit_functional.default] = _batch_norm_functional
    table[aten._native_batch_norm_legit.default] = _batch_norm_in_place
    table[aten.native_batch_norm.default] = _batch_norm_in_place
    table.update(numerics_decompositions())  # docs/op_numerics.md
    # Ops torch_xla has no lowering for, as torch or JAX (docs/jax_lowerings.md);
    # after numerics_decompositions, whose integer-input entries they subsume.
    table.update(jax_lowerings())
    # Last: the two-pass variance must win over any entry above for the
    # same op (numerics_decompositions' complex var_mean falls through to
    # torch's one-pass core decomposition for real inputs).
    table.update(_accurate_norms())
    table[aten._weight_norm_interface_backward.default] = _weight_norm_backward
    table.update(attention_decompositions())  # nn.MultiheadAttention's inference fast path
    table.update(bag_decompositions())  # embedding_bag: none in torch, torch_xla's bakes offsets in
    return table


def _weight_norm_backward(grad_w: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                          norms: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients of ``w = v * (g / norms)`` (``norms``: the L2 norms of
    ``v`` over every axis but ``dim``, kept as size-1 axes), as torch's
    ``_weight_norm_differentiable_backward``."""
    dim = dim % v.dim()
    axes = [i for i in range(v.dim()) if i != dim]
    norms = norms.to(v.dtype)
    sums = (grad_w * v).sum(axes, keepdim=True)
    grad_v = (g / norms) * (grad_w - v * (sums / (norms * norms)))
    return grad_v, (sums / norms).to(g.dtype)


def _accurate_norms() -> dict[Any, Any]:
    """The normalizations as two-pass float32 arithmetic that keeps eager
    float32's accuracy.

    torch_xla lowers ``native_layer_norm``, ``native_group_norm`` and
    training batch norm (``_native_batch_norm_legit.no_stats``, as
    ``stablehlo.batch_norm_training``, which XLA expands) with the one-pass
    ``E[x^2] - E[x]^2``. In float32 that cancels catastrophically when a
    row's or channel's mean is large against its spread (measured, std 1:
    mean 100 puts LayerNorm and GroupNorm outputs 0.1% off and batch norm's
    ``rstd`` 1% off; mean 1000, 17% and NaN; eager float32 stays within
    4e-5), and a ReLU network's gradients change wherever that moves an
    activation across zero (ResNet-18: 3% off float64 after one step,
    eager float32 4e-6). Here they are torch's own decompositions, whose
    ``var_mean`` is :func:`_var_mean_shifted`. Inference batch norm is
    ``(x - mean) * rstd`` (:func:`_batch_norm_eval`) rather than torch_xla's
    ``x * scale + shift``, which loses the low bits of ``x - mean`` (8x
    eager's error at mean 100).

    The backward ops are core decompositions that use these forwards' mean
    and rstd; batch norm's and layer norm's sum ``g * (x - mean)`` (centered;
    so does XLA's own expansion of ``stablehlo.batch_norm_grad``, which
    torch_xla would emit for ``native_batch_norm_backward``). Group norm's
    (as eager CPU torch's kernel) sums ``g * x`` and subtracts ``mean *
    sum(g)``, which cancels the same way: :func:`_group_norm_backward` is the
    centered form (measured, mean 100, std 1: the weight gradient 3.2e-6
    off float64 instead of 5.7e-5, the input gradient 1.2e-7 instead of
    7.3e-7; eager float32 2.4e-5 and 5.7e-7;
    ``tests/python/test_norm_backward_numerics.py``)."""
    from torch._decomp import decomposition_table

    aten = torch.ops.aten
    ops = (aten.native_layer_norm.default, aten.native_group_norm.default,
           aten._native_batch_norm_legit.no_stats)
    table = {op: decomposition_table[op] for op in ops}
    table[aten._native_batch_norm_legit_no_training.default] = _batch_norm_eval
    table[aten.var_mean.correction] = _var_mean_shifted
    table[aten.native_group_norm_backward.default] = _group_norm_backward
    return table


def _group_norm_backward(grad_out: torch.Tensor, x: torch.Tensor, mean: torch.Tensor,
                         rstd: torch.Tensor, weight: torch.Tensor | None, n: int, c: int,
                         hxw: int, group: int, output_mask: list[bool],
                         ) -> tuple[torch.Tensor | None, ...]:
    """``native_group_norm_backward`` over ``x - mean`` (in float32 at
    least): with ``xc = x - mean``, ``gg = g * weight`` and ``m`` elements
    per group, ``dx = rstd * (gg - sum(gg)/m - xc * rstd^2 * sum(gg*xc)/m)``,
    ``dweight = sum(g * xc * rstd)``, ``dbias = sum(g)`` (the sums over a
    group's, resp. a channel's, elements)."""
    from torch._prims_common import get_computation_dtype

    cdt = get_computation_dtype(x.dtype)
    cpg = c // group
    g = grad_out.to(cdt).reshape(n, group, cpg, hxw)
    xc = x.to(cdt).reshape(n, group, cpg, hxw) - mean.to(cdt).reshape(n, group, 1, 1)
    r = rstd.to(cdt).reshape(n, group, 1, 1)
    p_dtype = x.dtype if weight is None else weight.dtype
    dx = dweight = dbias = None
    if output_mask[0]:
        gg = g if weight is None else g * weight.to(cdt).reshape(1, group, cpg, 1)
        m = cpg * hxw
        s1 = gg.sum([2, 3], keepdim=True) / m
        s2 = (gg * xc).sum([2, 3], keepdim=True) / m
        dx = (r * (gg - s1 - xc * (r * r) * s2)).reshape(x.shape).to(x.dtype)
    if output_mask[1]:
        dweight = (g * xc * r).sum([0, 3]).reshape(c).to(p_dtype)
    if output_mask[2]:
        dbias = g.sum([0, 3]).reshape(c).to(p_dtype)
    return dx, dweight, dbias


def _var_mean_shifted(x: torch.Tensor, dim: Any = None, *, correction: Any = None,
                      keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``var_mean`` in two passes over ``x - x0``, ``x0`` one element of each
    reduced slice (the "shifted data" algorithm): the sums then run over
    values of the data's spread rather than its mean, so XLA's float32
    reductions (summed in another order than torch's cascade sums) lose
    nothing to a large mean. In float32 at least, like torch."""
    from torch._prims_common import get_computation_dtype

    if x.is_complex():  # a real variance: var(re) + var(im) (numerics_decomp)
        return complex_var_mean(x, dim, correction=correction, keepdim=keepdim)
    dims = list(range(x.dim())) if dim is None or (isinstance(dim, (list, tuple))
                                                   and len(dim) == 0) else \
        [d % max(x.dim(), 1) for d in ([dim] if isinstance(dim, int) else dim)]
    xc = x.to(get_computation_dtype(x.dtype))
    shift = xc
    for d in dims:
        if xc.shape[d] > 0:
            shift = shift.narrow(d, 0, 1)
        else:  # nothing to shift by; the statistics are NaN, as torch's
            shift = shift.new_zeros([1 if i == d else n for i, n in enumerate(shift.shape)])
    shifted = xc - shift
    n = 1
    for d in dims:
        n *= x.shape[d]
    mean_d = shifted.sum(dims, keepdim=True) / n
    centered = shifted - mean_d
    c = 1 if correction is None else correction
    var = (centered * centered).sum(dims, keepdim=keepdim) / max(n - c, 0)
    mean = mean_d + shift
    if not keepdim:
        mean = mean.squeeze(dims) if dims else mean
    return var.to(x.dtype), mean.to(x.dtype)


def _batch_norm_eval(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                     running_mean: torch.Tensor, running_var: torch.Tensor, momentum: float,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inference batch norm as eager CPU torch computes it: ``(x - mean) *
    rstd * weight + bias``, and empty saved statistics."""
    from torch._prims_common import get_computation_dtype

    cdt = get_computation_dtype(x.dtype)
    shape = [1, -1] + [1] * (x.dim() - 2)
    out = (x.to(cdt) - running_mean.to(cdt).reshape(shape)) * \
        torch.rsqrt(running_var.to(cdt) + eps).reshape(shape)
    if weight is not None:
        out = out * weight.to(cdt).reshape(shape)
    if bias is not None:
        out = out + bias.to(cdt).reshape(shape)
    empty = x.new_zeros((0,))
    return out.to(x.dtype), empty, empty


def _running_stats(x: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
                   momentum: float) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's running-statistics update: the batch mean and the *unbiased*
    batch variance per channel (computed in float32 at least), blended in
    with ``momentum``."""
    from torch._prims_common import get_computation_dtype

    dims = [0, *range(2, x.dim())]
    var, mean = torch.var_mean(x.to(get_computation_dtype(x.dtype)), dims, correction=1)
    new_mean = running_mean * (1 - momentum) + mean.to(running_mean.dtype) * momentum
    new_var = running_var * (1 - momentum) + var.to(running_var.dtype) * momentum
    return new_mean, new_var


def _batch_norm_functional(x: torch.Tensor, weight: torch.Tensor | None,
                           bias: torch.Tensor | None, running_mean: torch.Tensor,
                           running_var: torch.Tensor, training: bool, momentum: float,
                           eps: float) -> tuple[torch.Tensor, ...]:
    aten = torch.ops.aten
    if not training:
        # The "updated" statistics are copies, and the normalization reads
        # them: AOTAutograd writes them back into the inputs after the
        # forward (the op's schema mutates them), which must not touch a
        # tensor the backward saved (eager's functional op returns fresh
        # tensors too; returning the inputs themselves failed the backward
        # with "modified by an inplace operation").
        running_mean, running_var = running_mean.clone(), running_var.clone()
        out, mean, rstd = aten._native_batch_norm_legit_no_training.default(
            x, weight, bias, running_mean, running_var, momentum, eps)
        return out, mean, rstd, running_mean, running_var
    out, mean, rstd = aten._native_batch_norm_legit.no_stats(x, weight, bias, True, momentum,
                                                             eps)
    return (out, mean, rstd, *_running_stats(x, running_mean, running_var, momentum))


def _batch_norm_in_place(x: torch.Tensor, weight: torch.Tensor | None,
                         bias: torch.Tensor | None, running_mean: torch.Tensor | None,
                         running_var: torch.Tensor | None, training: bool, momentum: float,
                         eps: float) -> tuple[torch.Tensor, ...]:
    aten = torch.ops.aten
    if running_mean is None or running_var is None:
        return aten._native_batch_norm_legit.no_stats(  # type: ignore[no-any-return]
            x, weight, bias, training, momentum, eps)
    if not training:
        return aten._native_batch_norm_legit_no_training.default(  # type: ignore[no-any-return]
            x, weight, bias, running_mean, running_var, momentum, eps)
    out, mean, rstd = aten._native_batch_norm_legit.no_stats(x, weight, bias, True, momentum,
                                                             eps)
    new_mean, new_var = _running_stats(x, running_mean, running_var, momentum)
    running_mean.copy_(new_mean)
    running_var.copy_(new_var)
    return out, mean, rstd


def _on_device(gm: torch.fx.GraphModule, dev: torch.device,
               inputs: list[TensorSpec] | None = None,
               widened: frozenset[int] = frozenset()) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose factory ops (``full``, ``arange``, ...) create
    their tensors on ``dev`` instead of the CPU, with the rewrites torch_xla
    needs (reduce-all dimensions spelled out, slice bounds clamped), the
    ``widened`` placeholders taking a 1-element vector that is squeezed
    back to 0-d, and without dead nodes."""
    graph = copy.deepcopy(gm.graph)
    # A piece's placeholders carry no metadata: give them their concrete
    # type, which the rewrites below read.
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for node, (shape, dt) in zip(placeholders, inputs or []):
        if "val" not in node.meta:
            node.meta["val"] = torch.empty(shape, dtype=dt, device="meta")
    for i in widened:
        node = placeholders[i]
        with graph.inserting_after(node):
            squeezed = graph.call_function(torch.ops.aten.squeeze.dim, (node, 0))
        node.replace_all_uses_with(squeezed, delete_user_cb=lambda user: user is not squeezed)
        squeezed.meta["val"] = node.meta["val"]
    for node in graph.nodes:
        device = node.kwargs.get("device")
        if node.op == "call_function" and device is not None and torch.device(device).type == "cpu":
            node.kwargs = {**node.kwargs, "device": dev}
        _spell_out_reduce_all(node)
        _clamp_slice(node)
    # Dead nodes (e.g. make_fx's unused ``lift_fresh_copy`` of a 0-d
    # constant) would make their inputs look used to _check_inputs_kept.
    graph.eliminate_dead_code()
    return torch.fx.GraphModule(gm, graph)


@functools.cache
def _slice_ops() -> dict[Any, int]:
    """Slicing ops and the position of their ``dim`` argument."""
    aten = torch.ops.aten
    return {aten.slice.Tensor: 1, aten.slice_copy.Tensor: 1, aten.slice_scatter.default: 2}


def _clamp_slice(node: torch.fx.Node) -> None:
    """``slice(x, dim, start, end)`` clamps out-of-range bounds in aten
    (Hugging Face's sliding-window attention slices from ``-4095`` on a
    16-long axis), but torch_xla raises "Value out of range". Clamp them
    as aten does (``slice``, ``slice_copy``, ``slice_scatter``)."""
    if node.op != "call_function" or node.target not in _slice_ops():
        return
    at = _slice_ops()[node.target]
    names = ("dim", "start", "end", "step")
    defaults = (0, None, None, 1)
    args = list(node.args)
    vals = [args[at + k] if at + k < len(args) else node.kwargs.get(n, d)
            for k, (n, d) in enumerate(zip(names, defaults))]
    dim, start, end, step = vals
    src = node.args[0]
    val = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    if val is None or not hasattr(val, "shape") or not isinstance(dim, int) or \
            not all(isinstance(v, int) or v is None for v in (start, end, step)):
        return
    size = val.shape[dim]
    if not isinstance(size, int):
        return

    def clamp(v: int | None, default: int) -> int:
        if v is None:
            return default
        if v < 0:
            v += size
        return min(max(v, 0), size)

    lo = clamp(start, 0)
    hi = max(clamp(end, size), lo)
    node.args = (*args[:at], dim, lo, hi, step)
    node.kwargs = {}


@functools.cache
def _reduce_all_ops() -> frozenset[Any]:
    aten = torch.ops.aten
    return frozenset({aten.sum.dim_IntList, aten.mean.dim, aten.amax.default, aten.amin.default})


def _spell_out_reduce_all(node: torch.fx.Node) -> None:
    """``sum(x, dim=[])`` means "reduce every dimension" in aten (the
    decompositions of ``cross_entropy`` and ``nll_loss`` emit it), but
    torch_xla reduces none. Spell the dimensions out."""
    if node.op != "call_function" or node.target not in _reduce_all_ops():
        return
    if len(node.args) < 2 or node.args[1] not in ([], ()):
        return
    src = node.args[0]
    val = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    if val is None or not hasattr(val, "dim") or val.dim() == 0:
        return
    node.args = (src, list(range(val.dim())), *node.args[2:])


def _trace_value(shape: tuple[int, ...], dt: torch.dtype, index: int = 0) -> torch.Tensor:
    """A CPU tensor to trace with: not 0 or 1, which torch_xla would inline.
    A 0-d input gets a value no other input or graph constant is likely to
    have: torch_xla shares one device-data node between equal scalars, which
    would make the input disappear from the traced parameters."""
    if len(shape) == 0 and dt != torch.bool:
        return _scalar_trace_value(dt, index)
    if dt.is_floating_point or dt.is_complex:
        return torch.full(shape, 0.5, dtype=dt)
    if dt == torch.bool:
        return torch.ones(shape, dtype=dt)
    return torch.full(shape, 2, dtype=dt)


_BITS_AS_INT = {torch.float64: torch.int64, torch.float32: torch.int32,
                torch.float16: torch.int16, torch.bfloat16: torch.int16}


def _scalar_trace_value(dt: torch.dtype, index: int) -> torch.Tensor:
    """A distinct 0-d trace value for every input index (a model has one 0-d
    int64 ``num_batches_tracked`` per BatchNorm: MobileNetV3 has dozens, and
    two equal values would be merged): for floats the bit pattern of an odd
    value plus ``index``, for wide integers a large odd number plus
    ``index``."""
    if dt in _BITS_AS_INT:
        base = torch.tensor(0.4765625, dtype=dt).view(_BITS_AS_INT[dt])
        return (base + index).view(dt)
    if dt.is_complex:
        return torch.full((), 0.4765625 + index * 2.0**-12, dtype=dt)
    if dt.is_floating_point:  # fp8 kinds: few values
        return torch.full((), 0.4765625 + (index % 7) * 2.0**-3, dtype=dt)
    bits = torch.iinfo(dt).bits
    if bits >= 32:
        return torch.full((), 1_000_003 + index, dtype=dt)
    if bits == 16:
        return torch.full((), 10_007 + index % 20_000, dtype=dt)
    return torch.full((), 97 + index % 29, dtype=dt)


def _placeholder_names(gm: torch.fx.GraphModule) -> list[str]:
    return [n.name for n in gm.graph.nodes if n.op == "placeholder"]


def _used_scalars(gm: torch.fx.GraphModule, inputs: list[TensorSpec]) -> list[int]:
    """Positions of the 0-d inputs the graph reads (dead code aside)."""
    if all(len(shape) for shape, _ in inputs):
        return []
    graph = copy.deepcopy(gm.graph)
    graph.eliminate_dead_code()
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    return [i for i, (node, (shape, _)) in enumerate(zip(placeholders, inputs))
            if node.users and len(shape) == 0]


def _same_params(a: list[int | torch.Tensor], b: list[int | torch.Tensor]) -> bool:
    """The same parameter list: equal input positions, equal constants."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, int) or isinstance(y, int):
            if x != y:
                return False
        elif x.dtype != y.dtype or x.shape != y.shape or not torch.equal(
                x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)):
            return False
    return True


_engines: dict[str, LoweringEngine] = {}


def get_engine(name: str | None = None) -> LoweringEngine:
    """The engine named ``name`` (default: ``$HLOBRIDGE_TORCH_ENGINE`` or
    ``torch_xla_lazy``), created once."""
    name = name or config.get("HLOBRIDGE_TORCH_ENGINE") or TorchXlaLazyEngine.name
    eng = _engines.get(name)
    if eng is None:
        if name != TorchXlaLazyEngine.name:
            raise CompileBackendError(f"hlobridge backend: unknown lowering engine {name!r} "
                                      f"(available: {TorchXlaLazyEngine.name})")
        eng = _engines[name] = TorchXlaLazyEngine()
    return eng
