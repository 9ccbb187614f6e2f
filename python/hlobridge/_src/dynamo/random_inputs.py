"""Random ops as program inputs.

A StableHLO program compiled once cannot draw fresh random numbers from
torch's generator: a random op lowered into it would bake one draw (its
trace-time seed) into every run. Instead, each random op whose result
depends only on its shape, dtype and scalar arguments (dropout's
``bernoulli(p)``, ``rand_like``, ``randn``...) is cut out of the graph and
becomes a new graph input; every call draws it in eager torch, with torch's
own generator, just before the program runs. So ``torch.manual_seed`` governs
the program's dropout masks as it does eager ones, and a fresh mask is drawn
each step.

Random ops whose result depends on tensor *values* (``bernoulli(probs)``,
``normal(mean_tensor, ...)``, ``multinomial``...) stay in the graph and are
refused by :func:`hlobridge._src.dynamo.partition.check_graph`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

__all__ = ["RandomInput", "lift_random_inputs"]


def _drawable() -> dict[Any, str]:
    """Random ops drawable from shape, dtype and scalars, and how: ``like``
    (the first argument is a tensor used for its shape and dtype only) or
    ``size`` (the first argument is the size)."""
    aten = torch.ops.aten
    return {
        aten.bernoulli.p: "like",
        aten.rand_like.default: "like",
        aten.randn_like.default: "like",
        aten.rand.default: "size",
        aten.randn.default: "size",
    }


@dataclass(frozen=True)
class RandomInput:
    """One lifted random op: how to draw its value for a call."""

    name: str
    """The graph input (placeholder) that replaced it."""
    op: Any
    args: tuple[Any, ...]
    """Its arguments, with a shape-only tensor argument replaced by ``None``."""
    kwargs: dict[str, Any]
    shape: tuple[int, ...]
    dtype: torch.dtype
    kind: str

    def draw(self) -> torch.Tensor:
        """A fresh value from torch's default generator (on the CPU)."""
        kwargs = {k: v for k, v in self.kwargs.items() if k != "device"}
        if self.kind == "like":
            like = torch.empty(self.shape, dtype=self.dtype)
            return self.op(like, *self.args[1:], **kwargs)  # type: ignore[no-any-return]
        out = self.op(*self.args, **kwargs)
        return out.contiguous()  # type: ignore[no-any-return]


class _Lifter:
    """Adds placeholders after the existing ones, in order."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.last: torch.fx.Node | None = placeholders[-1] if placeholders else None
        self.lifted: list[RandomInput] = []

    def add(self, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], val: torch.Tensor,
            kind: str) -> torch.fx.Node:
        graph = self.gm.graph
        insert: Callable[..., Any] = (graph.inserting_after(self.last) if self.last is not None
                                      else graph.inserting_before(next(iter(graph.nodes))))
        with insert:
            ph = graph.placeholder(f"rng_{len(self.lifted)}")
        ph.meta["val"] = val
        self.last = ph
        self.lifted.append(RandomInput(name=ph.name, op=op, args=args, kwargs=kwargs,
                                       shape=tuple(val.shape), dtype=val.dtype, kind=kind))
        return ph


def _lift_native_dropout(lifter: _Lifter, node: torch.fx.Node) -> bool:
    """``native_dropout(x, p, train=True)`` → ``x * (noise / (1 - p))`` and
    ``noise != 0``, where ``noise`` is an input drawn as eager CPU dropout
    draws it (``bernoulli_(1 - p)`` on a tensor like ``x``): under the same
    seed the masks are the same."""
    x, p = node.args[0], node.args[1]
    train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train")
    val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if train is not True or not isinstance(p, float) or not 0 < p < 1 or \
            not isinstance(val, torch.Tensor):
        return False
    aten = torch.ops.aten
    noise = lifter.add(aten.bernoulli.p, (None, 1 - p), {}, val, "like")
    graph = lifter.gm.graph
    with graph.inserting_before(node):
        scaled = graph.call_function(aten.div.Scalar, (noise, 1 - p))
        out = graph.call_function(aten.mul.Tensor, (x, scaled))
        mask = graph.call_function(aten.ne.Scalar, (noise, 0))
    for user in list(node.users):
        if user.op == "call_function" and user.target is operator.getitem:
            user.replace_all_uses_with(out if user.args[1] == 0 else mask)
            graph.erase_node(user)
        else:
            return False
    graph.erase_node(node)
    return True


def lift_random_inputs(gm: torch.fx.GraphModule) -> list[RandomInput]:
    """Replace every drawable random op of ``gm`` by a new input appended
    after the existing ones (in graph order); returns how to draw them.
    ``gm`` is changed in place and recompiled when anything was lifted."""
    drawable = _drawable()
    lifter = _Lifter(gm)
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is torch.ops.aten.native_dropout.default:
            _lift_native_dropout(lifter, node)
            continue
        if node.target not in drawable:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or node.kwargs.get("generator") is not None:
            continue
        kind = drawable[node.target]
        args = tuple(None if i == 0 and kind == "like" else a for i, a in enumerate(node.args))
        ph = lifter.add(node.target, args, dict(node.kwargs), val, kind)
        node.replace_all_uses_with(ph)
        gm.graph.erase_node(node)
    lifted = lifter.lifted
    if lifted:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return lifted
