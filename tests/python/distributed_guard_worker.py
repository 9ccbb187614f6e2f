"""One rank of the 2-process ``torch.distributed`` checks
(``test_distributed_guards.py`` starts two of these with gloo on 127.0.0.1).

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
import datetime
import json
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from typing import Any

os.environ.setdefault("PJRT_DEVICE", "CPU")
warnings.simplefilter("ignore")  # third-party warnings are not what these cases check

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import hlobridge as hb  # noqa: E402
from hlobridge import dynamo as hbd  # noqa: E402

RANK, WORLD, PORT, OUT, SEED = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4],
                                int(sys.argv[5]))


def chain(e: BaseException | None) -> list[str]:
    names: list[str] = []
    while e is not None and len(names) < 8:
        names.append(type(e).__name__)
        e = getattr(e, "inner_exception", None) or e.__cause__
    return names


def innermost_message(e: BaseException) -> str:
    while True:
        nxt = getattr(e, "inner_exception", None) or e.__cause__
        if nxt is None:
            return str(e)
        e = nxt


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
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def ranks_max_diff(t: torch.Tensor) -> float:
    """Largest difference of ``t`` between the ranks (0.0 when identical)."""
    parts = [torch.empty_like(t) for _ in range(WORLD)]
    dist.all_gather(parts, t.contiguous())
    return max(float((p - parts[0]).abs().max()) for p in parts)


# -- cases ---------------------------------------------------------------------
def case_backend_ddp() -> dict[str, Any]:
    """torch.compile(DDP(model), backend="hlobridge") with the default
    DDPOptimizer, 3 SGD steps, against DDP eager."""
    base = mlp()
    graphs_before = len(hbd.compiled_graphs())
    ref = DDP(copy.deepcopy(base))
    model = DDP(base)
    compiled = torch.compile(model, backend="hlobridge", dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    loss_diff = 0.0
    for x, y in batches(3):
        opt.zero_grad()
        ref_opt.zero_grad()
        loss = F.mse_loss(compiled(x), y)
        ref_loss = F.mse_loss(ref(x), y)
        loss.backward()
        ref_loss.backward()
        opt.step()
        ref_opt.step()
        loss_diff = max(loss_diff, float((loss - ref_loss).abs()))
    p, q = flat_params(model), flat_params(ref)
    graphs = len(hbd.compiled_graphs()) - graphs_before
    return {"status": "ok", "max_param_diff_vs_eager": float((p - q).abs().max()),
            "max_loss_diff_vs_eager": loss_diff, "ranks_max_diff": ranks_max_diff(p),
            "ref_ranks_max_diff": ranks_max_diff(q), "graphs": graphs}


def case_train_step_ddp() -> dict[str, Any]:
    model = DDP(mlp())
    before = flat_params(model)
    step = hb.compile_train_step(model, loss_fn, hb.optim.SGD(lr=0.1))
    x, y = batches(1)[0]
    step(x, y)
    return {"status": "ok", "ranks_max_diff": ranks_max_diff(flat_params(model)),
            "changed": float((flat_params(model) - before).abs().max())}


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
    """FSDP1 needs an accelerator to construct; without one, an FSDP object
    whose __init__ is skipped (a plain module holding the MLP as FSDP does)
    still checks that the wrapper class is recognised."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    structural = False
    try:
        model = FSDP(mlp(), use_orig_params=True)
    except RuntimeError:
        model = FSDP.__new__(FSDP)
        torch.nn.Module.__init__(model)
        model._modules["_fsdp_wrapped_module"] = mlp()
        structural = True
    try:
        hb.compile_train_step(model, loss_fn, hb.optim.SGD(lr=0.1))
    except hb.BridgeError as e:
        return {"status": "error", "chain": chain(e), "message": str(e),
                "structural": structural}
    return {"status": "ok", "structural": structural}


def case_train_step_fsdp2() -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = mlp()
    fully_shard(model, mesh=init_device_mesh("cpu", (WORLD,)))  # CPU + gloo: supported
    hb.compile_train_step(model, loss_fn, hb.optim.SGD(lr=0.1))
    return {"status": "ok"}


