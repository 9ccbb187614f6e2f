"""hlobridge.spmd: stitched torch + JAX programs run SPMD across processes
through JAX's distributed runtime.

Two processes on 127.0.0.1 (torchrun, free ports, a hard timeout that kills
the whole process group): ``spmd_worker.py`` starts ``jax.distributed``
through ``hlobridge.distributed.initialize`` with 2 CPU devices each (4
global devices), stitches torch segments whose ``funcol.all_reduce`` was
rewritten by the Rust pass into the global-device-id form, and runs them
under ``shard_map``; each process's outputs must equal eager torch on the
whole data within 1e-5 (float32 sums of a few terms; measured <= 1e-6).
The same over the whole mesh (``mode="global"``: global shapes, shardings
carried through the torch and JAX ops by Shardy, collectives from XLA).
``examples/spmd_train.py`` (DP + TP training with optax) runs under torchrun
and checks itself against single-process torch (exit code).

In-process: the named errors of ``initialize`` and the rewrite, mesh-axis
replica groups, and an :class:`SpmdProgram` on this process's one device
against torch eager.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

import hlobridge as hb
from hlobridge import _native, spmd

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("spmd_worker.py")
TIMEOUT_S = 420
TOL = 1e-5


def _free_port_pair() -> int:
    """A port p with p and p + 1 free (torch's store, JAX's coordinator)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p + 1 >= 65536:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", p + 1))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port pair")


def _torchrun(script: Path, *args: str, timeout: int = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run ``script`` under torchrun with 2 processes on 127.0.0.1; kill the
    whole process group (torchrun and its workers) at ``timeout``."""
    env = dict(os.environ, PJRT_DEVICE="CPU", MASTER_ADDR="127.0.0.1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "HLOBRIDGE_COORDINATOR_PORT"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port_pair()),
           str(script), *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{script.name} did not finish in {timeout}s:\n{out[-4000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("spmd")
    res = _torchrun(WORKER, str(out))
    assert res.returncode == 0, res.stdout[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def _case(ranks: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    got = [r[name] for r in ranks]
    for r in got:
        assert "crash" not in r, r.get("crash")
    return got


def test_two_processes_four_devices(ranks: list[dict[str, Any]]) -> None:
    assert [r["info"]["process_id"] for r in ranks] == [0, 1]
    assert all(r["info"]["num_processes"] == 2 and r["info"]["global_devices"] == 4
               for r in ranks)
    # The coordinator listens on MASTER_PORT + 1, the same for both.
    assert ranks[0]["info"]["coordinator"] == ranks[1]["info"]["coordinator"]


def test_torch_all_reduce_over_all_devices(ranks: list[dict[str, Any]]) -> None:
    for r in _case(ranks, "all_devices"):
        assert r["err"] <= TOL
        assert r["shape"] == [3, 4]
        assert r["report"]["rewritten"] == 1 and r["report"]["tokens_dropped"] == 1


def test_torch_all_reduce_over_one_mesh_axis(ranks: list[dict[str, Any]]) -> None:
    got = _case(ranks, "mesh_axes")
    for r in got:
        assert r["err_h"] <= TOL and r["err_m"] <= TOL
        assert r["shape_h"] == [2, 3]
    # Distinct channels per segment, the same on both processes (one SPMD program).
    assert got[0]["channels"] == got[1]["channels"]
    assert len(set(got[0]["channels"])) == 2


def test_all_gather_is_refused_by_name(ranks: list[dict[str, Any]]) -> None:
    for r in _case(ranks, "refuse_all_gather"):
        assert r["error"] == "CollectiveRewriteError"
        assert "all_gather" in r["message"] and "4 devices" in r["message"]


def test_wrong_local_block_is_named(ranks: list[dict[str, Any]]) -> None:
    for rank, r in enumerate(_case(ranks, "bad_local_shape")):
        assert r["error"] == "SpmdArgumentError"
        assert "[4, 3]" in r["message"] and f"({4 * rank}, {4 * rank + 4})" in r["message"]


def test_program_over_the_whole_mesh(ranks: list[dict[str, Any]]) -> None:
    for r in _case(ranks, "whole_mesh"):
        assert r["err"] <= TOL
        assert r["shape"] == [4, 4]
        assert r["all_reduce"], "the contraction over tp needs an all-reduce from XLA"


def test_whole_mesh_program_refuses_collectives(ranks: list[dict[str, Any]]) -> None:
    for r in _case(ranks, "whole_mesh_refuses_collectives"):
        assert r["error"] == "CollectiveRewriteError"
        assert "stablehlo.all_reduce" in r["message"] and "mode='shard_map'" in r["message"]


def test_example_spmd_train_matches_single_process() -> None:
    res = _torchrun(ROOT / "examples" / "spmd_train.py", "--steps", "3")
    assert res.returncode == 0, res.stdout[-4000:]
    assert "rank 0: max |param - reference|" in res.stdout
    assert "rank 1: max |param - reference|" in res.stdout


# ---- in-process -------------------------------------------------------------------------


def test_initialize_needs_torchrun_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("RANK", "WORLD_SIZE", "MASTER_PORT", "HLOBRIDGE_COORDINATOR_PORT"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(spmd.DistributedInitError, match="WORLD_SIZE is not set"):
        hb.distributed.initialize()
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(spmd.DistributedInitError, match="RANK='two' is not an integer"):
        hb.distributed.initialize()
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(spmd.DistributedInitError, match=r"not in \[0, WORLD_SIZE=2\)"):
        hb.distributed.initialize()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_PORT", "65535")
    with pytest.raises(spmd.DistributedInitError, match="65536 is out of range"):
        hb.distributed.initialize()
    assert issubclass(spmd.DistributedInitError, hb.BridgeError)
    assert not hb.distributed.is_initialized()


def test_initialize_after_jax_started_is_named() -> None:
    code = textwrap.dedent("""
        import jax, hlobridge.distributed as d
        jax.devices()
        try:
            d.initialize(num_processes=1, process_id=0, coordinator_port=1)
        except d.DistributedInitError as e:
            print("ERR", e)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env={k: v for k, v in os.environ.items()
                                           if k not in ("RANK", "WORLD_SIZE")})
    assert "ERR" in res.stdout and "already started" in res.stdout, res.stdout + res.stderr


