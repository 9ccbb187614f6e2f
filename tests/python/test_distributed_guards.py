"""hlobridge under ``torch.distributed``: never silently wrong.

Two ranks (``distributed_guard_worker.py``, gloo on 127.0.0.1, a free port,
different data on each rank) run every case once; the tests below check
their reports:

- ``compile_train_step(DDP(model))`` and FSDP (FSDP1, FSDP2 ``fully_shard``)
  raise :class:`DistributedNotSupportedError` on both ranks (without the
  guard the ranks diverge after one step, no error);
- DDP over a process group of ONE rank is unwrapped and trains like eager
  torch (parameters within 1e-5 after 3 SGD steps; measured ~3e-8);
- a collective traced into a graph (``funcol.all_reduce`` or
  ``dist.all_reduce`` in a model under ``torch.compile``, in a
  ``compile_train_step`` loss or optimizer, DDP's python_reducer under
  compiled autograd) raises :class:`CollectiveNotSupportedError` (without
  the guard: a one-replica ``stablehlo.all_reduce``, a no-op);
- ``torch.compile(DDP(model), backend="hlobridge", dynamic=False)`` with the
  default DDPOptimizer still works: after 3 SGD steps the parameters match
  DDP eager within 1e-6 (measured ~3e-8) and are bit-identical on both ranks.

Single-process tests check the StableHLO backstop (a module torch_xla
lowered from ``_c10d_functional.all_reduce``, with the FX-level check
switched off) and the text and FX checks directly.

The two workers are bounded: 120 s, then their process groups are killed.

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_distributed_guards.py -q
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx

import hlobridge as hb
from hlobridge import distributed_guard as guard
from hlobridge import dynamo as hbd

HERE = Path(__file__).resolve().parent
WORKER = HERE / "distributed_guard_worker.py"
SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
TIMEOUT_S = 120
WORLD = 2


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kill_group(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Both ranks' reports ({case: result}), from one run of the workers."""
    out = tmp_path_factory.mktemp("dist")
    port = _free_port()
    env = {**os.environ, "PJRT_DEVICE": "CPU"}
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    for r in range(WORLD):
        log = open(out / f"rank{r}.log", "wb")  # noqa: SIM115 (closed below)
        logs.append(log)
        procs.append(subprocess.Popen(
            [sys.executable, str(WORKER), str(r), str(WORLD), str(port),
             str(out / f"rank{r}.json"), str(SEED)],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
    deadline = time.monotonic() + TIMEOUT_S
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        timed_out = any(p.poll() is None for p in procs)
        for p in procs:
            _kill_group(p)
        for log in logs:
            log.close()

    def tail(r: int) -> str:
        return (out / f"rank{r}.log").read_text(errors="replace")[-3000:]

    for r, p in enumerate(procs):
        assert not timed_out, f"seed={SEED}: workers ran past {TIMEOUT_S} s; rank {r}:\n{tail(r)}"
        assert p.returncode == 0, f"seed={SEED}: rank {r} exited {p.returncode}:\n{tail(r)}"
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]


def _result(ranks: list[dict[str, Any]], case: str) -> list[dict[str, Any]]:
    return [rk[case] for rk in ranks]


def _assert_named_error(ranks: list[dict[str, Any]], case: str, error: type[Exception],
                        *words: str) -> None:
    for r, res in enumerate(_result(ranks, case)):
        assert res["status"] == "error", f"seed={SEED}: rank {r}, {case}: no error: {res}"
        assert res["chain"][-1] == error.__name__, \
            f"seed={SEED}: rank {r}, {case}: {res['chain']}\n{res.get('traceback', '')}"
        for w in (*words, "torch.compile(DDP(model), backend=\"hlobridge\""):
            assert w in res["message"], f"rank {r}, {case}: {w!r} not in {res['message']!r}"


# -- two ranks -----------------------------------------------------------------
def test_compile_train_step_refuses_ddp(ranks: list[dict[str, Any]]) -> None:
    _assert_named_error(ranks, "train_step_ddp", hbd.DistributedNotSupportedError,
                        "DistributedDataParallel over 2 ranks")


def test_compile_train_step_refuses_fsdp1(ranks: list[dict[str, Any]]) -> None:
    _assert_named_error(ranks, "train_step_fsdp1", hbd.DistributedNotSupportedError,
                        "FullyShardedDataParallel")


def test_compile_train_step_refuses_fsdp2(ranks: list[dict[str, Any]]) -> None:
    _assert_named_error(ranks, "train_step_fsdp2", hbd.DistributedNotSupportedError,
                        "fully_shard")


def test_compile_train_step_unwraps_one_rank_ddp(ranks: list[dict[str, Any]]) -> None:
    for r, res in enumerate(_result(ranks, "train_step_ddp_one_rank")):
        assert res["status"] == "ok", f"seed={SEED}: rank {r}: {res}"
        assert res["unwrapped"]
        assert res["max_param_diff_vs_eager"] <= 1e-5, f"seed={SEED}: rank {r}: {res}"
        assert res["max_loss_diff_vs_eager"] <= 1e-5, f"seed={SEED}: rank {r}: {res}"


@pytest.mark.parametrize("case", ["train_step_collective_loss",
                                  "train_step_collective_optimizer"])
def test_compile_train_step_refuses_collectives(ranks: list[dict[str, Any]], case: str) -> None:
    _assert_named_error(ranks, case, hbd.CollectiveNotSupportedError,
                        "_c10d_functional::all_reduce")


@pytest.mark.parametrize("case", ["backend_functional_all_reduce", "backend_c10d_all_reduce",
                                  "backend_python_reducer_compiled_autograd"])
def test_backend_refuses_collectives(ranks: list[dict[str, Any]], case: str) -> None:
    _assert_named_error(ranks, case, hbd.CollectiveNotSupportedError,
                        "_c10d_functional::all_reduce")


def test_backend_ddp_matches_eager(ranks: list[dict[str, Any]]) -> None:
    for r, res in enumerate(_result(ranks, "backend_ddp")):
        assert res["status"] == "ok", f"seed={SEED}: rank {r}: {res}"
        assert res["graphs"] >= 2, f"rank {r}: hlobridge compiled nothing: {res}"
        assert res["max_param_diff_vs_eager"] <= 1e-6, f"seed={SEED}: rank {r}: {res}"
        assert res["max_loss_diff_vs_eager"] <= 1e-6, f"seed={SEED}: rank {r}: {res}"
        assert res["ranks_max_diff"] == 0.0, f"seed={SEED}: rank {r}: ranks differ: {res}"
        assert res["ref_ranks_max_diff"] == 0.0


# -- one process ---------------------------------------------------------------
def _all_reduce_graph() -> torch.fx.GraphModule:
    """``wait_tensor(all_reduce(x, "sum", group))``, as Dynamo or make_fx
    record a functional all-reduce."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    ar = g.call_function(torch.ops._c10d_functional.all_reduce.default, (x, "sum", "0"))
    w = g.call_function(torch.ops._c10d_functional.wait_tensor.default, (ar,))
    g.output((w,))
    return torch.fx.GraphModule({}, g)


def test_fx_check_names_the_collectives() -> None:
    with pytest.raises(hbd.CollectiveNotSupportedError) as info:
        guard.check_fx_collectives(_all_reduce_graph())
    msg = str(info.value)
    assert "_c10d_functional::all_reduce" in msg and "_c10d_functional::wait_tensor" in msg
    assert isinstance(info.value, hbd.UnsupportedOpError)
    assert isinstance(info.value, hb.BridgeError)
    plain = torch.fx.symbolic_trace(torch.nn.Linear(3, 2))
    guard.check_fx_collectives(plain)  # no collective: no error


def test_stablehlo_backstop_catches_torch_xla_all_reduce(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the FX-level check switched off, the graph reaches torch_xla,
    which lowers it to a one-replica ``stablehlo.all_reduce`` with empty
    replica groups: the backstop refuses it before stitching."""
    monkeypatch.setattr(guard, "check_fx_collectives", lambda *a, **k: None)
    from hlobridge.dynamo.program import CompiledGraph

    graph = CompiledGraph(_all_reduce_graph(), "backstop test")
    with pytest.raises(hbd.CollectiveNotSupportedError) as info:
        graph(torch.randn(4))
    msg = str(info.value)
    assert "stablehlo.all_reduce" in msg and "dense<>" in msg and "1 replica(s)" in msg


_ONE_REPLICA = """module @m attributes {mhlo.num_replicas = 1 : i32, mhlo.num_partitions = 1 : i32} {
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.all_gather"(%arg0) <{all_gather_dim = 0 : i64, replica_groups = dense<[[0]]> : tensor<1x1xi64>}> : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}"""


def test_stablehlo_check_on_texts() -> None:
    with pytest.raises(hbd.CollectiveNotSupportedError, match="stablehlo.all_gather"):
        guard.check_stablehlo_collectives(_ONE_REPLICA)
    four = (_ONE_REPLICA.replace("num_replicas = 1", "num_replicas = 4")
            .replace("dense<[[0]]> : tensor<1x1xi64>", "dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>"))
    with pytest.raises(hbd.CollectiveNotSupportedError, match="over 4 devices"):
        guard.check_stablehlo_collectives(four)
    plain = _ONE_REPLICA.replace('"stablehlo.all_gather"', '"stablehlo.abs"')
    guard.check_stablehlo_collectives(plain)  # no collective: no error


def test_train_step_model_check_without_process_group() -> None:
    """No process group: a plain model passes through unchanged."""
    import torch.distributed as dist

    assert not (dist.is_available() and dist.is_initialized())
    model = torch.nn.Linear(3, 2)
    assert guard.check_train_step_model(model) is model
    assert guard.world_size() == 1
