"""hlobridge under ``torch.distributed``: never silently wrong.

Two ranks (``distributed_guard_worker.py``, gloo on 127.0.0.1, a free port,
different data on each rank) run every case once; the tests below check
their reports:

- FSDP (FSDP1, FSDP2 ``fully_shard``) in ``compile_train_step`` raises
  :class:`DistributedNotSupportedError` on both ranks;
- DDP over a process group of ONE rank is unwrapped and trains like eager
  torch (parameters within 1e-5 after 3 SGD steps; measured ~3e-8);
- a functional collective on a value that needs no gradient runs between
  hlobridge programs and is correct: in a ``compile_train_step`` optimizer
  (equals DDP eager within 1e-6 after 3 SGD steps, ranks bit-identical), on
  the loss's normalizer, in a forward under ``torch.no_grad()`` (functional
  and ``dist.all_reduce``), in DDP's python_reducer backward under compiled
  autograd (equals DDP eager within 1e-6 after 3 steps);
- a collective on a value that requires grad (torch has no backward for it)
  raises :class:`CollectiveNotSupportedError`, in the backend and in
  ``compile_train_step``'s loss.

(Data-parallel ``compile_train_step`` and DDP/FSDP under the backend:
``test_distributed_data_parallel.py``.)

Single-process tests check the StableHLO backstop (a module torch_xla
lowered from ``_c10d_functional.all_reduce``, with the FX-level check
switched off), the text and FX checks directly, and how
:mod:`hlobridge._src.collective_split` cuts a graph into programs.

The workers are bounded: 150 s, then their process groups are killed.

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_distributed_guards.py -q
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx
from distributed_worker_common import run_workers

import hlobridge as hb
from hlobridge._src import distributed_guard as guard
from hlobridge import dynamo as hbd

HERE = Path(__file__).resolve().parent
WORKER = HERE / "distributed_guard_worker.py"
SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
TIMEOUT_S = 150
TOL = 1e-6
"""Parameters and losses against the eager reference (float32 programs vs
eager torch over 3 steps; measured 3e-8 to 2.4e-7)."""


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Both ranks' reports ({case: result}), from one run of the workers."""
    return run_workers(WORKER, tmp_path_factory.mktemp("dist"), SEED, TIMEOUT_S)


def _result(ranks: list[dict[str, Any]], case: str) -> list[dict[str, Any]]:
    return [rk[case] for rk in ranks]


def _assert_named_error(ranks: list[dict[str, Any]], case: str, error: type[Exception],
                        *words: str) -> None:
    for r, res in enumerate(_result(ranks, case)):
        assert res["status"] == "error", f"seed={SEED}: rank {r}, {case}: no error: {res}"
        assert res["chain"][-1] == error.__name__, \
            f"seed={SEED}: rank {r}, {case}: {res['chain']}\n{res.get('traceback', '')}"
        for w in words:
            assert w in res["message"], f"rank {r}, {case}: {w!r} not in {res['message']!r}"


def _assert_ok(ranks: list[dict[str, Any]], case: str, **limits: float) -> None:
    for r, res in enumerate(_result(ranks, case)):
        assert res["status"] == "ok", f"seed={SEED}: rank {r}, {case}: {res}"
        for key, limit in limits.items():
            assert res[key] <= limit, f"seed={SEED}: rank {r}, {case}: {key} > {limit}: {res}"


# -- two ranks -----------------------------------------------------------------
def test_compile_train_step_refuses_fsdp1(ranks: list[dict[str, Any]]) -> None:
    _assert_named_error(ranks, "train_step_fsdp1", hbd.DistributedNotSupportedError,
                        "FullyShardedDataParallel", "torch.compile(model, backend=")


def test_compile_train_step_refuses_fsdp2(ranks: list[dict[str, Any]]) -> None:
    _assert_named_error(ranks, "train_step_fsdp2", hbd.DistributedNotSupportedError,
                        "fully_shard", "torch.compile(model, backend=")


def test_compile_train_step_unwraps_one_rank_ddp(ranks: list[dict[str, Any]]) -> None:
    _assert_ok(ranks, "train_step_ddp_one_rank", max_param_diff_vs_eager=1e-5,
               max_loss_diff_vs_eager=1e-5)
    assert all(res["unwrapped"] for res in _result(ranks, "train_step_ddp_one_rank"))


def test_compile_train_step_refuses_differentiable_collective(
        ranks: list[dict[str, Any]]) -> None:
    _assert_named_error(ranks, "train_step_collective_loss", hbd.CollectiveNotSupportedError,
                        "_c10d_functional::all_reduce", "requires grad",
                        "compile_train_step (train_step")


def test_compile_train_step_collective_in_optimizer_runs_between_programs(
        ranks: list[dict[str, Any]]) -> None:
    """Without the split this was a one-replica no-op (ranks 1.5e-2 apart
    after one step); now it is DDP's arithmetic."""
    _assert_ok(ranks, "train_step_collective_optimizer", max_param_diff_vs_ddp=TOL,
               max_loss_diff_vs_ddp=TOL, ranks_max_diff=0.0)
    assert all(res["programs"] == 2 for res in _result(ranks, "train_step_collective_optimizer"))


