"""Data-parallel training-step time on 2 processes (gloo on 127.0.0.1)
against DDP eager and against one process, in one run.

  2 processes, each with a batch of B (``--batch``):
    dp step      hb.compile_train_step(DDP(model), ...): a gradient program,
                 the gradient buckets all-reduced through torch.distributed,
                 an update program (hlobridge._src.data_parallel)
    ddp eager    DDP(model) forward/backward + torch.optim.SGD
    ddp backend  torch.compile(DDP(model), backend="hlobridge") + torch.optim.SGD
  1 process:
    step 2B      hb.compile_train_step(model, ...) on the whole batch (2B):
                 ONE program, the same work as both ranks together
    eager 2B     plain torch on the whole batch
    step B       hb.compile_train_step on one rank's batch (B)
    dp step 1r   the data-parallel step over a process group of ONE rank
                 (batch B): what the split into two programs plus a (trivial)
                 all-reduce costs against ``step B``

SGD with momentum, an MLP (``--width``, 3 layers). Per-step medians and
p10/p90 from interleaved rounds (benches/e2e/timing.py); the 2-process
variants run in the same order on both ranks (every call synchronizes them).
Every process runs torch with ``--threads`` intra-op threads (default 1, as
torchrun sets ``OMP_NUM_THREADS=1``: on a loaded 2-core machine two OpenMP
threads per process made a 1.8 ms eager step take 96 ms); the XLA CPU
runtime keeps its own thread pool.

On a 2-core machine the two ranks share the cores with each other and with
gloo's threads, so the 2-process numbers mostly show overhead (collective
latency, the second program, process contention), not a speed-up; the
one-process runs go first, alone.

Run manually (not a CI test):
    PJRT_DEVICE=CPU .venv/bin/python benches/distributed_bench.py [--batch 64] [--width 256] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hlobridge as hb  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))
from timing import interleaved  # noqa: E402  (benches/e2e/timing.py)

LR, MOMENTUM, D_IN, D_OUT = 0.01, 0.9, 64, 16


class MLP(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(D_IN, width)
        self.fc2 = torch.nn.Linear(width, width)
        self.fc3 = torch.nn.Linear(width, D_OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


def loss_fn(m: Any, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(m(x), y)


def _data(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, D_IN, generator=g), torch.randn(batch, D_OUT, generator=g)


def _eager_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
                y: torch.Tensor, fwd: Any = None) -> None:
    opt.zero_grad(set_to_none=True)
    loss_fn(fwd or model, x, y).backward()
    opt.step()


def _sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)


def _init(rank: int, world: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=120))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def single(args: argparse.Namespace) -> dict[str, Any]:
    """The one-process variants (a gloo group of one rank for ``dp step 1r``)."""
    torch.set_num_threads(args.threads)
    _init(0, 1, _free_port())
    torch.manual_seed(0)
    base = MLP(args.width)
    b = args.batch
    x2, y2 = _data(2 * b, 1)
    x1, y1 = x2[:b].clone(), y2[:b].clone()
    m_step2, m_eager, m_step1, m_dp = (copy.deepcopy(base) for _ in range(4))
    opt = hb.optim.SGD(lr=LR, momentum=MOMENTUM)
    step2 = hb.compile_train_step(m_step2, loss_fn, opt)
    step1 = hb.compile_train_step(m_step1, loss_fn, opt)
    dp1 = hb.compile_train_step(m_dp, loss_fn, opt, process_group=dist.group.WORLD)
    eager_opt = _sgd(m_eager)
    res = interleaved({
        "step 2B (1 process)": lambda: step2(x2, y2),
        "eager 2B (1 process)": lambda: _eager_step(m_eager, eager_opt, x2, y2),
        "step B (1 process)": lambda: step1(x1, y1),
        "dp step 1r (1 process)": lambda: dp1(x1, y1),
    }, reps=args.reps, batch=args.calls)
    dist.destroy_process_group()
    return {"programs": {"step B": 1, "dp step 1r": len(dp1.graphs[0].pieces)}, "stats": res}


def worker(args: argparse.Namespace) -> None:
    """One rank of the 2-process variants; rank 0 writes the results."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = args.rank
    torch.set_num_threads(args.threads)
    _init(rank, 2, args.port)
    torch.manual_seed(0)
    base = MLP(args.width)
    x, y = _data(2 * args.batch, 1)
    x, y = x[rank * args.batch:(rank + 1) * args.batch], y[rank * args.batch:(rank + 1) * args.batch]
    x, y = x.clone(), y.clone()
    dp_model = DDP(copy.deepcopy(base))
    step = hb.compile_train_step(dp_model, loss_fn, hb.optim.SGD(lr=LR, momentum=MOMENTUM))
    ddp = DDP(copy.deepcopy(base))
    ddp_opt = _sgd(ddp)
    ddp_b = DDP(copy.deepcopy(base))
    compiled = torch.compile(ddp_b, backend="hlobridge", dynamic=False)
    ddp_b_opt = _sgd(ddp_b)
    res = interleaved({
        "dp step (2 processes)": lambda: step(x, y),
        "ddp eager (2 processes)": lambda: _eager_step(ddp, ddp_opt, x, y),
        "ddp backend (2 processes)": lambda: _eager_step(ddp_b, ddp_b_opt, x, y, compiled),
    }, reps=args.reps, batch=args.calls)
    if rank == 0:
        Path(args.out).write_text(json.dumps(
            {"programs": {"dp step": len(step.graphs[0].pieces)}, "stats": res}))
    dist.barrier()
    dist.destroy_process_group()


def two_processes(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rank0.json"
        port = _free_port()
        common = [sys.executable, __file__, "--port", str(port), "--out", str(out),
                  "--batch", str(args.batch), "--width", str(args.width),
                  "--reps", str(args.reps), "--calls", str(args.calls),
                  "--threads", str(args.threads)]
        procs = [subprocess.Popen([*common, "--rank", str(r)], start_new_session=True)
                 for r in range(2)]
        try:
            for p in procs:
                p.wait(timeout=args.timeout)
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, 9)
                    p.wait()
        if any(p.returncode != 0 for p in procs):
            raise SystemExit(f"a rank failed: {[p.returncode for p in procs]}")
        return json.loads(out.read_text())  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64, help="per-rank batch B")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--reps", type=int, default=15, help="interleaved rounds")
    ap.add_argument("--calls", type=int, default=10, help="steps per round and variant")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank is not None:
        worker(args)
        return
    one = single(args)
    two = two_processes(args)
    stats = {**one["stats"], **two["stats"]}
    print(f"MLP {D_IN}-{args.width}-{args.width}-{D_OUT}, SGD momentum, per-rank batch "
          f"{args.batch}; torch threads {args.threads} per process, cpus {os.cpu_count()}")
    print(f"{'variant':28} {'median ms':>10} {'p10':>8} {'p90':>8}")
    for k, s in stats.items():
        print(f"{k:28} {s['median_us'] / 1e3:10.3f} {s['p10_us'] / 1e3:8.3f} "
              f"{s['p90_us'] / 1e3:8.3f}")
    print(f"programs per step: {one['programs'] | two['programs']}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"batch": args.batch, "width": args.width, "cpus": os.cpu_count(),
             "threads": args.threads,
             "programs": one["programs"] | two["programs"], "stats": stats}, indent=1))


if __name__ == "__main__":
    main()
