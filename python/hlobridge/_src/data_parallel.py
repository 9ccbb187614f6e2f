"""Data-parallel whole-step capture: :func:`hlobridge.compile_train_step` on a
model wrapped in ``DistributedDataParallel``, or with ``process_group=``.

The CPU runtime cannot span processes, so the step cannot be ONE program
with the all-reduce inside. Instead the traced step holds the gradient
all-reduce as functional collectives, and
:mod:`hlobridge._src.collective_split` splits it there:

1. (only when the module has buffers and DDP would broadcast them) rank 0's
   buffers are broadcast, as DDP does before each forward;
2. a **gradient program**: forward, backward, and the gradients flattened
   into buckets (by dtype, in reverse parameter order, at most
   ``bucket_cap_mb`` each, as DDP's reducer makes them) and scaled by
   ``1 / world_size``;
3. each bucket is all-reduced (sum) through ``torch.distributed``, all
   buckets in flight together (``_c10d_functional.all_reduce``, waited for
   after the last one is issued);
4. an **update program**: the buckets cut back into gradients, and the
   optimizer update.

This is DDP's arithmetic (the reducer multiplies each gradient by
``1 / world_size`` into its bucket, then all-reduces the sum), so the result
equals DDP eager up to the compiled programs' rounding, and the ranks stay
bit-identical (they run the same update program on the same all-reduced
gradients). The loss returned is the local one, as in DDP.

A DDP wrapper supplies its process group, ``bucket_cap_mb`` and
``broadcast_buffers``; with ``process_group=`` the DDP defaults apply (25
MiB, buffers broadcast) and, as DDP does when it wraps a module, the
parameters and buffers are broadcast from the group's rank 0 once, when the
step is made. Refused by name: a DDP with a communication hook
(``register_comm_hook``), with ``mixed_precision``, a step called inside
``ddp.no_sync()``, and FSDP (sharded parameters are not a data-parallel
gradient all-reduce; see ``docs/distributed.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hlobridge._src.errors import ArgumentError, DistributedNotSupportedError
from hlobridge._src.distributed_guard import check_train_step_model, world_size

__all__ = ["DataParallel", "resolve"]

_DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024
"""DDP's default ``bucket_cap_mb``."""


