"""Splitting an FX graph at ``hlobridge::call_jax`` nodes.

The graph's nodes are walked in order; runs of aten nodes become
:class:`TorchPiece` s (each its own small :class:`torch.fx.GraphModule`) and
each ``call_jax`` node a :class:`JaxPiece`. Values are named by *handles*
(the FX node names), which are what the stitcher wires together:
a piece's inputs are the handles it reads from graph inputs, constants or
earlier pieces, its outputs the handles later pieces or the graph output
read.

Before splitting, the graph is checked for what a pure StableHLO program
cannot express (see :func:`check_graph`).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from hlobridge._src.custom_op import OP
from hlobridge._src.errors import DataDependentError, InputMutationError, UnsupportedOpError

__all__ = ["TorchPiece", "JaxPiece", "Partition", "check_graph", "partition"]


@dataclass
class TorchPiece:
    """A run of aten nodes, as a graph module."""

    name: str
    gm: torch.fx.GraphModule
    inputs: list[str]
    outputs: list[str]


@dataclass
class JaxPiece:
    """One ``call_jax`` node: registry key, input handles, output handles (one
    per output of the JAX function; unused outputs get a fresh handle)."""

    name: str
    key: str
    inputs: list[str]
    outputs: list[str]


@dataclass
class Partition:
    """The pieces of a graph, in execution order, and how its inputs and
    outputs map to handles."""

    placeholders: list[str]
    """Handle of each graph input, by position."""
    constants: dict[str, torch.Tensor]
    """Handles of tensors stored on the graph module (``get_attr``)."""
    pieces: list[TorchPiece | JaxPiece] = field(default_factory=list)
    outputs: list[str | None] = field(default_factory=list)
    """Handle of each graph output (``None`` for a ``None`` output)."""


def _is_call_jax(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target is OP


def _op_name(node: torch.fx.Node) -> str:
    t = node.target
    return str(getattr(t, "name", lambda: t)()) if hasattr(t, "name") else str(t)


def check_graph(gm: torch.fx.GraphModule) -> None:
    """Refuse what cannot be one pure program: collectives (one-device
    no-ops, :mod:`hlobridge._src.distributed_guard`), in-place mutation of graph
    inputs, data-dependent shapes/values, random ops (their seed would be
    baked in)."""
    from hlobridge._src.distributed_guard import check_fx_collectives

    check_fx_collectives(gm)
    placeholders = {n for n in gm.graph.nodes if n.op == "placeholder"}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is not None and schema.is_mutable:
            mutated = [a for a in node.args if isinstance(a, torch.fx.Node)]
            if any(a in placeholders for a in mutated):
                raise InputMutationError(
                    f"hlobridge backend: {_op_name(node)} mutates a graph input in place; "
                    f"StableHLO programs are pure (AOTAutograd normally functionalizes this: "
                    f"do not pass keep_inference_input_mutations=True)")
            raise UnsupportedOpError(f"hlobridge backend: mutating op {_op_name(node)} is not "
                                     f"supported")
        tags = getattr(node.target, "tags", ())
        if torch.Tag.nondeterministic_seeded in tags and not _random_is_inert(node):
            raise UnsupportedOpError(
                f"hlobridge backend: random op {_op_name(node)} is not supported: its result "
                f"depends on tensor values, so it cannot be drawn outside the program, and "
                f"inside it the seed would be baked in (dropout, rand/randn(_like) and "
                f"bernoulli(p) are drawn by torch as program inputs); pass the random tensor "
                f"in instead")
        val = node.meta.get("val")
        if val is not None and free_unbacked_symbols(val):
            raise DataDependentError(
                f"hlobridge backend: {_op_name(node)} has a data-dependent shape or value; "
                f"such graphs are not supported (let it run eagerly: keep it out of the "
                f"compiled region)")


def _random_is_inert(node: torch.fx.Node) -> bool:
    """Whether a seeded op draws no random numbers here (dropout with p=0 or
    train=False, e.g. attention with ``dropout_p=0``)."""
    schema = node.target._schema  # type: ignore[union-attr]
    vals: dict[str, Any] = {}
    for i, a in enumerate(schema.arguments):
        if i < len(node.args):
            vals[a.name] = node.args[i]
        elif a.name in node.kwargs:
            vals[a.name] = node.kwargs[a.name]
        elif a.has_default_value():
            vals[a.name] = a.default_value
    if "dropout_p" in vals:
        return vals["dropout_p"] == 0
    if "p" in vals and "train" in vals:
        return vals["p"] == 0 or vals["train"] is False
    return False


def partition(gm: torch.fx.GraphModule) -> Partition:
    """Split ``gm`` into torch and JAX pieces (see the module docs)."""
    check_graph(gm)
    nodes = list(gm.graph.nodes)
    part = Partition(placeholders=[n.name for n in nodes if n.op == "placeholder"],
                     constants={})
    alias: dict[torch.fx.Node, str] = {}  # getitem of a call_jax -> its output handle
    seq: list[torch.fx.Node | list[torch.fx.Node]] = []
    run: list[torch.fx.Node] = []
    out_node: torch.fx.Node | None = None
    for n in nodes:
        if n.op == "placeholder":
            continue
        if n.op == "get_attr":
            value = getattr(gm, str(n.target))
            if not isinstance(value, torch.Tensor):
                raise UnsupportedOpError(f"hlobridge backend: graph attribute {n.target} is a "
                                         f"{type(value).__name__}, not a tensor")
            part.constants[n.name] = value.detach()
        elif n.op == "output":
            out_node = n
        elif _is_call_jax(n):
            if run:
                seq.append(run)
                run = []
            seq.append(n)
        elif (n.op == "call_function" and n.target is operator.getitem
              and isinstance(n.args[0], torch.fx.Node) and _is_call_jax(n.args[0])):
            alias[n] = n.name
        else:
            run.append(n)
    if run:
        seq.append(run)
    assert out_node is not None
    used_later = _uses_outside(nodes)
    for i, item in enumerate(seq):
        if isinstance(item, list):
            piece = _torch_piece(f"torch_{i}", item, used_later, alias)
            if piece is not None:
                part.pieces.append(piece)
        else:
            part.pieces.append(_jax_piece(f"jax_{i}", item))
    outs = out_node.args[0]
    part.outputs = [None if o is None else _handle(o, alias) for o in outs]  # type: ignore[union-attr]
    return part


def _handle(n: Any, alias: dict[torch.fx.Node, str]) -> str:
    if not isinstance(n, torch.fx.Node):
        raise UnsupportedOpError(f"hlobridge backend: graph output {n!r} is not a tensor")
    return alias.get(n, n.name)


def _uses_outside(nodes: list[torch.fx.Node]) -> dict[torch.fx.Node, set[torch.fx.Node]]:
    return {n: set(n.users) for n in nodes}


def _torch_piece(name: str, run: list[torch.fx.Node],
                 users: dict[torch.fx.Node, set[torch.fx.Node]],
                 alias: dict[torch.fx.Node, str]) -> TorchPiece | None:
    inside = set(run)
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    inputs: list[str] = []

    def arg(n: torch.fx.Node) -> torch.fx.Node:
        if n not in env:
            env[n] = graph.placeholder(alias.get(n, n.name))
            inputs.append(alias.get(n, n.name))
        return env[n]

    outputs: list[torch.fx.Node] = []
    for n in run:
        for a in n.all_input_nodes:
            if a not in inside:
                arg(a)
        env[n] = graph.node_copy(n, lambda a: env[a])
        if any(u not in inside for u in users[n]):
            outputs.append(n)
    if not outputs:
        return None
    graph.output(tuple(env[o] for o in outputs))
    return TorchPiece(name=name, gm=torch.fx.GraphModule({}, graph), inputs=inputs,
                      outputs=[o.name for o in outputs])


def _jax_piece(name: str, node: torch.fx.Node) -> JaxPiece:
    key = node.args[0]
    tensors = node.args[1]
    assert isinstance(key, str) and isinstance(tensors, (list, tuple))
    by_index = {int(u.args[1]): u.name for u in node.users  # type: ignore[arg-type]
                if u.target is operator.getitem}
    n_out = len(node.meta["val"]) if "val" in node.meta else max(by_index, default=-1) + 1
    outputs = [by_index.get(i, f"{node.name}_unused{i}") for i in range(n_out)]
    return JaxPiece(name=f"{name}:{key}", key=key,
                    inputs=[t.name for t in tensors],  # type: ignore[union-attr]
                    outputs=outputs)
