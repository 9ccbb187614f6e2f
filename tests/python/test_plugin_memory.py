"""The plugin memory cache (``HLOBRIDGE_PLUGIN_MEMORY_POOL``,
``pjrt-client/src/plugin_memory``): the CPU plugin's large allocations
(8 MiB and up) come from kept huge-page blocks instead of a fresh ``mmap``
per execution.

What is checked:

- the cache is installed for the CPU plugin, and off with
  ``HLOBRIDGE_PLUGIN_MEMORY_POOL=0`` (a subprocess);
- repeated executions with large results reuse blocks, and every result is
  right: blocks come back dirty, so a program that read memory it did not
  write would show it. Results are compared exactly with torch eager
  (``x * 2 + 1`` and a max are exact in float32), on fresh random inputs
  each call;
- results outlive their program's next executions (a kept block is only
  reused once freed);
- a forked child that frees blocks the parent's program made exits (the
  cache's lock is not inherited held), under a timeout;
- ``trim_memory()`` returns the kept blocks.

Run:  .venv/bin/python -m pytest -W error tests/python/test_plugin_memory.py -q
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import torch

import hlobridge as hb

TIMEOUT = 240
BIG = (2048, 1536)  # 12 MiB of float32: above the cache's 8 MiB floor


def _double_plus_one(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x * 2 + 1
    return y, y.amax(dim=1)


def test_installed_for_the_cpu_plugin() -> None:
    rt = hb.runtime()
    assert rt.platform == "cpu"
    assert rt.memory_pool["installed"] is True


def test_large_results_reuse_blocks_and_stay_right() -> None:
    f = torch.compile(_double_plus_one, backend="hlobridge", dynamic=False)
    kept = []
    before = hb.runtime().memory_pool
    for i in range(6):
        x = torch.randn(BIG)
        y, m = f(x)
        ref_y, ref_m = _double_plus_one(x)
        assert torch.equal(y, ref_y), f"call {i}"
        assert torch.equal(m, ref_m), f"call {i}"
        if i < 2:
            kept.append((y, ref_y))  # live results: their blocks are not reused
        del y, m  # freed before the next call, which can take its block
    after = hb.runtime().memory_pool
    assert after["reused"] >= before["reused"] + 3, (before, after)
    for y, ref_y in kept:
        assert torch.equal(y, ref_y), "a live result was overwritten"


def test_trim_returns_kept_blocks() -> None:
    f = torch.compile(_double_plus_one, backend="hlobridge", dynamic=False)
    for _ in range(2):
        f(torch.randn(BIG))
    rt = hb.runtime()
    assert rt.memory_pool["cached_bytes"] > 0
    released = rt.trim_memory()
    assert released > 0
    assert rt.memory_pool["cached_bytes"] == 0
    x = torch.randn(BIG)
    assert torch.equal(f(x)[0], x * 2 + 1)


def _run(body: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = textwrap.dedent("""
        import os, sys, warnings
        warnings.filterwarnings("ignore", message=r"os\\.fork\\(\\) was called",
                                category=RuntimeWarning)
        import torch
        import hlobridge as hb
    """) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-W", "error", "-c", script], capture_output=True,
                          text=True, timeout=TIMEOUT, env={**os.environ, **env})


def test_off_switch() -> None:
    r = _run("""
        f = torch.compile(lambda x: x * 2 + 1, backend="hlobridge", dynamic=False)
        x = torch.randn(2048, 1536)
        assert torch.equal(f(x), x * 2 + 1)
        pool = hb.runtime().memory_pool
        assert pool["installed"] is False and pool["mapped"] == 0, pool
        print("ok")
    """, HLOBRIDGE_PLUGIN_MEMORY_POOL="0")
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]


def test_forked_child_frees_the_parents_blocks() -> None:
    r = _run("""
        import gc
        f = torch.compile(lambda x: x * 2 + 1, backend="hlobridge", dynamic=False)
        x = torch.randn(2048, 1536)
        ys = [f(x) for _ in range(3)]
        assert all(torch.equal(y, x * 2 + 1) for y in ys)
        assert hb.runtime().memory_pool["live_bytes"] > 0
        pid = os.fork()
        if pid == 0:
            # Frees only: torch's own kernels may not run in a child forked
            # after its thread pool started (they hang without hlobridge).
            del ys
            gc.collect()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        del ys
        gc.collect()
        assert torch.equal(f(x), x * 2 + 1)
        print("ok")
    """)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]
