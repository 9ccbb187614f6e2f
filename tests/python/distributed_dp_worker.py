"""One rank of the 2-process data-parallel checks
(``test_distributed_data_parallel.py`` starts two of these with gloo on
127.0.0.1; see ``distributed_worker_common.py``).

Usage: ``distributed_dp_worker.py RANK WORLD PORT OUT_JSON SEED``.

Every case trains on different data on each rank and compares with the
eager equivalent run side by side in the same processes: DDP eager for
``hb.compile_train_step`` (DDP-wrapped or ``process_group=``) and for
``torch.compile(DDP(model), backend="hlobridge")``; FSDP1/FSDP2 eager for
FSDP under the backend. A result is ``{"status": "ok", ...measurements}`` or
``{"status": "error", "chain": [...], "message": ...}``.
"""

from __future__ import annotations

import copy
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

os.environ.setdefault("PJRT_DEVICE", "CPU")
warnings.simplefilter("ignore")  # third-party warnings are not what these cases check

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from distributed_worker_common import flat, ranks_max_diff, run_cases  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import hlobridge as hb  # noqa: E402
from hlobridge import dynamo as hbd  # noqa: E402

RANK, SEED = int(sys.argv[1]), int(sys.argv[5])
STEPS = 3
ADAM_EPS = 1e-3


class MLP(torch.nn.Module):
    """A module class of this file (Dynamo compiles its forward as its own
    frame under DDP; it skips torch.nn's own containers)."""

    def __init__(self, depth: int = 2, bn: bool = False, width: int = 16) -> None:
        super().__init__()
        widths = [8] + [width] * (depth - 1) + [4]
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
        self.bn = torch.nn.BatchNorm1d(width) if bn else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i == 0 and self.bn is not None:
                x = self.bn(x)
            if i + 1 < len(self.layers):
                x = torch.tanh(x)
        return x


class Unrolled(MLP):
    """Three layers without a loop in ``forward``: Dynamo (Python 3.11)
    cannot resume after a graph break inside a loop, and FSDP2's hooks
    break the graph at every sharded layer."""

    def __init__(self) -> None:
        super().__init__(depth=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.layers[0](x))
        x = torch.tanh(self.layers[1](x))
        return self.layers[2](x)


def mlp(seed: int = SEED, **kw: Any) -> MLP:
    torch.manual_seed(seed)
    return MLP(**kw)


