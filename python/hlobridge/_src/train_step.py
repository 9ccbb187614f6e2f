"""Whole-step capture: a torch model's forward, backward and optimizer update
(torch or JAX) as ONE stitched program per input signature.

``torch.compile(model, backend="hlobridge")`` gives one program per graph
AOTAutograd hands over: a forward, a backward, and the optimizer runs in
eager torch. :func:`compile_train_step` captures the whole step instead:

1. the step (``loss_fn(model, *batch)``, ``torch.autograd.grad`` of the loss
   with respect to the parameters, ``optimizer.update``) is traced with
   ``make_fx`` on fake tensors into one functional aten graph, core-aten
   decomposed. :func:`hlobridge.call_jax` calls inside the model, the loss or
   the optimizer become ``hlobridge::call_jax`` nodes, and their backward
   (JAX's VJP) a second node;
2. the graph goes through the ``torch.compile`` backend's machinery
   (:class:`hlobridge.dynamo.CompiledGraph`): split at the JAX nodes, torch
   pieces lowered by the engine, JAX pieces by ``jax.jit``, stitched by the
   Rust core into ONE module, compiled once and cached;
3. each call runs that one executable on the parameters, buffers, optimizer
   state and batch (zero-copy in), and the program writes the new
   parameter, buffer and state values into those tensors' own memory, as
   ``torch.optim`` updates them (donated inputs, :func:`_in_place_updates`;
   the first call of a signature copies them in). ``TrainStep.state`` is a
   snapshot.

A ``torch.optim`` optimizer (:mod:`hlobridge._src.torch_optim`) keeps its
state in ``optimizer.state`` (read before and written after each call) and
its scalar hyperparameters become one program input, read from
``optimizer.param_groups`` on each call; gradient clipping
(``max_grad_norm``), accumulation over micro-batches (``accumulate``) and
the caller's autocast are part of the traced step.

Buffers the forward updates in place (BatchNorm running statistics) are
returned by the program and written back. A batch of new shapes or dtypes
traces and compiles again (one program per signature, cached), unless
``dynamic=True`` (or ``dynamic=(0, 1)``, the batch dimensions that vary):
then the step is traced ONCE with symbolic batch sizes and lowered into one
shape-polymorphic module, and a new shape costs one refinement and one XLA
compile (:mod:`hlobridge._src.dynamic.step`).

Data parallel (a ``DistributedDataParallel`` model or ``process_group=``,
:mod:`hlobridge._src.data_parallel`): the traced step also holds the gradient
all-reduce, and :mod:`hlobridge._src.collective_split` cuts it there into a
gradient program and an update program, with the all-reduce run by
``torch.distributed`` between them. Functional collectives in the loss or
the optimizer are cut the same way.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.utils._pytree as pytree

from hlobridge._src.errors import (
    ArgumentError,
    BridgeError,
    DataDependentError,
    DynamicShapeError,
)
from hlobridge._src.entry_cache import MISS as _MISS
from hlobridge._src.optim import Optimizer
from hlobridge._src.torch_optim import TorchOptimizer

_Tensor = torch.Tensor

__all__ = ["TrainStep", "compile_train_step"]

_counter = itertools.count()


@contextlib.contextmanager
def _compiling() -> Iterator[None]:
    """``torch.compiler.is_compiling()`` is true while the step's forward and
    loss are traced, as under Dynamo and ``torch.export``: model code that
    checks it takes its compile-friendly path (transformers'
    mixture-of-experts layers otherwise read ``data_ptr()`` of the traced
    tensors, which fake tensors refuse)."""
    old = torch.compiler._is_compiling_flag
    torch.compiler._is_compiling_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag = old


@dataclass
class _Traced:
    """One input signature's traced and compiled step."""

    graph: Any  # hlobridge._src.dynamo.program.CompiledGraph
    state_spec: pytree.TreeSpec
    mutated_buffers: list[str]
    """Buffers (by name) the forward updates, in program-output order."""
    mutated_buffer_tensors: list[torch.Tensor]
    """The same buffers."""
    n_batch: int
    """Batch arguments (top level) the trace was made for."""
    aux_spec: pytree.TreeSpec | None = None
    """Structure of ``loss_fn``'s auxiliary output (``has_aux``)."""
    n_aux: int = 0
    n_state_out: int = 0
    """Optimizer-state leaves among the outputs."""
    out_state_spec: pytree.TreeSpec | None = None
    """Structure of the new state a torch optimizer's update returns."""
    structure: Any = None
    """The torch optimizer's flags and the autocast state traced for."""
    unused: frozenset[str] = frozenset()
    """Parameters the loss does not depend on (no gradient)."""
    key: Any = None
    """``dynamic=``: the structure (batch, state, optimizer) it was traced
    for; its graph is a :class:`~hlobridge._src.dynamic.step.DynamicStep`."""


