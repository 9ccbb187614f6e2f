"""One rank of the 2-process ``torch.distributed`` guard and collective
checks (``test_distributed_guards.py`` starts two of these with gloo on
127.0.0.1; see ``distributed_worker_common.py``).

Usage: ``distributed_guard_worker.py RANK WORLD PORT OUT_JSON SEED``.

Runs every case in order on both ranks (the cases that should fail fail at
compile time on both ranks alike, so no rank waits in a collective the other
skipped) and writes ``{case: result}`` to ``OUT_JSON``. A result is
``{"status": "ok", ...measurements}``, ``{"status": "error", "chain":
[exception class names, outermost first, through Dynamo's
BackendCompilerFailed], "message": ...}``.
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
import torch.distributed._functional_collectives as funcol  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from distributed_worker_common import flat, ranks_max_diff, run_cases  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import hlobridge as hb  # noqa: E402
from hlobridge import dynamo as hbd  # noqa: E402

RANK, WORLD, SEED = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[5])


class MLP(torch.nn.Module):
    """A module class of this file: Dynamo compiles its forward as its own
    frame under DDP (it skips torch.nn's own classes, e.g. Sequential, as top
    frames, which would leave nothing compiled)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def mlp() -> torch.nn.Module:
    # Same weights on both ranks (DDP would broadcast rank 0's anyway).
    torch.manual_seed(SEED)
    return MLP()


def batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Different data on each rank: what makes a skipped all-reduce show."""
    g = torch.Generator().manual_seed(SEED * 7 + 1000 * (RANK + 1))
    return [(torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)) for _ in range(n)]


def loss_fn(m: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(m(x), y)


def flat_params(m: torch.nn.Module) -> torch.Tensor:
    return flat(m.parameters())


def _sgd_vs_ddp(step: Callable[..., torch.Tensor], model: torch.nn.Module,
                loss: Callable[..., torch.Tensor] = loss_fn) -> dict[str, Any]:
    """3 steps of ``step`` against DDP eager with SGD(lr=0.1), from the same
    weights."""
    ref = DDP(mlp())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    loss_diff = 0.0
    for x, y in batches(3):
        out = step(x, y)
        ref_opt.zero_grad()
        ref_loss = loss(ref, x, y)
        ref_loss.backward()
        ref_opt.step()
        loss_diff = max(loss_diff, float((out - ref_loss).abs()))
    p, q = flat_params(model), flat_params(ref)
    return {"status": "ok", "max_param_diff_vs_ddp": float((p - q).abs().max()),
            "max_loss_diff_vs_ddp": loss_diff, "ranks_max_diff": ranks_max_diff(p)}


# -- compile_train_step: refused, unwrapped, or collectives between programs ----
def case_train_step_ddp_one_rank() -> dict[str, Any]:
    """DDP over a process group of ONE rank: unwrapped, must match eager."""
    groups = [dist.new_group([r]) for r in range(WORLD)]  # every rank creates every group
    model = DDP(mlp(), process_group=groups[RANK])
    ref = copy.deepcopy(model.module)
    step = hb.compile_train_step(model, loss_fn, hb.optim.SGD(lr=0.1))
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    loss_diff = 0.0
    for x, y in batches(3):
        loss = step(x, y)
        ref_opt.zero_grad()
        ref_loss = loss_fn(ref, x, y)
        ref_loss.backward()
        ref_opt.step()
        loss_diff = max(loss_diff, float((loss - ref_loss).abs()))
    return {"status": "ok", "unwrapped": step.model is model.module,
            "max_param_diff_vs_eager": float((flat_params(model) - flat_params(ref)).abs().max()),
            "max_loss_diff_vs_eager": loss_diff}


def case_train_step_fsdp1() -> dict[str, Any]:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    model = FSDP(mlp(), use_orig_params=True, device_id=torch.device("cpu"))
    hb.compile_train_step(model, loss_fn, hb.optim.SGD(lr=0.1))
    return {"status": "ok"}


def case_train_step_fsdp2() -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = mlp()
    fully_shard(model, mesh=init_device_mesh("cpu", (WORLD,)))  # CPU + gloo: supported
    hb.compile_train_step(model, loss_fn, hb.optim.SGD(lr=0.1))
    return {"status": "ok"}


def case_train_step_collective_loss() -> dict[str, Any]:
    """An all-reduce on the way from the parameters to the loss: torch has
    no backward for it, so the gradient would silently skip it."""
    def loss_ar(m: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor
                ) -> torch.Tensor:
        return F.mse_loss(funcol.all_reduce(m(x), "sum", dist.group.WORLD) / WORLD, y)

    model = mlp()
    step = hb.compile_train_step(model, loss_ar, hb.optim.SGD(lr=0.1))
    step(*batches(1)[0])
    return {"status": "ok", "ranks_max_diff": ranks_max_diff(flat_params(model))}


def case_train_step_collective_count() -> dict[str, Any]:
    """An all-reduce on a value that needs no gradient (the global element
    count that normalizes the loss) runs between two programs; against the
    same computation in eager torch, 3 SGD steps."""
    def loss_global(m: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor
                    ) -> torch.Tensor:
        n = funcol.all_reduce(torch.full((), y.numel(), dtype=torch.float32), "sum",
                              dist.group.WORLD)
        return ((m(x) - y) ** 2).sum() / n

    model, ref = mlp(), mlp()
    step = hb.compile_train_step(model, loss_global, hb.optim.SGD(lr=0.1))
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    loss_diff = 0.0
    for x, y in batches(3):
        loss = step(x, y)
        ref_opt.zero_grad()
        n = torch.full((), y.numel(), dtype=torch.float32)
        dist.all_reduce(n)
        ref_loss = ((ref(x) - y) ** 2).sum() / n
        ref_loss.backward()
        ref_opt.step()
        loss_diff = max(loss_diff, float((loss - ref_loss).abs()))
    graph = step.graphs[0]
    return {"status": "ok",
            "max_param_diff_vs_eager": float((flat_params(model) - flat_params(ref)).abs().max()),
            "max_loss_diff_vs_eager": loss_diff, "programs": len(graph.pieces),
            "collectives": graph.collectives}


class AllReduceSGD(hb.optim.SGD):
    """SGD that averages the gradients over the ranks inside the update."""

    def update(self, params: Any, grads: Any, state: Any) -> Any:
        grads = {k: funcol.all_reduce(g, "sum", dist.group.WORLD) / WORLD for k, g in grads.items()}
        return super().update(params, grads, state)


def case_train_step_collective_optimizer() -> dict[str, Any]:
    """All-reduces in the optimizer's update: the step runs as a gradient
    program, the all-reduces, an update program; equals DDP eager."""
    model = mlp()
    step = hb.compile_train_step(model, loss_fn, AllReduceSGD(lr=0.1))
    res = _sgd_vs_ddp(step, model)
    res["programs"] = len(step.graphs[0].pieces)
    return res


# -- the torch.compile backend -------------------------------------------------
class FunctionalAllReduce(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return funcol.all_reduce(self.body(x), "sum", dist.group.WORLD) * 0.5


class InPlaceAllReduce(FunctionalAllReduce):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        dist.all_reduce(h)
        return h * 0.5


def _compiled_forward(model: torch.nn.Module, no_grad: bool) -> dict[str, Any]:
    """The compiled forward against the same module run eagerly."""
    x = batches(1)[0][0]
    graphs_before = hbd.graphs_compiled()
    with torch.no_grad() if no_grad else torch.enable_grad():
        out = torch.compile(model, backend="hlobridge", dynamic=False)(x)
        ref = model(x)
    return {"status": "ok", "ranks_max_diff": ranks_max_diff(out.detach()),
            "max_diff_vs_eager": float((out - ref).abs().max()),
            "programs": hbd.graphs_compiled() - graphs_before}


def case_backend_functional_all_reduce() -> dict[str, Any]:
    return _compiled_forward(FunctionalAllReduce(), no_grad=False)


def case_backend_c10d_all_reduce() -> dict[str, Any]:
    return _compiled_forward(InPlaceAllReduce(), no_grad=False)


def case_backend_functional_all_reduce_no_grad() -> dict[str, Any]:
    return _compiled_forward(FunctionalAllReduce(), no_grad=True)


def case_backend_c10d_all_reduce_no_grad() -> dict[str, Any]:
    return _compiled_forward(InPlaceAllReduce(), no_grad=True)


def case_backend_python_reducer_compiled_autograd() -> dict[str, Any]:
    """DDP traced whole (optimize_ddp="python_reducer") with compiled
    autograd: the backward graph holds DDP's bucket all-reduces, which run
    between hlobridge programs. 3 SGD steps against DDP eager."""
    import torch._dynamo.config as dcfg

    ref = DDP(mlp())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    graphs_before = hbd.graphs_compiled()
    grad_diff = 0.0
    with dcfg.patch(optimize_ddp="python_reducer"):
        model = DDP(mlp())  # DDP picks its reducer when constructed
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        compiled = torch.compile(model, backend="hlobridge", dynamic=False)

        def train(x: torch.Tensor, y: torch.Tensor) -> None:
            F.mse_loss(compiled(x), y).backward()

        train_c = torch.compile(train, backend="hlobridge", dynamic=False)
        for x, y in batches(3):
            opt.zero_grad()
            ref_opt.zero_grad()
            with dcfg.patch(compiled_autograd=True):
                train_c(x, y)
            F.mse_loss(ref(x), y).backward()
            grads = flat(p.grad for p in model.parameters())  # type: ignore[misc]
            ref_grads = flat(p.grad for p in ref.parameters())  # type: ignore[misc]
            grad_diff = max(grad_diff, float((grads - ref_grads).abs().max()))
            opt.step()
            ref_opt.step()
    p, q = flat_params(model), flat_params(ref)
    return {"status": "ok", "ranks_max_diff": ranks_max_diff(p),
            "max_grad_diff_vs_ddp": grad_diff,
            "max_param_diff_vs_ddp": float((p - q).abs().max()),
            "programs": hbd.graphs_compiled() - graphs_before}


CASES = [case_train_step_ddp_one_rank, case_train_step_fsdp1, case_train_step_fsdp2,
         case_train_step_collective_loss, case_train_step_collective_count,
         case_train_step_collective_optimizer, case_backend_functional_all_reduce,
         case_backend_c10d_all_reduce, case_backend_functional_all_reduce_no_grad,
         case_backend_c10d_all_reduce_no_grad, case_backend_python_reducer_compiled_autograd]

if __name__ == "__main__":
    run_cases(CASES, sys.argv)