def batches(n: int = STEPS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Different data on each rank: a skipped all-reduce shows."""
    g = torch.Generator().manual_seed(SEED * 7 + 1000 * (RANK + 1))
    return [(torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)) for _ in range(n)]


def loss_fn(m: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(m(x), y)


def _optimizers(kind: str, ref: torch.nn.Module) -> tuple[Any, torch.optim.Optimizer]:
    if kind == "sgd":
        return hb.optim.SGD(lr=0.1, momentum=0.9), torch.optim.SGD(ref.parameters(), lr=0.1,
                                                                   momentum=0.9)
    # eps=1e-3, not Adam's default 1e-8: with 1e-8 the update divides by the
    # gradient's own size, so a gradient near zero moves its parameter by
    # about lr whatever its last bits are, and a 1e-6 check of the result is
    # a coin toss between seeds and CPUs (seed 2954471407: 1.4e-6 after 3
    # steps). With eps=1e-3 the update is a Lipschitz function of the
    # gradient (constant about lr/eps); a skipped or doubled all-reduce
    # still moves the parameters by ~lr.
    return (hb.optim.Adam(lr=0.01, eps=ADAM_EPS),
            torch.optim.Adam(ref.parameters(), lr=0.01, eps=ADAM_EPS))


def _train_step_vs_ddp(model: torch.nn.Module, ref: DDP, opt_kind: str,
                       **step_kw: Any) -> dict[str, Any]:
    """``STEPS`` steps of ``compile_train_step(model)`` against DDP eager
    ``ref`` (same initial weights after DDP's broadcast)."""
    opt, ref_opt = _optimizers(opt_kind, ref)
    step = hb.compile_train_step(model, loss_fn, opt, **step_kw)
    loss_diff = 0.0
    for x, y in batches():
        loss = step(x, y)
        ref_opt.zero_grad()
        ref_loss = loss_fn(ref, x, y)
        ref_loss.backward()
        ref_opt.step()
        loss_diff = max(loss_diff, float((loss - ref_loss).abs()))
    p, q = flat(step.model.parameters()), flat(ref.module.parameters())
    graph = step.graphs[0]
    res = {"status": "ok", "max_param_diff_vs_ddp": float((p - q).abs().max()),
           "max_loss_diff_vs_ddp": loss_diff, "ranks_max_diff": ranks_max_diff(p),
           "ref_ranks_max_diff": ranks_max_diff(q), "graph": type(graph).__name__,
           "programs": len(getattr(graph, "pieces", [graph])),
           "collectives": list(getattr(graph, "collectives", []))}
    bufs = list(step.model.buffers())
    if bufs:
        res["max_buffer_diff_vs_ddp"] = max(
            float((a.double() - b.double()).abs().max())
            for a, b in zip(bufs, ref.module.buffers()))
    return res


# -- compile_train_step --------------------------------------------------------
def case_train_step_ddp_sgd() -> dict[str, Any]:
    base = mlp()
    return _train_step_vs_ddp(DDP(copy.deepcopy(base)), DDP(base), "sgd")


def case_train_step_ddp_adam() -> dict[str, Any]:
    base = mlp()
    return _train_step_vs_ddp(DDP(copy.deepcopy(base)), DDP(base), "adam")


def _process_group_case(opt_kind: str) -> dict[str, Any]:
    """process_group= a non-default group over both ranks; the ranks start
    from DIFFERENT weights (the step broadcasts rank 0's, as DDP does)."""
    group = dist.new_group(list(range(dist.get_world_size())))
    base = mlp(SEED + RANK)
    ref = DDP(copy.deepcopy(base), process_group=group)
    return _train_step_vs_ddp(base, ref, opt_kind, process_group=group)


def case_train_step_process_group_sgd() -> dict[str, Any]:
    return _process_group_case("sgd")


def case_train_step_process_group_adam() -> dict[str, Any]:
    return _process_group_case("adam")


def case_train_step_ddp_batchnorm() -> dict[str, Any]:
    """BatchNorm buffers: DDP broadcasts rank 0's before each forward; each
    rank then updates them with its own batch."""
    base = mlp(bn=True)
    return _train_step_vs_ddp(DDP(copy.deepcopy(base)), DDP(base), "sgd")


def case_train_step_ddp_small_buckets() -> dict[str, Any]:
    """``bucket_cap_mb`` below one gradient: one bucket per parameter."""
    base = mlp(depth=3)
    cap = 1e-4
    return _train_step_vs_ddp(DDP(copy.deepcopy(base), bucket_cap_mb=cap),
                              DDP(base, bucket_cap_mb=cap), "adam")


def case_train_step_ddp_no_sync() -> dict[str, Any]:
    model = DDP(mlp())
    step = hb.compile_train_step(model, loss_fn, hb.optim.SGD(lr=0.1))
    with model.no_sync():
        step(*batches(1)[0])
    return {"status": "ok"}


def case_train_step_nested_ddp() -> dict[str, Any]:
    """A DDP inside another module: its hooks would never fire; refused."""
    outer = torch.nn.Sequential(DDP(mlp()))
    hb.compile_train_step(outer, loss_fn, hb.optim.SGD(lr=0.1))
    return {"status": "ok"}


# -- torch.compile backend -----------------------------------------------------
def _backend_vs_eager(model: torch.nn.Module, ref: torch.nn.Module,
                      params: Callable[[torch.nn.Module], torch.Tensor]) -> dict[str, Any]:
    """``STEPS`` SGD steps of ``torch.compile(model, backend="hlobridge")``
    against the same wrapper run eagerly."""
    graphs_before = hbd.graphs_compiled()
    compiled = torch.compile(model, backend="hlobridge", dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    loss_diff = 0.0
    for x, y in batches():
        opt.zero_grad()
        ref_opt.zero_grad()
        loss = F.mse_loss(compiled(x), y)
        ref_loss = F.mse_loss(ref(x), y)
        loss.backward()
        ref_loss.backward()
        opt.step()
        ref_opt.step()
        loss_diff = max(loss_diff, float((loss - ref_loss).abs()))
    p, q = params(model), params(ref)
    return {"status": "ok", "max_param_diff_vs_eager": float((p - q).abs().max()),
            "max_loss_diff_vs_eager": loss_diff, "ranks_max_diff": ranks_max_diff(p),
            "ref_ranks_max_diff": ranks_max_diff(q),
            "graphs": hbd.graphs_compiled() - graphs_before}


def _plain(m: torch.nn.Module) -> torch.Tensor:
    return flat(m.parameters())


def case_backend_ddp() -> dict[str, Any]:
    base = mlp()
    return _backend_vs_eager(DDP(copy.deepcopy(base)), DDP(base), _plain)


def case_backend_ddp_bucket_split() -> dict[str, Any]:
    """DDPOptimizer splits the forward at DDP's bucket boundaries (about
    one 1 MiB bucket per 512x512 layer here; it needs ``bucket_cap_mb``
    >= 1): several forward and backward graphs, each compiled by
    hlobridge."""
    base = mlp(depth=5, width=512)
    cap = 1.0
    return _backend_vs_eager(DDP(copy.deepcopy(base), bucket_cap_mb=cap),
                             DDP(base, bucket_cap_mb=cap), _plain)


def case_backend_fsdp1() -> dict[str, Any]:
    """FSDP1 (use_orig_params=True) on CPU; parameters compared gathered."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    def full(m: torch.nn.Module) -> torch.Tensor:
        with FSDP.summon_full_params(m):
            return flat(m.parameters()).clone()

    base = mlp()
    cpu = torch.device("cpu")
    return _backend_vs_eager(FSDP(copy.deepcopy(base), use_orig_params=True, device_id=cpu),
                             FSDP(base, use_orig_params=True, device_id=cpu), full)


def case_backend_fsdp2() -> dict[str, Any]:
    """FSDP2 (fully_shard on each layer and the root) on a CPU mesh;
    parameters compared as full tensors."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))

    def shard(m: Unrolled) -> Unrolled:
        # Each layer sharded; the root stays a module class of this file,
        # so that Dynamo compiles its forward (a fully_shard root's class
        # is made by torch.distributed, whose frames Dynamo skips).
        for layer in m.layers:
            fully_shard(layer, mesh=mesh)
        return m

    def full(m: torch.nn.Module) -> torch.Tensor:
        return torch.cat([p.full_tensor().detach().reshape(-1)  # type: ignore[attr-defined]
                          for p in m.parameters()])

    torch.manual_seed(SEED)
    base = Unrolled()
    return _backend_vs_eager(shard(copy.deepcopy(base)), shard(base), full)


CASES = [case_train_step_ddp_sgd, case_train_step_ddp_adam, case_train_step_process_group_sgd,
         case_train_step_process_group_adam, case_train_step_ddp_batchnorm,
         case_train_step_ddp_small_buckets, case_train_step_ddp_no_sync,
         case_train_step_nested_ddp, case_backend_ddp,
         case_backend_ddp_bucket_split, case_backend_fsdp1, case_backend_fsdp2]

if __name__ == "__main__":
    run_cases(CASES, sys.argv)