def _autocast_state() -> tuple[bool, torch.dtype] | None:
    """The caller's CPU autocast state, re-entered around ``loss_fn`` in the
    trace (None: off)."""
    if torch.is_autocast_enabled("cpu"):
        return (True, torch.get_autocast_dtype("cpu"))
    return None


def _split(batch: tuple[Any, ...], k: int, i: int) -> tuple[Any, ...]:
    """Micro-batch ``i`` of ``k``: every tensor leaf's dim-0 slice."""
    def one(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if t.dim() == 0 or t.shape[0] % k:
            shape = tuple(d.node.hint if isinstance(d, torch.SymInt) else d for d in t.shape)
            raise ArgumentError(f"compile_train_step(accumulate={k}): every batch tensor's "
                                f"first dimension must be a multiple of {k}; got shape "
                                f"{shape}")
        n = t.shape[0] // k
        return t[i * n:(i + 1) * n]
    return pytree.tree_map(one, batch)  # type: ignore[no-any-return]


class TrainStep:
    """A compiled training step; see :func:`compile_train_step`."""

    def __init__(self, model: torch.nn.Module, loss_fn: Callable[..., Any],
                 optimizer: Optimizer | torch.optim.Optimizer, *, has_aux: bool = False,
                 name: str | None = None, process_group: Any = None,
                 max_grad_norm: float | None = None, accumulate: int = 1,
                 dynamic: Any = False) -> None:
        from hlobridge._src.data_parallel import resolve
        from hlobridge._src.dynamic.step import dynamic_dims

        # A DDP wrapper or process_group=: gradients all-reduced between a
        # gradient and an update program (hlobridge._src.data_parallel); FSDP and
        # DTensors refused; a one-rank DDP unwrapped (docs/distributed.md).
        model, self._dp = resolve(model, process_group)
        self._dims = dynamic_dims(dynamic)
        if self._dims is not None and self._dp is not None:
            raise ArgumentError("compile_train_step: dynamic shapes with data parallelism are "
                                "not supported (the step is cut into two programs around "
                                "the all-reduce); use dynamic=False")
        self.model = model
        self.has_aux = has_aux
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.name = name or f"train_step #{next(_counter)}"
        self._params = {k: p for k, p in model.named_parameters() if p.requires_grad}
        if not self._params:
            raise ArgumentError("compile_train_step: the model has no parameters that require "
                                "grad")
        # Buffers and frozen parameters are program inputs the optimizer does
        # not touch (the forward may still update buffers in place).
        self._buffers = {**dict(model.named_buffers()),
                         **{k: p for k, p in model.named_parameters() if not p.requires_grad}}
        self._param_list = list(self._params.values())
        self._buffer_list = list(self._buffers.values())
        if not (isinstance(accumulate, int) and accumulate >= 1):
            raise ArgumentError(f"compile_train_step: accumulate must be an int >= 1, got "
                                f"{accumulate!r}")
        if accumulate > 1 and has_aux:
            raise ArgumentError("compile_train_step: has_aux=True with accumulate > 1 is not "
                                "supported (which micro-batch's aux?)")
        self.accumulate = accumulate
        self.max_grad_norm = None if max_grad_norm is None else float(max_grad_norm)
        self._torch: TorchOptimizer | None = None
        if isinstance(optimizer, torch.optim.Optimizer):
            # State in optimizer.state, hyperparameters read from its
            # param_groups on every call (hlobridge._src.torch_optim).
            self._torch = TorchOptimizer(
                optimizer, self._params,
                [p for p in model.parameters() if not p.requires_grad])
            self._state_leaves, self._state_spec = [], pytree.tree_flatten(None)[1]
        else:
            if not (callable(getattr(optimizer, "init", None))
                    and callable(getattr(optimizer, "update", None))):
                from hlobridge._src.torch_optim import optimizer_kind

                optimizer_kind(optimizer)  # type: ignore[arg-type]  # raises, listing what works
            with torch.no_grad():
                state = optimizer.init({k: p.detach() for k, p in self._params.items()})
            self._state_leaves, self._state_spec = pytree.tree_flatten(state)
        self._traced: dict[tuple[Any, ...], _Traced] = {}
        self._dynamic: list[_Traced] = []
        """``dynamic=``: the symbolic traces, each serving every signature
        its guards admit (several keys of ``_traced`` share one)."""
        self._last: _Traced | None = None
        """The last call's trace, tried first when the batch is a flat tuple
        of plain tensors."""
        self._lock = threading.Lock()

    # -- running --------------------------------------------------------------
    def __call__(self, *batch: Any) -> Any:
        """Run one step on ``batch`` (the arguments after ``model`` of
        ``loss_fn``); updates the model's parameters (and mutated buffers)
        and the optimizer state; returns the loss (before the update), or
        ``(loss, aux)`` with ``has_aux``."""
        if self._dp is not None:
            self._dp.check_call(self.name)
        state_leaves, state_spec, hyper, structure = self._optimizer_inputs()
        last = self._last
        if last is not None and len(batch) == last.n_batch and \
                all(type(b) is _Tensor for b in batch) and last.structure == structure and \
                last.state_spec == state_spec:
            # Hot path: the last signature's program, checked and run natively
            # (a miss, e.g. a new batch shape, falls through to a new trace).
            grad = torch.is_grad_enabled()
            torch._C._set_grad_enabled(False)
            try:
                outs = last.graph.try_fast(
                    (*self._param_list, *self._buffer_list, *state_leaves, *hyper, *batch))
            finally:
                torch._C._set_grad_enabled(grad)
            if outs is not _MISS:
                return self._apply(outs, last)
        return self._call_traced(batch, state_leaves, state_spec, hyper, structure)

    def _optimizer_inputs(self) -> tuple[list[Any], pytree.TreeSpec, list[torch.Tensor], Any]:
        """The optimizer state's leaves and structure, the hyperparameter
        inputs (a torch optimizer's, read from its param_groups now) and the
        structure key (a torch optimizer's flags, the autocast state)."""
        t = self._torch
        ac = _autocast_state()
        if t is None:
            return self._state_leaves, self._state_spec, [], (None, ac)
        flags = t.layout()
        leaves, spec = pytree.tree_flatten(t.state())
        return leaves, spec, t.hyper(), (flags, ac)

    def _call_traced(self, batch: tuple[Any, ...], state_leaves: list[Any],
                     state_spec: pytree.TreeSpec, hyper: list[torch.Tensor],
                     structure: Any) -> Any:
        batch_leaves, batch_spec = pytree.tree_flatten(batch)
        if self._dims is not None:
            batch_leaves = _dynamic_leaves(batch_leaves, self.name)
        params = [p.detach() for p in self._param_list]
        buffers = [b.detach() for b in self._buffer_list]
        flat = [*params, *buffers, *state_leaves, *hyper, *batch_leaves]
        key = (batch_spec, state_spec, structure,
               *((t.shape, t.dtype, t.device) if isinstance(t, torch.Tensor) else t
                 for t in flat))
        traced = self._traced.get(key)
        if traced is None:
            with self._lock:
                traced = self._traced.get(key)
                if traced is None and self._dims is not None:
                    traced = self._admitting(flat, (batch_spec, state_spec, structure))
                if traced is None:
                    try:
                        traced = self._trace(flat, batch_spec, state_spec, len(state_leaves),
                                             len(hyper), structure)
                    except Exception as e:
                        # dynamic=: sizes outside a value range of an earlier
                        # trace that the model cannot take either.
                        for t in self._dynamic:
                            err = t.graph.violation(flat)
                            if err is not None and not isinstance(e, BridgeError):
                                raise err from e
                        raise
                    if traced.key is not None:
                        self._dynamic.append(traced)
                self._traced[key] = traced
        outs = traced.graph(*flat)
        flat_batch = batch_spec == pytree.tree_flatten(tuple(batch_leaves))[1]
        self._last = traced if flat_batch else None
        # The first call of a signature runs without donation: its new
        # parameter and buffer values are copied in, so that they are
        # updated in place on every call, as torch.optim updates them.
        return self._apply(outs, traced, copy_in=bool(getattr(traced.graph, "mutations", ())))

    def _apply(self, outs: list[Any], traced: _Traced, copy_in: bool = False) -> Any:
        """Put the program's results in place: parameters and buffers (a
        value updated in place (``_in_place_updates``) comes back in the
        tensor's own memory; otherwise copied in with ``copy_in``, else
        swapped in by ``.data``, zero-copy), the optimizer state's leaves (a
        torch optimizer's into ``optimizer.state``)."""
        n_p, n_s, n_a = len(self._param_list), traced.n_state_out, traced.n_aux
        pairs = [*zip(self._param_list, outs[1:1 + n_p]),
                 *zip(traced.mutated_buffer_tensors, outs[1 + n_p + n_s + n_a:])]
        for t, v in pairs:
            if v is t or v.data_ptr() == t.data_ptr():
                continue  # written in place (by the native hot path, or the graph's)
            if copy_in and v.shape == t.shape and v.dtype == t.dtype:
                with torch.no_grad():
                    t.data.copy_(v)
            else:
                # Assigning .data records nothing for autograd.
                t.data = v
        new_state = outs[1 + n_p:1 + n_p + n_s]
        if self._torch is not None:
            assert traced.out_state_spec is not None
            self._torch.store(pytree.tree_unflatten(new_state, traced.out_state_spec),
                              traced.unused)
        else:
            self._state_leaves = new_state
        if traced.aux_spec is not None:
            aux = pytree.tree_unflatten(outs[1 + n_p + n_s:1 + n_p + n_s + n_a], traced.aux_spec)
            return outs[0], aux
        return outs[0]

    @property
    def state(self) -> Any:
        """The optimizer state (the pytree ``optimizer.init`` made): a
        snapshot of the latest values, which later steps leave as it is (the
        step updates its own state in place). A torch optimizer's is
        ``optimizer.state``, updated in place as ``optimizer.step()`` does."""
        if self._torch is not None:
            return self._torch.opt.state
        return pytree.tree_unflatten([_snapshot(t) for t in self._state_leaves],
                                     self._state_spec)

    @state.setter
    def state(self, value: Any) -> None:
        if self._torch is not None:
            raise ArgumentError("compile_train_step: with a torch optimizer the state is "
                                "optimizer.state (use optimizer.load_state_dict)")
        leaves, spec = pytree.tree_flatten(value)
        if spec != self._state_spec:
            self._last = None  # a new structure needs a new trace
        # Copied: the step updates its state in place, the caller's stays.
        self._state_leaves, self._state_spec = [_snapshot(t) for t in leaves], spec

    def _admitting(self, flat: list[Any], key: Any) -> _Traced | None:
        """``dynamic=``: a symbolic trace of this structure whose guards
        hold for ``flat``'s sizes."""
        for t in self._dynamic:
            if t.key == key and t.graph.admits(flat):
                return t
        return None

    @property
    def graphs(self) -> list[Any]:
        """The compiled graph of each input signature seen so far
        (:class:`hlobridge.dynamo.CompiledGraph`); with ``dynamic=``, of each
        symbolic trace (:class:`~hlobridge._src.dynamic.step.DynamicStep`,
        whose ``programs`` hold one program per shape)."""
        out: list[Any] = []
        for t in self._traced.values():
            if not any(t.graph is g for g in out):
                out.append(t.graph)
        return out

    # -- tracing --------------------------------------------------------------
    def _trace(self, flat: list[Any], batch_spec: pytree.TreeSpec,
               state_spec: pytree.TreeSpec, n_state: int, n_hyper: int,
               structure: Any) -> _Traced:
        from torch.fx.experimental.proxy_tensor import make_fx

        from hlobridge._src.collective_split import compile_graph
        from hlobridge._src.distributed_guard import DifferentiableCollectiveWatch
        from hlobridge._src.dynamo.program import CompiledGraph, name_inputs
        from hlobridge._src.dynamo.engine import decompositions

        pnames = list(self._params)
        bnames = list(self._buffers)
        n_p, n_b = len(pnames), len(bnames)
        model, loss_fn, optimizer = self.model, self.loss_fn, self.optimizer
        has_aux = self.has_aux
        dp = self._dp
        module_buffers = {k for k, _ in model.named_buffers()}
        mutated: list[str] = []
        aux_box: list[pytree.TreeSpec] = []
        out_box: list[pytree.TreeSpec] = []
        unused: set[str] = set()
        torch_opt = self._torch
        k_acc, max_norm = self.accumulate, self.max_grad_norm
        ac = structure[1]

        def run_loss(forward: Any, batch: Any) -> Any:
            # Only the model's own code sees is_compiling(): the backward,
            # the optimizer and the functionalizing pass trace as before.
            with _compiling():
                if ac is None:
                    return loss_fn(forward, *batch)
                with torch.autocast("cpu", dtype=ac[1]):
                    return loss_fn(forward, *batch)

        def step(*xs: Any) -> list[torch.Tensor]:
            params = dict(zip(pnames, xs[:n_p]))
            buffers = dict(zip(bnames, xs[n_p:n_p + n_b]))
            state = pytree.tree_unflatten(list(xs[n_p + n_b:n_p + n_b + n_state]), state_spec)
            o = n_p + n_b + n_state
            hyper = list(xs[o:o + n_hyper])
            batch = pytree.tree_unflatten(list(xs[o + n_hyper:]), batch_spec)
            shared = {k: b for k, b in buffers.items() if k in module_buffers}
            synced = shared if dp is None else dp.broadcast(shared)
            if synced is not shared:
                # DDP's broadcast_buffers: the forward reads (and updates)
                # rank 0's buffers; written back below, they come back as
                # mutated buffers.
                buffers = {**buffers, **synced}
            watch = DifferentiableCollectiveWatch()
            with torch.enable_grad():
                live = {k: v.detach().requires_grad_(True) for k, v in params.items()}

                def forward(*args: Any, **kwargs: Any) -> Any:
                    return torch.func.functional_call(model, {**live, **buffers}, args, kwargs)

                losses: list[torch.Tensor] = []
                grads: list[torch.Tensor | None] = [None] * n_p
                for i in range(k_acc):
                    micro = batch if k_acc == 1 else _split(batch, k_acc, i)
                    with watch:
                        loss = run_loss(forward, micro)
                    # A collective on the way to the loss has no backward.
                    watch.check(f"compile_train_step ({self.name})")
                    aux_leaves: list[Any] = []
                    if has_aux:
                        if not (isinstance(loss, tuple) and len(loss) == 2):
                            raise ArgumentError("compile_train_step(has_aux=True): loss_fn "
                                                "must return (loss, aux)")
                        loss, aux = loss
                        aux_leaves, aux_spec = pytree.tree_flatten(aux)
                        if not all(isinstance(a, torch.Tensor) for a in aux_leaves):
                            raise ArgumentError("compile_train_step: aux must be a pytree of "
                                                "tensors")
                        aux_box[:] = [aux_spec]
                    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                        raise ArgumentError("compile_train_step: loss_fn must return a scalar "
                                            "tensor")
                    # As eager accumulation: (loss / k).backward() per micro-batch.
                    part = torch.autograd.grad(loss if k_acc == 1 else loss / k_acc,
                                               list(live.values()), allow_unused=True)
                    grads = [a if b is None else b if a is None else a + b
                             for a, b in zip(grads, part)]
                    losses.append(loss.detach().reshape(()))
                if synced is not shared:
                    for k, t in synced.items():
                        shared[k].copy_(t)
            loss = losses[0] if k_acc == 1 else torch.stack(losses).mean()
            unused.update(k for k, gr in zip(pnames, grads) if gr is None)
            g = {k: (gr if gr is not None else torch.zeros_like(params[k]))
                 for k, gr in zip(pnames, grads)}
            if dp is not None:
                g = dp.all_reduce_mean(pnames, g)  # between two programs
            if max_norm is not None:
                # clip_grad_norm_: the parameters that have a gradient.
                used = [g[k] for k in pnames if k not in unused]
                total = torch.linalg.vector_norm(
                    torch.stack([torch.linalg.vector_norm(x) for x in used]))
                coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
                g = {k: x if k in unused else x * coef for k, x in g.items()}
            if torch_opt is not None:
                st, fresh = state
                new_params, new_list = torch_opt.update(
                    params, {k: (None if k in unused else x) for k, x in g.items()}, st, fresh,
                    hyper)
                new_leaves, new_spec = pytree.tree_flatten(new_list)
                out_box[:] = [new_spec]
            else:
                new_params, new_state = optimizer.update(params, g, state)  # type: ignore[union-attr]
                new_leaves, new_spec = pytree.tree_flatten(new_state)
                if new_spec != state_spec:
                    raise ArgumentError(f"compile_train_step: optimizer.update returned a state "
                                        f"of structure {new_spec}, the state it got was "
                                        f"{state_spec}")
            return [loss, *(new_params[k] for k in pnames), *new_leaves,
                    *(a.detach() for a in aux_leaves)]

        from torch.func import functionalize

        # Two passes: autograd cannot run inside functorch's functionalize,
        # so the step is traced first as it is (in-place ops included), and
        # that plain aten graph is then traced again, functionalized.
        # Attention is traced through its math formulation (torch_xla lowers
        # neither the fused CPU flash-attention kernel nor its backward).
        from torch.nn.attention import SDPBackend, sdpa_kernel

        # The caller's autocast is re-entered around loss_fn only (run_loss):
        # the backward and the update run as eager's do, outside it.
        dims = self._dims
        mode = "fake" if dims is None else "symbolic"
        from hlobridge._src.dynamic.step import paused_gc, pinned_dims, symbolic_inputs

        def trace(args: list[Any]) -> torch.fx.GraphModule:
            try:
                with sdpa_kernel([SDPBackend.MATH]), torch.autocast("cpu", enabled=False), \
                        (paused_gc() if dims is not None else contextlib.nullcontext()):
                    raw = make_fx(step, decomposition_table=decompositions(),
                                  tracing_mode=mode)(*args)
                    return make_fx(functionalize(raw, remove="mutations_and_views"),
                                   tracing_mode=mode)(*args)
            except _data_dependent_errors() as e:
                raise DataDependentError(
                    f"compile_train_step ({self.name}): the step depends on tensor values "
                    f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}). A "
                    f"captured step is one program for all values: replace Python control "
                    f"flow on tensors (`if loss > x`, `.item()`, `.tolist()`, boolean-mask "
                    f"indexing, nonzero) with tensor ops such as torch.where / masking by "
                    f"multiplication, or move the decision out of the step (compute it "
                    f"eagerly and pass it in the batch, or pick between two compiled "
                    f"steps)") from e

        # The step's inputs by name, for hb.viz and the shape errors.
        names = [*pnames, *bnames, *(f"opt_state.{i}" for i in range(n_state)),
                 *(f"hyper.{i}" for i in range(n_hyper)),
                 *(f"batch.{i}" for i in range(len(flat) - n_p - n_b - n_state - n_hyper))]

        def finish(gm: torch.fx.GraphModule) -> None:
            mutated.clear()
            if dp is not None:
                _drop_input_shaped_copies(gm)
            _lift_buffer_mutations(gm, n_p, bnames, mutated)

        graph: Any
        if dims is None:
            gm = trace(flat)
            finish(gm)
            graph = compile_graph(gm, self.name)
            name_inputs(graph, names, aot=False)
            if isinstance(graph, CompiledGraph):
                graph.alias_mutated_inputs(_in_place_updates(
                    n_p, bnames, mutated, state_spec, out_box[0] if out_box else state_spec,
                    aux_box[0].num_leaves if aux_box else 0, torch_opt is not None))
        else:
            # dynamic=: the batch's sizes symbolic (hlobridge._src.dynamic.step).
            from hlobridge._src.dynamic.step import DynamicStep

            n_fixed = len(flat) - batch_spec.num_leaves
            args = symbolic_inputs(flat, n_fixed, dims)
            gm = trace(args)
            finish(gm)
            try:
                graph = DynamicStep(gm, self.name, names, args)
            except DynamicShapeError:
                # Sizes the step ties to constants by an equation JAX cannot
                # prove (an image's height x width flattened into a Linear):
                # traced again with those sizes static.
                pinned = pinned_dims(args)
                if not pinned:
                    raise
                args = symbolic_inputs(flat, n_fixed, dims, static=pinned)
                gm = trace(args)
                finish(gm)
                graph = DynamicStep(gm, self.name, names, args)
        n_out = out_box[0].num_leaves if out_box else n_state
        return _Traced(graph=graph, state_spec=state_spec,
                       key=None if dims is None else (batch_spec, state_spec, structure),
                       n_state_out=n_out, out_state_spec=out_box[0] if out_box else None,
                       structure=structure, unused=frozenset(unused),
                       mutated_buffers=mutated,
                       mutated_buffer_tensors=[self._buffers[n] for n in mutated],
                       n_batch=batch_spec.num_children,
                       aux_spec=aux_box[0] if aux_box else None,
                       n_aux=aux_box[0].num_leaves if aux_box else 0)


