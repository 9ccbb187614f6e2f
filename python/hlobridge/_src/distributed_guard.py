"""Guards that keep hlobridge from being silently wrong under
``torch.distributed``.

hlobridge compiles every program for ONE device and one process. A
collective compiled into such a program does nothing, and a training step
that differentiates copies of DDP's parameters skips DDP's gradient hooks.
What this module checks, and where each case goes instead
(``docs/distributed.md``):

1. :func:`check_train_step_model` (used by :mod:`hlobridge._src.data_parallel`):
   FSDP (``FullyShardedDataParallel``, ``fully_shard``), a nested
   ``DistributedDataParallel`` and DTensor parameters or buffers are refused
   (:class:`~hlobridge.errors.DistributedNotSupportedError`); a
   top-level DDP is captured data-parallel by :mod:`hlobridge._src.data_parallel`.
2. collectives traced into a graph (``torch.ops._c10d_functional.*``,
   ``c10d_functional``, ``_c10d_functional_autograd``, ``c10d``, ``_dtensor``,
   ``wait_tensor``): the functional ones (:func:`is_splittable_collective`)
   are run between hlobridge programs by :mod:`hlobridge._src.collective_split`;
   the others are refused by :func:`check_fx_collectives`
   (:class:`~hlobridge.errors.CollectiveNotSupportedError`), and so
   is a collective on a value that requires grad
   (:func:`check_backend_collectives`, :class:`DifferentiableCollectiveWatch`:
   torch has no backward for them, so the gradient would silently skip it).
3. :func:`check_stablehlo_collectives` is the backstop on each module text
   torch_xla lowers: a ``stablehlo.all_reduce`` etc. there would be a
   one-replica no-op.
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from hlobridge._src.errors import CollectiveNotSupportedError, DistributedNotSupportedError

__all__ = [
    "COLLECTIVE_NAMESPACES",
    "SPLIT_NAMESPACES",
    "DifferentiableCollectiveWatch",
    "check_backend_collectives",
    "check_fx_collectives",
    "check_stablehlo_collectives",
    "check_train_step_model",
    "is_splittable_collective",
    "world_size",
]

COLLECTIVE_NAMESPACES = frozenset(
    {"_c10d_functional", "c10d_functional", "_c10d_functional_autograd", "c10d", "_dtensor"})
"""Operator namespaces whose ops communicate between processes."""

SPLIT_NAMESPACES = frozenset({"_c10d_functional", "c10d_functional", "_c10d_functional_autograd"})
"""Namespaces of the functional collectives that
:mod:`hlobridge._src.collective_split` runs eagerly between hlobridge programs."""

_FUNCOL_MODULES = ("torch.distributed._functional_collectives",
                   "torch.distributed.distributed_c10d")

_WHAT_INSTEAD = (
    "hlobridge programs run on one device in one process; collectives can only run between "
    "them, through torch.distributed. For data-parallel training use torch.compile(DDP(model), "
    "backend=\"hlobridge\", dynamic=False), or hb.compile_train_step(DDP(model), ...) / "
    "hb.compile_train_step(model, ..., process_group=group); functional collectives "
    "(torch.distributed._functional_collectives) on values that need no gradient run between "
    "programs; otherwise keep the collective outside the compiled region")


def world_size(group: Any = None) -> int:
    """Ranks in ``group`` (default: the default process group); 1 when
    ``torch.distributed`` is unavailable or not initialized."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return 1
    return int(dist.get_world_size(group))


def _wrapper_kind(m: torch.nn.Module) -> str | None:
    """The distributed wrapper ``m`` is, for messages (DDP, FSDP1, FSDP2),
    or None."""
    import torch.distributed as dist

    if not dist.is_available():
        return None
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(m, DistributedDataParallel):
        return "DistributedDataParallel"
    try:
        from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    except ImportError:  # pragma: no cover (builds without FSDP)
        return None
    if isinstance(m, FullyShardedDataParallel):
        return "FullyShardedDataParallel (FSDP)"
    if isinstance(m, FSDPModule):
        return "fully_shard (FSDP2)"
    return None


def _is_dtensor(t: torch.Tensor) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover
        return False
    return isinstance(t, DTensor)


