"""The ``make test`` subset of the op sweep (``scripts/op_sweep.py``,
``make sweep``): every comparable op of torch's OpInfo database, sample 0,
through ``torch.compile(backend="hlobridge", fullgraph=True, dynamic=False)``
against eager, in float32 forward (and backward for every third op) and in
one more dtype class that rotates over the ops (bfloat16/float16/float64,
an integer type, bool, complex64: ``op_sweep.subset_dtypes``).

The run must agree with the expected-failure file
``tests/python/op_expected_failures.toml`` both ways: no failing case that
the file does not list, and no listed case (on sample 0) that passes.

The samples run in ``SHARDS`` tests of one sweep process each (``--shard
i/SHARDS``), each under the sweep's watchdog (a sample that hangs or kills
its process is recorded, not waited for), so that pytest-xdist spreads them
over its workers (``make test-python``). The expected-failure check is per
case (op, dtype, direction), so checking each shard's rows alone is the
same as checking them all at once. About 4 minutes per shard on a 2-core
machine with another worker beside it (14 minutes of CPU time in all).
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


SHARDS = 4


@pytest.mark.parametrize("shard", range(SHARDS))
def test_op_sweep_subset_matches_expected_failures(shard: int, tmp_path: Path) -> None:
    if importlib.util.find_spec("expecttest") is None:
        pytest.fail("torch's OpInfo module needs expecttest (requirements.txt; make setup)")
    env = dict(os.environ, PJRT_DEVICE="CPU")
    try:
        r = subprocess.run(
            [sys.executable, str(_SCRIPTS / "op_sweep.py"), "--subset", "--samples", "1",
             "--shard", f"{shard}/{SHARDS}", "--out-dir", str(tmp_path), "--report", "",
             "--timeout-s", "60"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=900)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"shard {shard}/{SHARDS} ran past 900 s: {str(e.stderr or '')[-2000:]}")
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-2000:]}"
    expect = _expect()
    rows = []
    for f in sorted(tmp_path.glob("hlobridge-*.jsonl")):
        rows += [json.loads(x) for x in f.read_text().splitlines() if x]
    assert len(rows) > 1000 // SHARDS, f"only {len(rows)} samples ran in shard {shard}/{SHARDS}"
    problems = expect.check(rows, expect.load())
    assert not problems, (f"{len(problems)} disagreements with {expect.DEFAULT_PATH.name} "
                          "(fix them, or list a new failure with its class and reason):\n"
                          + "\n".join(map(str, problems[:60])))
