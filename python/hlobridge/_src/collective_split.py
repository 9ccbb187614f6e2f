"""A graph that calls ``torch.distributed`` functional collectives, run as
hlobridge programs with the collectives executed by ``torch.distributed``
between them (a graph break at each collective, made in the backend).

hlobridge programs run on one device in one process, so a collective
compiled into one would be a no-op (:mod:`hlobridge._src.distributed_guard`).
A *functional* collective (``_c10d_functional.all_reduce``,
``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_to_all_single``,
``broadcast``, their ``c10d_functional`` / ``_c10d_functional_autograd``
spellings, and ``wait_tensor``) is a pure function of its inputs and the
process group, so it can run eagerly on the real tensors, in the same order
on every rank, between the programs that produce its inputs and consume its
outputs. :func:`compile_graph` does that:

1. every node gets a *stage*: a collective runs in the stage of its latest
   input (as soon as it can), a compute node as late as its users allow
   (so that work independent of the collectives joins one program instead
   of making an extra one);
2. each stage's compute nodes become ONE sub-graph, compiled as a
   :class:`~hlobridge.dynamo.CompiledGraph` (stitched, cached, zero-copy);
3. a call runs stage 0's program, then stage 0's collectives (all of them
   issued before any ``wait_tensor``, so that the buckets of a gradient
   all-reduce are in flight together), then stage 1's program, ...

Every rank runs the same graph through the same schedule, so the ranks issue
their collectives in the same order. In-place collectives (a mutable schema),
the ``c10d`` ops that return ``Work`` objects and ``_dtensor`` ops are not
split: :func:`~hlobridge._src.distributed_guard.check_fx_collectives` refuses
them by name.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from hlobridge._src.distributed_guard import check_fx_collectives, is_splittable_collective
from hlobridge._src.dynamo.program import CompiledGraph
from hlobridge._src.entry_cache import MISS as _MISS

__all__ = ["SplitGraph", "compile_graph", "has_collectives"]


def _is_eager(node: torch.fx.Node, eager: set[torch.fx.Node]) -> bool:
    """Whether ``node`` runs in torch between programs: a splittable
    collective, or a ``getitem`` of one's (list) result."""
    if is_splittable_collective(node):
        return True
    return (node.op == "call_function" and node.target is operator.getitem
            and isinstance(node.args[0], torch.fx.Node) and node.args[0] in eager)


