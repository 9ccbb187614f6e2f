"""The ``make test`` subset of the op sweep (``scripts/op_sweep.py``,
``make sweep``): every comparable op of torch's OpInfo database, sample 0,
through ``torch.compile(backend="hlobridge", fullgraph=True, dynamic=False)``
against eager, in float32 forward (and backward for every third op) and in
one more dtype class that rotates over the ops (bfloat16/float16/float64,
an integer type, bool, complex64: ``op_sweep.subset_dtypes``).

The run must agree with the expected-failure file
``tests/python/op_expected_failures.toml`` both ways: no failing case that
the file does not list, and no listed case (on sample 0) that passes.

The samples run in two sweep processes at once (``--shard 0/2`` and
``1/2``), each under the sweep's watchdog (a sample that hangs or kills
its process is recorded, not waited for): about two minutes on two cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

_SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _expect() -> ModuleType:
    if str(_SCRIPTS) not in sys.path:
        sys.path.insert(0, str(_SCRIPTS))
    return importlib.import_module("op_sweep_expect")


def test_op_sweep_subset_matches_expected_failures(tmp_path: Path) -> None:
    if importlib.util.find_spec("expecttest") is None:
        pytest.fail("torch's OpInfo module needs expecttest (requirements.txt; make setup)")
    env = dict(os.environ, PJRT_DEVICE="CPU")
    procs = [subprocess.Popen(
        [sys.executable, str(_SCRIPTS / "op_sweep.py"), "--subset", "--samples", "1",
         "--shard", f"{i}/2", "--out-dir", str(tmp_path), "--report", "", "--timeout-s", "60"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for i in range(2)]
    errs = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
        if p.returncode != 0:
            errs.append(f"exit {p.returncode}: {err[-2000:]}")
    assert not errs, "\n".join(errs)
    expect = _expect()
    rows = []
    for f in sorted(tmp_path.glob("hlobridge-*.jsonl")):
        rows += [json.loads(x) for x in f.read_text().splitlines() if x]
    assert len(rows) > 1000, f"only {len(rows)} samples ran"
    problems = expect.check(rows, expect.load())
    assert not problems, (f"{len(problems)} disagreements with {expect.DEFAULT_PATH.name} "
                          "(fix them, or list a new failure with its class and reason):\n"
                          + "\n".join(map(str, problems[:60])))
