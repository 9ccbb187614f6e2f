"""Compiled programs are freed with what runs them.

Every loaded program holds memory mappings of its generated code, and a
Linux process has at most ``vm.max_map_count`` of them (65,530 by default).
The backend's graph registry (``hlobridge.dynamo.compiled_graphs``) and the
in-memory compile cache once kept every program alive forever, so a process
that compiled enough programs failed to compile, then crashed (the full test
suite did). Here: distinct ``torch.compile`` functions are compiled, then
Dynamo is reset; their graphs must leave the registry, and the mappings
they added must go (all but a margin for the few programs the memory cache
retains, ``HLOBRIDGE_MEMORY_CACHE_ENTRIES``, and allocator noise).

Run:  .venv/bin/python -m pytest -W error tests/python/test_program_lifetime.py -q
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest
import torch
import torch._dynamo.config

import hlobridge as hb
import hlobridge.dynamo as hbd

MAPS = Path("/proc/self/maps")
N = 48


def mappings() -> int:
    return len(MAPS.read_bytes().splitlines())


@pytest.mark.skipif(not MAPS.exists(), reason="needs /proc/self/maps (Linux)")
def test_reset_frees_the_graphs_and_their_mappings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch._dynamo.config, "cache_size_limit", 4 * N)
    monkeypatch.setitem(os.environ, "HLOBRIDGE_CACHE", "0")
    torch._dynamo.reset()
    hb.clear_cache()
    gc.collect()
    torch.compile(lambda x: x + 1, backend="hlobridge")(torch.ones(2))  # warm
    base = mappings()
    n0 = hbd.graphs_compiled()
    for i in range(N):
        def f(x: torch.Tensor, i: int = i) -> torch.Tensor:
            return torch.sin(x) * (i + 1) + x.sum()
        x = torch.randn(3 + i)
        got = torch.compile(f, backend="hlobridge", dynamic=False)(x)
        torch.testing.assert_close(got, f(x))
    graphs = hbd.compiled_graphs(since=n0)
    assert len(graphs) == N == hbd.graphs_compiled() - n0
    del graphs
    grown = mappings() - base
    assert grown >= N, f"{grown} mappings for {N} programs: the check below would mean nothing"

    torch._dynamo.reset()
    gc.collect()
    assert hbd.compiled_graphs(since=n0) == []
    left = mappings() - base
    # Programs the memory cache retains stay loaded: at most its 32 of N.
    assert left <= grown * 0.75, f"{left} of {grown} mappings left after the graphs were freed"
    hb.clear_cache()
    gc.collect()
    left = mappings() - base
    assert left <= grown * 0.25, f"{left} of {grown} mappings left after clear_cache()"