def test_axis_groups_are_mesh_positions() -> None:
    mesh = SimpleNamespace(axis_names=("dp", "tp"), devices=np.empty((2, 3), dtype=object))
    assert spmd.axis_groups(mesh, "tp") == [[0, 1, 2], [3, 4, 5]]
    assert spmd.axis_groups(mesh, "dp") == [[0, 3], [1, 4], [2, 5]]
    assert spmd.axis_groups(mesh) == [[0, 1, 2, 3, 4, 5]]
    with pytest.raises(ValueError, match="not \\['pp'\\]"):
        spmd.axis_groups(mesh, "pp")


TORCH_XLA_GATHER = """func.func @main(%arg0: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %0 = "stablehlo.all_gather"(%arg0) <{all_gather_dim = 0 : i64, replica_groups = dense<0> : tensor<1x1xi64>}> : (tensor<4x3xf32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}"""


def test_rewrite_errors_are_named() -> None:
    with pytest.raises(hb.CollectiveRewriteError, match="all_gather") as info:
        _native.rewrite_collectives(TORCH_XLA_GATHER, 4)
    assert isinstance(info.value, hb.StitchError)
    with pytest.raises(hb.CollectiveRewriteError, match="do not split"):
        _native.rewrite_collectives(TORCH_XLA_GATHER, 4, [[0, 1], [1, 2]])


def test_program_on_one_device_matches_torch() -> None:
    """The Exported wrapper and DLPack round trip on this process's mesh
    (1 process x its devices): a torch Linear then a JAX tanh."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    if jax.process_count() != 1:
        pytest.skip("needs a single-process JAX")

    class Lin(torch.nn.Module):
        def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return x @ w.T

    mesh = spmd.process_mesh(("dp", "tp"))
    ndev = mesh.devices.size
    seg = spmd.torch_segment("lin", Lin(), (torch.randn(3, 4), torch.randn(5, 4)), ["x", "w"],
                             ["h"], mesh=mesh)
    jtext = jax.jit(jnp.tanh).lower(jax.ShapeDtypeStruct((3, 5), jnp.float32)).as_text()
    prog = spmd.stitch_spmd([("x", "tensor<3x4xf32>"), ("w", "tensor<5x4xf32>")],
                            [seg, ("act", "jax", jtext, "main", ["h"], ["y"])], ["y"], mesh,
                            {"x": P(("dp", "tp"))}, [P(("dp", "tp"))])
    x, w = torch.randn(3 * ndev, 4), torch.randn(5, 4)
    (y,) = prog(x, w)
    torch.testing.assert_close(y, torch.tanh(x @ w.T), atol=1e-6, rtol=1e-6)
    with pytest.raises(spmd.SpmdArgumentError, match="takes 2 tensors"):
        prog(x)