def has_collectives(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm``'s own graph calls a splittable collective."""
    return any(is_splittable_collective(n) for n in gm.graph.nodes)


def compile_graph(gm: torch.fx.GraphModule, label: str) -> CompiledGraph | SplitGraph:
    """``gm`` as ONE :class:`CompiledGraph`, or, if it calls functional
    collectives, as a :class:`SplitGraph` (see the module docs). Collectives
    that cannot be split are refused
    (:class:`~hlobridge.errors.CollectiveNotSupportedError`)."""
    if not has_collectives(gm):
        return CompiledGraph(gm, label)
    check_fx_collectives(gm, f"hlobridge ({label})", split=True)
    return SplitGraph(gm, label)


class _Stage:
    """One program (or none) and the collectives that run after it."""

    def __init__(self) -> None:
        self.program: CompiledGraph | None = None
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.eager: list[torch.fx.Node] = []


class SplitGraph:
    """A graph with collectives: hlobridge programs with ``torch.distributed``
    calls between them. Called like a :class:`CompiledGraph` (inputs as
    arguments or boxed in one list); returns the graph's outputs as a list."""

    def __init__(self, gm: torch.fx.GraphModule, label: str) -> None:
        self._boxed_call = True
        self.gm = gm
        self.label = label
        nodes = list(gm.graph.nodes)
        self._placeholders = [n.name for n in nodes if n.op == "placeholder"]
        self._constants: dict[str, Any] = {
            n.name: operator.attrgetter(str(n.target))(gm) for n in nodes if n.op == "get_attr"}
        out_node = next(n for n in nodes if n.op == "output")
        self._outputs: list[str | None] = [
            None if o is None else o.name  # type: ignore[union-attr]
            for o in _leaves(out_node.args[0])]
        stage_of, eager = _schedule(nodes)
        n_stages = max(stage_of.values(), default=0) + 1
        self.stages = [_Stage() for _ in range(n_stages)]
        compute: list[list[torch.fx.Node]] = [[] for _ in range(n_stages)]
        for n in nodes:
            if n not in stage_of:
                continue
            if n in eager:
                self.stages[stage_of[n]].eager.append(n)
            else:
                compute[stage_of[n]].append(n)
        for k, run in enumerate(compute):
            if run:
                self._build_stage(gm, k, run, stage_of)
        for stage in self.stages:
            stage.eager = _issue_order(stage.eager)
        self._signature: tuple[Any, ...] | None = None

    @property
    def pieces(self) -> list[CompiledGraph]:
        """The compiled programs, in the order they run."""
        return [s.program for s in self.stages if s.program is not None]

    @property
    def collectives(self) -> list[str]:
        """The collective ops run between the programs, in issue order."""
        return [str(n.target) for s in self.stages for n in s.eager
                if n.target is not operator.getitem]

    def _build_stage(self, gm: torch.fx.GraphModule, k: int, run: list[torch.fx.Node],
                     stage_of: dict[torch.fx.Node, int]) -> None:
        inside = set(run)
        graph = torch.fx.Graph()
        env: dict[torch.fx.Node, torch.fx.Node] = {}
        stage = self.stages[k]

        def arg(a: torch.fx.Node) -> torch.fx.Node:
            if a not in env:
                if a.op == "get_attr":
                    env[a] = graph.node_copy(a)
                else:
                    env[a] = graph.placeholder(a.name)
                    env[a].meta = dict(a.meta)
                    stage.inputs.append(a.name)
            return env[a]

        outs: list[torch.fx.Node] = []
        for n in run:
            for a in n.all_input_nodes:
                if a not in inside:
                    arg(a)
            env[n] = graph.node_copy(n, lambda a: env[a])
            if any(u not in inside for u in n.users):
                outs.append(n)
        graph.output(tuple(env[o] for o in outs))
        stage.outputs = [o.name for o in outs]
        if outs:
            stage.program = CompiledGraph(torch.fx.GraphModule(gm, graph),
                                          f"{self.label} [part {k}]")

    # -- running --------------------------------------------------------------
    def __call__(self, *args: Any) -> list[Any]:
        if len(args) == 1 and type(args[0]) is list:
            args = tuple(args[0])
        self._signature = _signature(args)
        env: dict[str, Any] = dict(zip(self._placeholders, args))
        env.update(self._constants)
        for stage in self.stages:
            if stage.program is not None:
                outs = stage.program(*(env[h] for h in stage.inputs))
                env.update(zip(stage.outputs, outs))
            for n in stage.eager:
                a, kw = torch.fx.node.map_arg((n.args, n.kwargs), lambda x: env[x.name])
                env[n.name] = n.target(*a, **kw)  # type: ignore[operator]
        return [None if h is None else env[h] for h in self._outputs]

    def try_fast(self, args: tuple[Any, ...] | list[Any]) -> Any:
        """Run if ``args`` have the last call's signature (shapes, dtypes),
        otherwise return the fast path's miss sentinel, with no side
        effects (as :meth:`CompiledGraph.try_fast`)."""
        if self._signature is None or _signature(args) != self._signature:
            return _MISS
        return self(*args)


def _leaves(out: Any) -> list[Any]:
    """The graph output's leaves (a flat tuple or list, possibly nested)."""
    if isinstance(out, (tuple, list)):
        return [leaf for o in out for leaf in _leaves(o)]
    return [out]


def _signature(args: tuple[Any, ...] | list[Any]) -> tuple[Any, ...]:
    return tuple((a.shape, a.dtype) if isinstance(a, torch.Tensor) else a for a in args)


def _schedule(nodes: list[torch.fx.Node]
              ) -> tuple[dict[torch.fx.Node, int], set[torch.fx.Node]]:
    """The stage of every call node (see the module docs), and the set of
    eager nodes. Placeholders, constants and the output node get none."""
    eager: set[torch.fx.Node] = set()
    asap: dict[torch.fx.Node, int] = {}
    calls = [n for n in nodes if n.op in ("call_function", "call_method", "call_module")]
    for n in calls:
        is_eager = _is_eager(n, eager)
        d = 0
        for a in n.all_input_nodes:
            if a in eager:
                # A program reads an eager result in the next stage; an
                # eager node right after the eager node it reads.
                d = max(d, asap[a] if is_eager else asap[a] + 1)
            elif a in asap:
                d = max(d, asap[a])
        asap[n] = d
        if is_eager:
            eager.add(n)
    # Compute that only feeds the graph output joins the last program.
    last = max((asap[n] for n in calls if n not in eager), default=0)
    stage: dict[torch.fx.Node, int] = {}
    for n in reversed(calls):
        if n in eager:
            stage[n] = asap[n]
            continue
        latest = last
        for u in n.users:
            if u.op == "output":
                continue
            latest = min(latest, stage[u])
        stage[n] = max(asap[n], latest) if n.users else asap[n]
    return stage, eager


def _issue_order(run: list[torch.fx.Node]) -> list[torch.fx.Node]:
    """``run`` (one stage's eager nodes, in graph order) reordered so that
    every collective is issued before any ``wait_tensor`` that does not
    have to come first (a topological order preferring non-waits)."""
    pending = list(run)
    inside = set(run)
    done: set[torch.fx.Node] = set()
    order: list[torch.fx.Node] = []
    while pending:
        ready = [n for n in pending if all(a in done or a not in inside
                                           for a in n.all_input_nodes)]
        pick = next((n for n in ready if not _is_wait(n)), ready[0])
        order.append(pick)
        done.add(pick)
        pending.remove(pick)
    return order


def _is_wait(node: torch.fx.Node) -> bool:
    t = node.target
    return isinstance(t, torch._ops.OpOverload) and t.name().endswith("::wait_tensor")
