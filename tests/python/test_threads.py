"""The thread settings ``docs/threads.md`` recommends for a process that runs
hlobridge programs next to eager torch code are the ones the runtimes
actually read (no timing is asserted; the measurement is
``benches/real_size/threads.py``):

- ``OMP_WAIT_POLICY=PASSIVE``: torch's OpenMP runtime (libgomp in the
  torch wheels) stops spinning between parallel regions: its spin count
  becomes 0, read back with ``OMP_DISPLAY_ENV=verbose``;
- ``PJRT_NPROC``: sizes the XLA CPU client's worker pools (the
  ``tf_XLAEigen`` threads grow with it);
- ``OMP_NUM_THREADS`` / ``torch.set_num_threads``: torch's intra-op pool
  size is unchanged by importing hlobridge and running a program;
- ``make bench-real`` runs its workers with the recommended setting.

Each check runs in a fresh interpreter, since both runtimes read their
environment once, at start-up.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Runs a small program through the torch.compile backend (checked against
# eager), then reports the process's thread names and torch's thread count.
_PROBE = r"""
import collections, json, os, sys
import torch
import hlobridge  # noqa: F401
if len(sys.argv) > 1:
    torch.set_num_threads(int(sys.argv[1]))
f = torch.compile(lambda x: torch.relu(x @ x) * 2, backend="hlobridge", dynamic=False)
x = torch.randn(64, 64)
torch.testing.assert_close(f(x), torch.relu(x @ x) * 2, rtol=1e-4, atol=1e-4)
names = collections.Counter()
for t in os.listdir("/proc/self/task"):
    try:
        with open(f"/proc/self/task/{t}/comm") as fh:
            names[fh.read().strip()] += 1
    except OSError:
        pass
print(json.dumps({"threads": dict(names), "torch_threads": torch.get_num_threads()}))
"""


def _probe(env_updates: dict[str, str | None], *argv: str) -> tuple[dict[str, Any], str]:
    env = dict(os.environ)
    env.setdefault("PJRT_DEVICE", "CPU")
    for k, v in env_updates.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    p = subprocess.run([sys.executable, "-c", _PROBE, *argv], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def _xla_threads(info: dict[str, Any]) -> int:
    return sum(n for name, n in info["threads"].items() if "XLAEigen" in name)


def _spin_counts(stderr: str) -> list[str]:
    return [line.split("=", 1)[1].strip(" '") for line in stderr.splitlines()
            if "GOMP_SPINCOUNT" in line]


@pytest.fixture(scope="module")
def probes() -> dict[str, tuple[dict[str, Any], str]]:
    """Two fresh processes (each costs an interpreter start and a compile):
    ``recommended``: ``OMP_WAIT_POLICY=PASSIVE``, ``OMP_NUM_THREADS=1``,
    ``PJRT_NPROC=1``; ``default``: no wait policy, ``PJRT_NPROC=4``,
    ``torch.set_num_threads(1)`` after importing hlobridge."""
    common = {"OMP_DISPLAY_ENV": "verbose", "GOMP_SPINCOUNT": None}
    return {
        "recommended": _probe({**common, "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1",
                               "PJRT_NPROC": "1"}),
        "default": _probe({**common, "OMP_WAIT_POLICY": None, "OMP_NUM_THREADS": None,
                           "PJRT_NPROC": "4"}, "1"),
    }


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_pjrt_nproc_sizes_the_xla_pool(probes: dict[str, tuple[dict[str, Any], str]]) -> None:
    one, four = probes["recommended"][0], probes["default"][0]
    assert _xla_threads(one) > 0, one
    assert _xla_threads(four) > _xla_threads(one), (one, four)


def test_omp_wait_policy_passive_turns_spinning_off(
        probes: dict[str, tuple[dict[str, Any], str]]) -> None:
    err = probes["recommended"][1]
    if "OPENMP DISPLAY ENVIRONMENT" not in err:
        pytest.skip("torch's OpenMP runtime does not print its settings (not libgomp)")
    spin = _spin_counts(err)
    assert spin and all(s == "0" for s in spin), err[-2000:]
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in err
    # Without it, libgomp spins between parallel regions (the problem).
    spin = _spin_counts(probes["default"][1])
    assert spin and spin[0] != "0", probes["default"][1][-2000:]


def test_torch_thread_count_is_kept_next_to_hlobridge(
        probes: dict[str, tuple[dict[str, Any], str]]) -> None:
    assert probes["recommended"][0]["torch_threads"] == 1  # OMP_NUM_THREADS=1
    assert probes["default"][0]["torch_threads"] == 1  # torch.set_num_threads(1)


def test_bench_real_uses_the_documented_setting() -> None:
    # Read the constant without importing the bench (its modules have
    # generic names: models, report).
    tree = ast.parse((ROOT / "benches" / "real_size" / "run.py").read_text())
    env = next(ast.literal_eval(node.value) for node in tree.body
               if isinstance(node, ast.Assign)
               and any(getattr(t, "id", None) == "DEFAULT_ENV" for t in node.targets))
    assert env.get("OMP_WAIT_POLICY") == "PASSIVE"
    doc = (ROOT / "docs" / "threads.md").read_text()
    assert "OMP_WAIT_POLICY=PASSIVE" in doc and "PJRT_NPROC" in doc