def case_train_step_collective_loss() -> dict[str, Any]:
    def loss_ar(m: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor
                ) -> torch.Tensor:
        return F.mse_loss(funcol.all_reduce(m(x), "sum", dist.group.WORLD) / WORLD, y)

    model = mlp()
    step = hb.compile_train_step(model, loss_ar, hb.optim.SGD(lr=0.1))
    step(*batches(1)[0])
    return {"status": "ok", "ranks_max_diff": ranks_max_diff(flat_params(model))}


class AllReduceSGD(hb.optim.SGD):
    """SGD that averages the gradients over the ranks inside the update."""

    def update(self, params: Any, grads: Any, state: Any) -> Any:
        grads = {k: funcol.all_reduce(g, "sum", dist.group.WORLD) / WORLD for k, g in grads.items()}
        return super().update(params, grads, state)


def case_train_step_collective_optimizer() -> dict[str, Any]:
    model = mlp()
    step = hb.compile_train_step(model, loss_fn, AllReduceSGD(lr=0.1))
    step(*batches(1)[0])
    return {"status": "ok", "ranks_max_diff": ranks_max_diff(flat_params(model))}


class FunctionalAllReduce(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return funcol.all_reduce(self.body(x), "sum", dist.group.WORLD)


class InPlaceAllReduce(FunctionalAllReduce):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        dist.all_reduce(h)
        return h


def _compiled_forward(model: torch.nn.Module) -> dict[str, Any]:
    out = torch.compile(model, backend="hlobridge", dynamic=False)(batches(1)[0][0])
    return {"status": "ok", "ranks_max_diff": ranks_max_diff(out.detach())}


def case_backend_functional_all_reduce() -> dict[str, Any]:
    return _compiled_forward(FunctionalAllReduce())


def case_backend_c10d_all_reduce() -> dict[str, Any]:
    return _compiled_forward(InPlaceAllReduce())


def case_backend_python_reducer_compiled_autograd() -> dict[str, Any]:
    """DDP traced whole (optimize_ddp="python_reducer") with compiled
    autograd (torch._dynamo.config.compiled_autograd): the backward graph
    holds DDP's gradient all-reduces."""
    import torch._dynamo.config as dcfg

    ref = DDP(mlp())
    x, y = batches(1)[0]
    graphs_before = len(hbd.compiled_graphs())
    with dcfg.patch(optimize_ddp="python_reducer"):
        model = DDP(mlp())  # DDP picks its reducer when constructed
        compiled = torch.compile(model, backend="hlobridge", dynamic=False)

        def train(x: torch.Tensor, y: torch.Tensor) -> None:
            F.mse_loss(compiled(x), y).backward()

        with dcfg.patch(compiled_autograd=True):
            torch.compile(train, backend="hlobridge", dynamic=False)(x, y)
    F.mse_loss(ref(x), y).backward()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])  # type: ignore[union-attr]
    ref_grads = torch.cat([p.grad.reshape(-1) for p in ref.parameters()])  # type: ignore[union-attr]
    return {"status": "ok", "ranks_max_diff": ranks_max_diff(grads),
            "max_grad_diff_vs_eager": float((grads - ref_grads).abs().max()),
            "graphs": len(hbd.compiled_graphs()) - graphs_before}


CASES = [case_backend_ddp, case_train_step_ddp, case_train_step_ddp_one_rank,
         case_train_step_fsdp1, case_train_step_fsdp2, case_train_step_collective_loss,
         case_train_step_collective_optimizer, case_backend_functional_all_reduce,
         case_backend_c10d_all_reduce, case_backend_python_reducer_compiled_autograd]


def main() -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{PORT}", rank=RANK,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    results: dict[str, Any] = {}
    for case in CASES:
        name = case.__name__.removeprefix("case_")
        torch._dynamo.reset()
        try:
            results[name] = case()
        except Exception as e:  # noqa: BLE001
            results[name] = {"status": "error", "chain": chain(e),
                             "message": innermost_message(e)[:2000],
                             "traceback": traceback.format_exc()[-3000:]}
        # Keep the ranks in step between cases.
        dist.barrier()
        with open(OUT + ".partial", "w") as f:
            json.dump(results, f)
    with open(OUT, "w") as f:
        json.dump(results, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
