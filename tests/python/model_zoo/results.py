"""The model zoo's results file: with ``HLOBRIDGE_ZOO_JSON=path`` every zoo
test module (``test_model_zoo.py``, ``test_zoo_hybrid.py``,
``test_zoo_generate.py``) records each cell's outcome, measured
differences and time, and merges them into that JSON file when the module
ends; ``scripts/gen_models_table.py`` renders it as docs/models.md.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

__all__ = ["SEED", "flush", "fresh_dynamo", "record_cell", "write_results"]

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", "20240917"))
"""The zoo's seed (``HLOBRIDGE_TEST_SEED`` overrides it)."""

_RESULTS: dict[str, dict[str, Any]] = {}


def record_cell(key: str, run: Callable[[], dict[str, Any]],
                expected: type[BaseException] | None = None, seed: int | None = None) -> None:
    """Run one cell, record its outcome under ``key`` and re-raise a failure
    (as AssertionError naming the seed). ``expected``: the named error the
    cell must raise (a cell that raises it is recorded as
    ``expected_error``; one that passes fails the test)."""
    t0 = time.perf_counter()
    try:
        metrics = run()
    except BaseException as e:
        _RESULTS[key] = {"status": "error", "error": type(e).__name__,
                         "message": str(e).splitlines()[0][:300] if str(e) else "",
                         "seconds": round(time.perf_counter() - t0, 1)}
        if expected is not None and isinstance(e, expected):
            _RESULTS[key]["status"] = "expected_error"
            return
        raise AssertionError(f"seed={seed} {key}: {type(e).__name__}: {e}") from e
    _RESULTS[key] = {"status": "pass", "metrics": metrics,
                     "seconds": round(time.perf_counter() - t0, 1)}
    assert expected is None, f"{key} was expected to raise {expected.__name__}, and passed"


def flush(seed: int) -> None:
    """Merge the recorded cells into ``$HLOBRIDGE_ZOO_JSON`` (if set)."""
    out = os.environ.get("HLOBRIDGE_ZOO_JSON")
    if not out or not _RESULTS:
        return
    path = Path(out)
    old = json.loads(path.read_text()) if path.exists() else {}
    old.setdefault("cells", {}).update(_RESULTS)
    old["seed"] = seed
    old["versions"] = _versions()
    path.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
    _RESULTS.clear()


@pytest.fixture(scope="module", autouse=True)
def write_results() -> Iterator[None]:
    """Module fixture of every zoo test module: merge its cells into the
    results file when the module ends."""
    yield
    flush(SEED)


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    """Each zoo test starts and ends with Dynamo's caches empty."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    return {p: md.version(p) for p in ("torch", "torch-xla", "jax", "optax", "transformers",
                                       "torchvision", "timm")}