def check_train_step_model(model: torch.nn.Module) -> torch.nn.Module:
    """The module :func:`hlobridge.compile_train_step` should capture, or a
    :class:`DistributedNotSupportedError`.

    - a ``DistributedDataParallel`` over more than one rank: refused (the
      step would skip the gradient all-reduce, so ranks would diverge);
      :func:`hlobridge._src.data_parallel.resolve` takes a top-level one off
      before calling this, and captures it data-parallel;
    - FSDP (either version) and DTensors are refused at any world size (the
      parameters are flat or sharded views, not what the model computes
      with);
    - a top-level ``DistributedDataParallel`` whose process group has ONE
      rank: its ``.module`` is returned (the all-reduce over one rank is the
      identity; the parameters are the same objects, so the DDP wrapper sees
      every update). A nested one is refused.
    """
    for path, m in model.named_modules():
        kind = _wrapper_kind(m)
        if kind is None:
            continue
        where = "the model" if path == "" else f"submodule {path!r}"
        group = getattr(m, "process_group", None)
        ranks = world_size(group)
        if kind == "DistributedDataParallel" and ranks == 1 and path == "":
            return check_train_step_model(m.module)
        if kind == "DistributedDataParallel" and ranks > 1:
            raise DistributedNotSupportedError(
                f"compile_train_step: {where} is wrapped in DistributedDataParallel over "
                f"{ranks} ranks{' inside another module' if path else ''}; the captured step differentiates copies "
                f"of the parameters, so DDP's gradient all-reduce would never run and the ranks "
                f"would silently diverge. Pass the DDP wrapper itself (compile_train_step("
                f"DDP(model), ...)) or the plain model with process_group=. {_WHAT_INSTEAD}")
        raise DistributedNotSupportedError(
            f"compile_train_step: {where} is wrapped in {kind} (process group of {ranks} "
            f"rank(s)); hlobridge cannot capture a sharded step (its parameters are flat or "
            f"sharded views gathered by FSDP's hooks, and its gradients are reduce-scattered). "
            f"Use torch.compile(model, backend=\"hlobridge\") on the FSDP model (FSDP's hooks "
            f"run eagerly), or data parallel. {_WHAT_INSTEAD}")
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if _is_dtensor(t):
            raise DistributedNotSupportedError(
                f"compile_train_step: {name} is a DTensor (tensor parallel or FSDP2 sharding); "
                f"hlobridge cannot capture sharded tensors. {_WHAT_INSTEAD}")
    return model