def test_compile_train_step_collective_on_loss_normalizer(ranks: list[dict[str, Any]]) -> None:
    _assert_ok(ranks, "train_step_collective_count", max_param_diff_vs_eager=TOL,
               max_loss_diff_vs_eager=TOL)
    for res in _result(ranks, "train_step_collective_count"):
        assert "_c10d_functional.all_reduce.default" in res["collectives"], res


@pytest.mark.parametrize("case", ["backend_functional_all_reduce", "backend_c10d_all_reduce"])
def test_backend_refuses_differentiable_collectives(ranks: list[dict[str, Any]],
                                                    case: str) -> None:
    _assert_named_error(ranks, case, hbd.CollectiveNotSupportedError,
                        "_c10d_functional::all_reduce", "requires grad", "torch.no_grad()")
    # The backend's own error reaches the caller, not Dynamo's
    # BackendCompilerFailed wrapper (hlobridge._src.dynamo.raise_through).
    assert _result(ranks, case)[0]["chain"][0] == "CollectiveNotSupportedError"


@pytest.mark.parametrize("case", ["backend_functional_all_reduce_no_grad",
                                  "backend_c10d_all_reduce_no_grad"])
def test_backend_runs_collectives_between_programs(ranks: list[dict[str, Any]],
                                                   case: str) -> None:
    """Without the split: a no-op, ranks 0.65 apart."""
    _assert_ok(ranks, case, max_diff_vs_eager=TOL, ranks_max_diff=0.0)
    assert all(res["programs"] >= 1 for res in _result(ranks, case))


def test_backend_python_reducer_compiled_autograd(ranks: list[dict[str, Any]]) -> None:
    """DDP's python_reducer bucket all-reduces in the compiled-autograd
    backward graph run between programs (without the split: ranks 1.25e-2
    apart)."""
    _assert_ok(ranks, "backend_python_reducer_compiled_autograd", max_grad_diff_vs_ddp=TOL,
               max_param_diff_vs_ddp=TOL, ranks_max_diff=0.0)


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
    from hlobridge._src.dynamo.program import CompiledGraph

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


def test_split_schedule() -> None:
    """:func:`hlobridge._src.collective_split.compile_graph` cuts a graph into
    programs at its collectives: producers of the collectives' inputs in the
    first program, every collective issued before the first wait, readers of
    their results (and work that only feeds the output) in the second."""
    from hlobridge._src.collective_split import SplitGraph, compile_graph

    c10d = torch.ops._c10d_functional
    g = torch.fx.Graph()
    x, w = g.placeholder("x"), g.placeholder("w")
    a = g.call_function(torch.ops.aten.mul.Tensor, (x, 2.0))
    ar = g.call_function(c10d.all_reduce.default, (a, "sum", "0"))
    wt = g.call_function(c10d.wait_tensor.default, (ar,))
    b = g.call_function(torch.ops.aten.add.Tensor, (wt, 1.0))
    c = g.call_function(torch.ops.aten.mul.Tensor, (w, 3.0))
    e = g.call_function(torch.ops.aten.mul.Tensor, (x, 5.0))
    ar2 = g.call_function(c10d.all_reduce.default, (e, "sum", "0"))
    wt2 = g.call_function(c10d.wait_tensor.default, (ar2,))
    g.output((b, c, wt2))
    split = compile_graph(torch.fx.GraphModule({}, g), "schedule test")
    assert isinstance(split, SplitGraph)
    assert len(split.pieces) == 2
    assert split.collectives == ["_c10d_functional.all_reduce.default"] * 2 + \
        ["_c10d_functional.wait_tensor.default"] * 2

    def ops(piece: hbd.CompiledGraph) -> list[Any]:
        return [(n.target, n.args[1]) for n in piece.gm.graph.nodes if n.op == "call_function"]

    mul, add = torch.ops.aten.mul.Tensor, torch.ops.aten.add.Tensor
    assert sorted(ops(split.pieces[0]), key=str) == [(mul, 2.0), (mul, 5.0)]
    assert sorted(ops(split.pieces[1]), key=str) == [(add, 1.0), (mul, 3.0)]
    # Plain graphs stay ONE program.
    g = torch.fx.Graph()
    g.output((g.call_function(torch.ops.aten.mul.Tensor, (g.placeholder("x"), 2.0)),))
    assert isinstance(compile_graph(torch.fx.GraphModule({}, g), "plain"), hbd.CompiledGraph)


def test_split_refuses_in_place_collective() -> None:
    """An in-place collective is not split (it would write into a program's
    input): refused by name."""
    from hlobridge._src.collective_split import compile_graph

    g = torch.fx.Graph()
    x = g.placeholder("x")
    ar = g.call_function(torch.ops._c10d_functional.all_reduce_.default, (x, "sum", "0"))
    w = g.call_function(torch.ops._c10d_functional.wait_tensor.default, (ar,))
    g.output((w,))
    with pytest.raises(hbd.CollectiveNotSupportedError,
                       match=r"_c10d_functional::all_reduce_\b.*cannot be run between"):
        compile_graph(torch.fx.GraphModule({}, g), "in-place test")