def _dynamic_leaves(leaves: list[Any], name: str) -> list[Any]:
    """``dynamic=``: the batch's leaves, tensors only (a Python number
    would become a symbolic value of the trace), contiguous (strides are
    no part of a symbolic trace's signature)."""
    out = []
    for t in leaves:
        if not isinstance(t, torch.Tensor):
            raise ArgumentError(f"compile_train_step ({name}, dynamic=...): every batch leaf "
                                f"must be a tensor, got a {type(t).__name__}; pass it as a "
                                f"0-d tensor or bind it in loss_fn")
        out.append(t if t.is_contiguous() else t.contiguous())
    return out


def _data_dependent_errors() -> tuple[type[BaseException], ...]:
    """What tracing raises where the step branches on tensor data."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    return (GuardOnDataDependentSymNode, DataDependentOutputException,
            DynamicOutputShapeException)


def _drop_input_shaped_copies(gm: torch.fx.GraphModule) -> None:
    """``aten.copy(input, src)`` with ``src`` of the input's shape and dtype
    is ``src``: use it directly. (Writing the broadcast buffers back leaves
    such copies; the program would read the input only for its shape, which
    torch_xla drops for a 0-d input such as ``num_batches_tracked``.)"""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.copy.default:
            continue
        dst, src = node.args[0], node.args[1]
        if not (isinstance(dst, torch.fx.Node) and dst.op == "placeholder"
                and isinstance(src, torch.fx.Node)):
            continue
        a, b = dst.meta.get("val"), src.meta.get("val")
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and \
                a.shape == b.shape and a.dtype == b.dtype and a.device == b.device:
            node.replace_all_uses_with(src)
            gm.graph.erase_node(node)
            changed = True
    if changed:
        gm.recompile()


def _snapshot(leaf: Any) -> Any:
    """A copy of a state leaf that the step's in-place updates leave alone."""
    return leaf.clone() if isinstance(leaf, torch.Tensor) else leaf


