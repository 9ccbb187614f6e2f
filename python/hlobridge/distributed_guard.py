"""Guards that keep hlobridge from being silently wrong under
``torch.distributed``.

hlobridge compiles every program for ONE device and one process: it has no
scale-out support yet. Two things would otherwise run without an error and
give each rank different results:

1. :func:`hlobridge.compile_train_step` on a model wrapped in
   ``DistributedDataParallel`` or FSDP: the step differentiates fresh copies
   of the parameters, so DDP's gradient hooks never fire (no all-reduce) and
   FSDP's sharded/flat parameters are not what the model computes with.
   :func:`check_train_step_model` refuses these wrappers
   (:class:`~hlobridge.dynamo.errors.DistributedNotSupportedError`), except a
   top-level DDP over a process group of ONE rank, which is unwrapped (its
   all-reduce would be the identity).
2. collectives traced into a graph (``torch.ops._c10d_functional.*``,
   ``c10d_functional``, ``_c10d_functional_autograd``, ``c10d``, ``_dtensor``,
   ``wait_tensor``): torch_xla lowers them to a ``stablehlo.all_reduce`` with
   empty ``replica_groups`` in a one-replica program, a no-op.
   :func:`check_fx_collectives` refuses them in every FX graph the backend or
   whole-step capture compiles, and :func:`check_stablehlo_collectives` is the
   backstop on each module text torch_xla lowers
   (:class:`~hlobridge.dynamo.errors.CollectiveNotSupportedError`).

What works with ``torch.distributed`` today: ``torch.compile(DDP(model),
backend="hlobridge", dynamic=False)`` with the default DDPOptimizer (the
graphs hold no collectives; DDP's own reducer all-reduces the gradients in
eager autograd). See ``docs/distributed.md``.
"""

from __future__ import annotations

import re
from typing import Any

import torch
import torch.fx

from hlobridge.dynamo.errors import CollectiveNotSupportedError, DistributedNotSupportedError

__all__ = [
    "COLLECTIVE_NAMESPACES",
    "check_fx_collectives",
    "check_stablehlo_collectives",
    "check_train_step_model",
    "world_size",
]

COLLECTIVE_NAMESPACES = frozenset(
    {"_c10d_functional", "c10d_functional", "_c10d_functional_autograd", "c10d", "_dtensor"})
"""Operator namespaces whose ops communicate between processes."""

_FUNCOL_MODULES = ("torch.distributed._functional_collectives",
                   "torch.distributed.distributed_c10d")

_WHAT_INSTEAD = (
    "hlobridge compiles single-process, single-device programs; it has no scale-out support "
    "yet. Use torch.compile(DDP(model), backend=\"hlobridge\", dynamic=False) with the default "
    "torch._dynamo.config.optimize_ddp (DDPOptimizer: DDP's reducer all-reduces the gradients "
    "outside the compiled graphs), or keep the collective outside the compiled region, or run "
    "without a process group")


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

    - a ``DistributedDataParallel`` / ``FullyShardedDataParallel`` /
      ``fully_shard`` module anywhere in ``model``, or a DTensor parameter or
      buffer, with a process group of more than one rank: refused (the step
      would skip the gradient all-reduce, so ranks would diverge);
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
                f"{ranks} ranks; the captured step differentiates copies of the parameters, so "
                f"DDP's gradient all-reduce would never run and the ranks would silently "
                f"diverge. {_WHAT_INSTEAD}")
        raise DistributedNotSupportedError(
            f"compile_train_step: {where} is wrapped in {kind} (process group of {ranks} "
            f"rank(s)); hlobridge cannot capture a wrapped step (no gradient all-reduce, "
            f"flat or sharded parameters). Pass the unwrapped module. {_WHAT_INSTEAD}")
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


def check_fx_collectives(gm: torch.fx.GraphModule, where: str = "hlobridge backend") -> None:
    """Refuse a graph that calls a collective (see the module docs);
    nested graph modules (higher-order ops) are searched too."""
    found: list[str] = []
    for mod in gm.modules():
        graph = getattr(mod, "graph", None)
        if not isinstance(graph, torch.fx.Graph):
            continue
        for node in graph.nodes:
            name = _collective_name(node)
            if name is not None and name not in found:
                found.append(name)
    if found:
        raise CollectiveNotSupportedError(
            f"{where}: the graph calls the collective(s) {', '.join(found)}; hlobridge would "
            f"compile them for one device, where they do nothing (each rank would silently "
            f"keep its own values). {_WHAT_INSTEAD}")


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
