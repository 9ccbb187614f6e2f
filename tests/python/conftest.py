"""pytest configuration for the Python verification harness (tests/python).

Environment knobs:
  HLOBRIDGE_BIN            binary to test (default: .venv/bin/hlobridge, then target/release/hlobridge)
  HLOBRIDGE_REQUIRE_BIN=1  fail instead of skip when no binary is found (implied by CI=true)
  HLOBRIDGE_CORPUS_SAMPLE  check only every k-th corpus file so that about N files remain (quick runs)
  HLOBRIDGE_SKIP_LIVE=1    do not generate live jax/torch modules at collection time
  HLOBRIDGE_TEST_WORKERS   worker processes (default: min(2, cores in this process's affinity mask))

HLOBRIDGE_CACHE_DIR is always set to a fresh temporary directory (see below).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

# The persistent compile cache must never touch the user's real cache
# (~/.cache/hlobridge): every test process (and the subprocesses it starts,
# which inherit the environment) uses a fresh temporary directory, removed
# at exit. Set before anything imports hlobridge.
_CACHE_DIR = tempfile.mkdtemp(prefix="hlobridge-test-cache-")
os.environ["HLOBRIDGE_CACHE_DIR"] = _CACHE_DIR
atexit.register(shutil.rmtree, _CACHE_DIR, True)

import pytest  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[0] / "tools"))

import harness  # noqa: E402


def pytest_configure(config):
    # The project runs pytest with -W error.  The heavy third-party imports
    # (jax, torch_xla) happen in worker/generator subprocesses, not here; the
    # filters below cover what can still surface in this process.
    for line in (
        # multiprocessing's resource tracker on interpreter shutdown
        "ignore:resource_tracker:UserWarning",
    ):
        config.addinivalue_line("filterwarnings", line)
    harness.mlir_canon.prune_canon_cache()


@pytest.fixture(scope="session")
def hlobridge_binary() -> Path:
    b = harness.find_binary()
    if b is None or not b.exists():
        msg = ("hlobridge binary not found (set HLOBRIDGE_BIN, or build target/release/hlobridge "
               "/ install into .venv)")
        if os.environ.get("HLOBRIDGE_REQUIRE_BIN") == "1" or os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return b


@pytest.fixture(scope="session")
def checker(hlobridge_binary):
    c = harness.Checker(hlobridge_binary)
    yield c
    c.close()


@pytest.fixture
def fresh_dynamo(request):
    """A fresh ``torch._dynamo`` around a test (reset before and after), and
    torch seeded with the test module's ``SEED`` where it has one. Modules
    of ``torch.compile`` tests use it with
    ``pytestmark = pytest.mark.usefixtures("fresh_dynamo")``."""
    import torch

    torch._dynamo.reset()
    seed = getattr(request.module, "SEED", None)
    if seed is not None:
        torch.manual_seed(seed)
    yield
    torch._dynamo.reset()


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """After each test module, drop what keeps its compiled programs alive:
    Dynamo's compiled frames (``torch._dynamo.reset()``), JAX's jit caches,
    and hlobridge's per-function tables and memory cache
    (``hb.clear_cache()``). Every loaded program holds memory mappings of
    its code, and a Linux process has at most ``vm.max_map_count`` (65,530
    by default): the whole suite in one process compiles more programs than
    that allows if none is ever freed (``docs/compile_cache.md``)."""
    yield
    import gc

    if "torch" in sys.modules:
        sys.modules["torch"]._dynamo.reset()
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
    if "hlobridge" in sys.modules:
        sys.modules["hlobridge"].clear_cache()
    gc.collect()


def _cpu_line() -> str:
    """The CPU model and its widest vector extension, from /proc/cpuinfo
    (empty where there is none)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                  if ln.startswith("model name")), "unknown")
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines()
                  if ln.startswith("flags")), [])
    isa = "avx512f" if "avx512f" in flags else "avx2" if "avx2" in flags else "no avx2"
    return f"{model} ({isa}, {len(os.sched_getaffinity(0))} cores)"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    # The CPU varies between machines (Intel or AMD, with or without
    # AVX-512) and float results may with it: the run's last lines say
    # which CPU it was.
    line = _cpu_line()
    if line:
        terminalreporter.write_line(f"CPU: {line}")