def _in_place_updates(n_params: int, bnames: list[str], mutated: list[str],
                      state_spec: pytree.TreeSpec, out_state_spec: pytree.TreeSpec, n_aux: int,
                      torch_state: bool) -> list[tuple[int, int]]:
    """``(graph output, graph input)`` pairs of the step's values that are
    updated in place, as ``torch.optim`` updates them: each parameter, each
    optimizer state leaf (matched by its pytree path: a torch optimizer's
    input state is ``(per-parameter dicts, fresh vector)``, its output the
    dicts alone) and each mutated buffer. The program then writes them into
    the tensors' own memory (donated on the hot path), so a step needs no
    second copy of the model and its state. Graph outputs: ``loss``, the new
    parameters, the new state leaves, the aux leaves, the mutated buffers;
    graph inputs: parameters, buffers, state leaves, hyperparameters,
    batch. Pairs whose types differ are dropped when the program is built
    (:func:`hlobridge._src.dynamo.aliasing.program_aliases`)."""
    def paths(spec: pytree.TreeSpec) -> list[tuple[Any, ...]]:
        tree = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
        return [tuple(p) for p, _ in pytree.tree_flatten_with_path(tree)[0]]

    n_b = len(bnames)
    state_in = {p: i for i, p in enumerate(paths(state_spec))}
    pairs = [(1 + i, i) for i in range(n_params)]
    for j, path in enumerate(paths(out_state_spec)):
        i = state_in.get((pytree.SequenceKey(0), *path) if torch_state else path)
        if i is not None:
            pairs.append((1 + n_params + j, n_params + n_b + i))
    first_buffer = 1 + n_params + out_state_spec.num_leaves + n_aux
    pairs += [(first_buffer + m, n_params + bnames.index(name)) for m, name in enumerate(mutated)]
    return pairs