def _collective_name(node: torch.fx.Node) -> str | None:
    """The op's qualified name if ``node`` calls a collective."""
    if node.op != "call_function":
        return None
    t = node.target
    if isinstance(t, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        # OpOverload (aten graphs) or OpOverloadPacket (Dynamo graphs).
        qualified = str(t._qualified_op_name if isinstance(t, torch._ops.OpOverloadPacket)
                        else t.name())
        return qualified if qualified.split("::")[0] in COLLECTIVE_NAMESPACES else None
    mod = getattr(t, "__module__", None) or ""
    if mod.startswith(_FUNCOL_MODULES):
        return f"{mod}.{getattr(t, '__name__', t)}"
    return None


def is_splittable_collective(node: torch.fx.Node) -> bool:
    """Whether ``node`` calls a functional collective
    (:data:`SPLIT_NAMESPACES`, an ``OpOverload`` with an immutable schema)
    that :mod:`hlobridge._src.collective_split` runs eagerly between programs."""
    t = node.target
    if node.op != "call_function" or not isinstance(t, torch._ops.OpOverload):
        return False
    return t.namespace in SPLIT_NAMESPACES and not t._schema.is_mutable


def check_fx_collectives(gm: torch.fx.GraphModule, where: str = "hlobridge backend",
                         *, split: bool = False) -> None:
    """Refuse a graph that calls a collective (see the module docs);
    nested graph modules (higher-order ops) are searched too. With
    ``split=True`` (the graph is about to be split at its collectives),
    only the collectives that cannot be split are refused: in-place ones,
    ``c10d`` and ``_dtensor`` ops, and any in a nested graph."""
    found: list[str] = []
    for mod in gm.modules():
        graph = getattr(mod, "graph", None)
        if not isinstance(graph, torch.fx.Graph):
            continue
        for node in graph.nodes:
            name = _collective_name(node)
            if name is None or name in found:
                continue
            if split and mod is gm and is_splittable_collective(node):
                continue
            found.append(name)
    if found:
        how = ("cannot be run between hlobridge programs (only functional "
               "_c10d_functional collectives can: not in-place ones, c10d ops or DTensor ops)"
               if split else
               "would be compiled for one device, where they do nothing (each rank would "
               "silently keep its own values)")
        raise CollectiveNotSupportedError(
            f"{where}: the graph calls the collective(s) {', '.join(found)}, which hlobridge "
            f"{how}. {_WHAT_INSTEAD}")


def _differentiable_error(where: str, names: list[str]) -> CollectiveNotSupportedError:
    return CollectiveNotSupportedError(
        f"{where}: the collective(s) {', '.join(names)} take an input that requires grad, "
        f"and torch has no autograd formula for them: the backward would silently skip them "
        f"(ranks would get wrong gradients). Use them on values that need no gradient "
        f"(under torch.no_grad(), on detached tensors, gradients in an optimizer), or use "
        f"torch.compile(DDP(model), backend=\"hlobridge\") / compile_train_step(..., "
        f"process_group=...) for data-parallel gradients")


def check_backend_collectives(gm: torch.fx.GraphModule) -> None:
    """The check on Dynamo's graph, before AOTAutograd: collectives that
    cannot be split (:func:`check_fx_collectives` with ``split=True``; Dynamo
    records them as ``OpOverloadPacket`` s, which AOTAutograd resolves) and
    differentiable ones (an input whose example value requires grad: there is
    no backward for ``_c10d_functional`` ops) are refused."""
    found: list[str] = []
    differentiable: list[str] = []
    for node in gm.graph.nodes:
        name = _collective_name(node)
        if name is None:
            continue
        ns = name.split("::")[0]
        if ns in ("c10d", "_dtensor"):
            found.append(name)
            continue
        if ns == "_c10d_functional_autograd":
            continue
        for a in node.all_input_nodes:
            v = a.meta.get("example_value")
            if isinstance(v, torch.Tensor) and v.requires_grad and name not in differentiable:
                differentiable.append(name)
    for mod in gm.modules():
        if mod is not gm and isinstance(getattr(mod, "graph", None), torch.fx.Graph):
            check_fx_collectives(mod, "hlobridge backend (nested graph)")  # type: ignore[arg-type]
    if found:
        raise CollectiveNotSupportedError(
            f"hlobridge backend: the graph calls the collective(s) {', '.join(found)}, which "
            f"cannot be run between hlobridge programs (only functional _c10d_functional "
            f"collectives can). {_WHAT_INSTEAD}")
    if differentiable:
        raise _differentiable_error("hlobridge backend", differentiable)


class DifferentiableCollectiveWatch(TorchDispatchMode):
    """While active (around the forward of a traced training step), records
    every ``_c10d_functional`` / ``c10d_functional`` collective called on a
    tensor that requires grad: :meth:`check` then raises a
    :class:`CollectiveNotSupportedError` (the backward would skip it)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        if func.namespace in ("_c10d_functional", "c10d_functional"):
            name = func.name()
            if name not in self.found and any(
                    isinstance(a, torch.Tensor) and a.requires_grad
                    for a in pytree.tree_leaves((args, kwargs))):
                self.found.append(name)
        return func(*args, **(kwargs or {}))

    def check(self, where: str) -> None:
        if self.found:
            raise _differentiable_error(where, self.found)


_COLLECTIVE_OP = re.compile(
    r"\b(?:stablehlo|mhlo)\.(all_reduce|all_gather|reduce_scatter|collective_permute|"
    r"all_to_all|collective_broadcast)\b")
"""Pretty (``stablehlo.all_reduce``) and generic (``"stablehlo.all_reduce"``) forms."""
_NUM = {k: re.compile(rf"\bmhlo\.{k}\s*=\s*(\d+)") for k in ("num_replicas", "num_partitions")}
_GROUPS = re.compile(r"(?:replica_groups|source_target_pairs)\s*=\s*dense<([^>]*)>")


def check_stablehlo_collectives(text: str, where: str = "hlobridge backend") -> None:
    """Backstop on a lowered module's text: refuse one that holds a
    collective (``stablehlo.all_reduce``, ``all_gather``, ``reduce_scatter``,
    ``collective_permute``, ``all_to_all``, ``collective_broadcast``) where it
    would do nothing: a program of one replica and one partition (the
    ``mhlo.num_replicas``/``num_partitions`` module attributes, 1 when
    absent; hlobridge runs every program on one device), or empty
    (``dense<>``) or single-member replica groups. One regex scan per text."""
    ops = sorted(set(_COLLECTIVE_OP.findall(text)))
    if not ops:
        return
    counts: dict[str, int] = {}
    for k, rx in _NUM.items():
        m = rx.search(text)
        counts[k] = int(m.group(1)) if m else 1
    groups = [g.strip() for g in _GROUPS.findall(text)]
    trivial_groups = [g for g in groups if g == "" or re.fullmatch(r"\[*\s*-?\d+\s*\]*", g)]
    devices = counts["num_replicas"] * counts["num_partitions"]
    if devices <= 1 or trivial_groups:
        shown = ", ".join(f"dense<{g}>" for g in groups[:3]) or "none"
        raise CollectiveNotSupportedError(
            f"{where}: the lowered program holds {', '.join('stablehlo.' + o for o in ops)} "
            f"(replica_groups {shown}) in a program of {counts['num_replicas']} replica(s) and "
            f"{counts['num_partitions']} partition(s): a no-op that would leave each rank with "
            f"its own values. {_WHAT_INSTEAD}")
    raise CollectiveNotSupportedError(
        f"{where}: the lowered program holds {', '.join('stablehlo.' + o for o in ops)} over "
        f"{devices} devices; hlobridge runs programs on one device only. {_WHAT_INSTEAD}")