@dataclass
class DataParallel:
    """How a step all-reduces its gradients."""

    group: Any
    """The ``torch.distributed`` process group."""
    world: int
    bucket_bytes: int
    broadcast_buffers: bool
    src: int
    """Global rank of the group's rank 0 (buffers are broadcast from it)."""
    ddp: Any = None
    """The ``DistributedDataParallel`` wrapper, if the model came in one."""

    # -- inside the traced step -------------------------------------------------
    def all_reduce_mean(self, names: list[str], grads: dict[str, torch.Tensor]
                        ) -> dict[str, torch.Tensor]:
        """``grads`` averaged over the group, as traced ops: buckets
        flattened and scaled by ``1 / world``, all-reduced (sum), cut back."""
        import torch.distributed._functional_collectives as funcol

        out: dict[str, torch.Tensor] = {}
        for bucket in self.buckets(names, grads):
            flat = torch.cat([grads[k].reshape(-1) for k in bucket]) * (1.0 / self.world)
            flat = funcol.all_reduce(flat, "sum", self.group)
            offset = 0
            for k in bucket:
                n = grads[k].numel()
                out[k] = flat[offset:offset + n].view(grads[k].shape)
                offset += n
        return out

    def buckets(self, names: list[str], grads: dict[str, torch.Tensor]) -> list[list[str]]:
        """Gradient names by bucket: one dtype per bucket, reverse parameter
        order (the order backward produces them), at most
        :attr:`bucket_bytes` each (a larger gradient gets a bucket of its
        own)."""
        out: list[list[str]] = []
        open_: dict[torch.dtype, tuple[list[str], int]] = {}
        for k in reversed(names):
            g = grads[k]
            size = g.numel() * g.element_size()
            cur, used = open_.get(g.dtype, ([], 0))
            if cur and used + size > self.bucket_bytes:
                out.append(cur)
                cur, used = [], 0
            cur.append(k)
            open_[g.dtype] = (cur, used + size)
        out.extend(cur for cur, _ in open_.values() if cur)
        return out

    def broadcast(self, buffers: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``buffers`` replaced by rank 0's values, as traced ops (DDP's
        ``broadcast_buffers`` before each forward)."""
        import torch.distributed._functional_collectives as funcol

        if not self.broadcast_buffers or self.world == 1:
            return buffers
        return {k: funcol.broadcast(b, self.src, self.group) for k, b in buffers.items()}

    # -- around each call ----------------------------------------------------------
    def check_call(self, name: str) -> None:
        """Refuse a call DDP would treat differently (``no_sync``)."""
        if self.ddp is not None and not self.ddp.require_backward_grad_sync:
            raise DistributedNotSupportedError(
                f"{name}: called inside DistributedDataParallel.no_sync(); a compiled step "
                f"always all-reduces the gradients and updates the parameters (gradient "
                f"accumulation without sync is not captured). Call it outside no_sync()")


def resolve(model: torch.nn.Module, process_group: Any = None
            ) -> tuple[torch.nn.Module, DataParallel | None]:
    """The module to capture and how its gradients are all-reduced (None: not
    at all).

    - a top-level ``DistributedDataParallel``: its ``.module``, with its
      process group, bucket size and ``broadcast_buffers`` (a DDP over ONE
      rank without ``process_group=`` is simply unwrapped);
    - ``process_group=``: the model as it is, averaged over that group (its
      parameters and buffers broadcast from the group's rank 0 now);
    - otherwise the model, checked by
      :func:`hlobridge._src.distributed_guard.check_train_step_model` (FSDP,
      nested DDP and DTensors refused).
    """
    import torch.distributed as dist

    ddp = None
    if dist.is_available():
        from torch.nn.parallel import DistributedDataParallel

        if isinstance(model, DistributedDataParallel):
            ddp = model
    if ddp is None:
        model = check_train_step_model(model)
        if process_group is None:
            return model, None
        if not (dist.is_available() and dist.is_initialized()):
            raise ArgumentError("compile_train_step(process_group=...): torch.distributed is "
                                "not initialized (call torch.distributed.init_process_group)")
        dp = _config(process_group, _DEFAULT_BUCKET_BYTES, True, None)
        _sync_module_states(model, dp)
        return model, dp
    group = ddp.process_group
    if process_group is not None and process_group is not group:
        raise ArgumentError("compile_train_step: process_group= differs from the "
                            "DistributedDataParallel wrapper's process group; pass one")
    inner = check_train_step_model(ddp.module)
    if world_size(group) == 1 and process_group is None:
        return inner, None
    if getattr(ddp, "_comm_hooks", None):
        raise DistributedNotSupportedError(
            "compile_train_step: the DistributedDataParallel wrapper has a communication hook "
            "(register_comm_hook); the compiled step all-reduces the plain averaged gradients "
            "and cannot run the hook. Remove the hook, or use torch.compile(DDP(model), "
            "backend=\"hlobridge\", dynamic=False)")
    if getattr(ddp, "mixed_precision", None) is not None:
        raise DistributedNotSupportedError(
            "compile_train_step: DistributedDataParallel(mixed_precision=...) is not captured; "
            "use torch.compile(DDP(model), backend=\"hlobridge\", dynamic=False)")
    return inner, _config(group, int(ddp.bucket_bytes_cap), bool(ddp.broadcast_buffers), ddp)


def _config(group: Any, bucket_bytes: int, broadcast_buffers: bool, ddp: Any) -> DataParallel:
    import torch.distributed as dist

    if group is None:
        group = dist.group.WORLD
    return DataParallel(group=group, world=world_size(group), bucket_bytes=max(1, bucket_bytes),
                        broadcast_buffers=broadcast_buffers,
                        src=dist.get_global_rank(group, 0), ddp=ddp)


def _sync_module_states(model: torch.nn.Module, dp: DataParallel) -> None:
    """Rank 0's parameters and buffers on every rank (DDP does this when it
    wraps a module)."""
    import torch.distributed as dist

    if dp.world == 1:
        return
    with torch.no_grad():
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t.data, src=dp.src, group=dp.group)