def _lift_buffer_mutations(gm: torch.fx.GraphModule, n_params: int, bnames: list[str],
                           mutated: list[str]) -> None:
    """Turn functionalization's trailing ``copy_(buffer, new_value)`` nodes
    into extra graph outputs (appended in order), recording the buffer
    names in ``mutated``. Any other input mutation is an error."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    index = {n: i for i, n in enumerate(placeholders)}
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    extra: list[torch.fx.Node] = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.copy_.default:
            continue
        dst, src = node.args[0], node.args[1]
        i = index.get(dst)  # type: ignore[arg-type]
        if i is None or not n_params <= i < n_params + len(bnames):
            raise ArgumentError("compile_train_step: the step mutates one of its inputs in "
                                "place (a parameter, the optimizer state or the batch); only "
                                "module buffers may be updated in place")
        mutated.append(bnames[i - n_params])
        extra.append(src)  # type: ignore[arg-type]
        node.replace_all_uses_with(src)  # type: ignore[arg-type]
        gm.graph.erase_node(node)
    if extra:
        outs = list(out_node.args[0])  # type: ignore[arg-type]
        out_node.args = (outs + extra,)
        gm.recompile()


def compile_train_step(model: torch.nn.Module, loss_fn: Callable[..., Any],
                       optimizer: Optimizer | torch.optim.Optimizer, *, has_aux: bool = False,
                       name: str | None = None, process_group: Any = None,
                       max_grad_norm: float | None = None, accumulate: int = 1,
                       dynamic: bool | int | tuple[int, ...] = False) -> TrainStep:
    """Compile ``model``'s whole training step into ONE program.

    ``loss_fn(model, *batch)`` computes the loss, calling ``model`` like the
    module (it is a functional stand-in bound to the current parameters).
    ``optimizer`` is a ``torch.optim.SGD``, ``Adam``, ``AdamW`` or
    ``RMSprop`` (any options and parameter groups; its state stays in
    ``optimizer.state`` and its scalar hyperparameters, read from
    ``optimizer.param_groups`` on each call, are program inputs, so an
    ``lr_scheduler`` never recompiles: :mod:`hlobridge._src.torch_optim`;
    another torch optimizer raises
    :class:`~hlobridge.errors.UnsupportedOptimizerError`), or an
    :mod:`hlobridge.optim` optimizer (``SGD``, ``Adam``, ``AdamW``, or a JAX
    update through ``JaxOptimizer``). JAX functions called with
    :func:`hlobridge.call_jax` anywhere in the step are stitched into the same
    program.

    ``step = compile_train_step(model, loss_fn, opt)``; then ``loss =
    step(x, y)`` runs forward, backward and the update, and leaves the new
    values in ``model``'s parameters. :func:`hlobridge.last_receipt` shows the
    one executable and its torch and JAX segments.

    With ``has_aux=True``, ``loss_fn`` returns ``(loss, aux)`` where ``aux``
    is a pytree of tensors (logits, metrics...), computed in the same
    program and returned as ``(loss, aux)``.

    ``max_grad_norm=`` clips the gradients first, as
    ``torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)``.
    ``accumulate=k`` splits every batch tensor along dim 0 into ``k``
    micro-batches and accumulates their gradients in the one program, as
    ``(loss_fn(...) / k).backward()`` per micro-batch then one optimizer
    step; the loss returned is the micro-batches' mean.

    Mixed precision: ``torch.autocast("cpu", dtype=torch.bfloat16)`` inside
    ``loss_fn`` is traced as eager runs it; a call made under an autocast
    context traces ``loss_fn`` under it (the backward and the update run
    outside it, as in eager). Python control flow on tensor values raises
    :class:`~hlobridge.errors.DataDependentError` with what to do instead.

    Data parallel (``docs/distributed.md``, :mod:`hlobridge._src.data_parallel`):
    with a model wrapped in ``DistributedDataParallel``, or with
    ``process_group=`` (a ``torch.distributed`` group; its rank 0's
    parameters are broadcast once), each rank runs a gradient program, the
    gradients are averaged over the group through ``torch.distributed``
    (bucketed, as DDP does), and an update program applies them: the result
    equals DDP eager. FSDP (``FullyShardedDataParallel``, ``fully_shard``)
    and DTensor parameters raise
    :class:`~hlobridge.errors.DistributedNotSupportedError`.
    Functional collectives in the step run between programs; one on a value
    that requires grad (no backward) raises
    :class:`~hlobridge.errors.CollectiveNotSupportedError`.

    Dynamic shapes (``docs/dynamic_shapes.md``): with ``dynamic=True`` every
    dimension of every batch tensor is symbolic; ``dynamic=(0, 1)`` (or
    ``0``) names the batch dimensions that vary (each batch tensor that has
    them). The step is traced ONCE and lowered into one module with ``?``
    dimensions; each new shape is refined to it in Rust and compiled through
    the compile cache, with no retrace. Sizes 0 and 1, and sizes equal at
    the first call that later differ, get a second symbolic trace (the
    first trace's guards do not hold for them). Shapes that violate the
    module's assertions raise :class:`~hlobridge.errors.ShapeAssertionError`
    naming the dimension; a step that cannot be traced symbolically raises
    :class:`~hlobridge.errors.DynamicShapeError`.
    """
    return TrainStep(model, loss_fn, optimizer, has_aux=has_aux, name=name,
                     process_group=process_group, max_grad_norm=max_grad_norm,
                     accumulate=accumulate, dynamic=dynamic)
