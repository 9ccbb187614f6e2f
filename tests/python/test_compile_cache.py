"""The persistent compile cache (``HLOBRIDGE_CACHE_DIR``): a second process
loads the executable the first one compiled instead of compiling; corrupt
entries are recovered from; ``HLOBRIDGE_CACHE=0`` writes nothing; the size
limit evicts the least recently used entries.

Each case runs fresh interpreters (the cache is per process in memory), all
sharing a ``tmp_path`` cache directory.
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

# Compiles (or loads) MODULES[i] for each i in argv[1:], runs each on
# [0.5, 1.5, 2.5, 3.5] and prints counters, cache info and results.
_CHILD = r"""
import json, sys
import torch
from torch.utils.dlpack import from_dlpack
from hlobridge import _native
MODULE = '''module @m {
  func.func public @main(%%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %%c = stablehlo.constant dense<%s> : tensor<4xf32>
    %%0 = stablehlo.exponential %%arg0 : tensor<4xf32>
    %%1 = stablehlo.multiply %%0, %%c : tensor<4xf32>
    return %%1 : tensor<4xf32>
  }
}
'''
results = []
for i in sys.argv[1:]:
    exe, hit = _native.compile(MODULE % (float(i) + 1.5))
    x = torch.arange(4, dtype=torch.float32) + 0.5
    caps, *_ = _native.execute(exe, [x.data_ptr()], [(4,)], [_native.ELEMENT_TYPES["f32"]], [x])
    results.append(from_dlpack(caps[0]).tolist())
st = _native.stats()
print(json.dumps({"stats": dict(st), "info": dict(_native.compile_cache_info()), "results": results}))
"""


def run(cache_dir: Path, *modules: int, **env: str) -> tuple[dict, str]:
    e = {k: v for k, v in os.environ.items()
         if k not in ("HLOBRIDGE_CACHE", "HLOBRIDGE_CACHE_MAX_BYTES")}
    e.update(HLOBRIDGE_CACHE_DIR=str(cache_dir), PJRT_DEVICE="CPU", **env)
    p = subprocess.run([sys.executable, "-c", _CHILD, *map(str, modules)], env=e,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def entries(d: Path) -> list[Path]:
    return sorted(d.glob("*.pjrt"))


def test_second_process_loads_from_disk(tmp_path: Path) -> None:
    first, _ = run(tmp_path, 0)
    assert first["stats"]["compiles"] == 1 and first["stats"]["disk_cache_hits"] == 0
    assert first["info"]["disk_writes"] == 1 and first["info"]["entries"] == 1
    assert first["info"]["dir"] == str(tmp_path) and first["info"]["enabled"] is True
    assert len(entries(tmp_path)) == 1
    second, _ = run(tmp_path, 0)
    assert second["stats"]["compiles"] == 0 and second["stats"]["disk_cache_hits"] == 1
    assert second["info"]["disk_hits"] == 1 and second["info"]["disk_writes"] == 0
    assert second["results"] == first["results"]
    assert first["results"][0] == [pytest.approx(1.5 * math.exp(k + 0.5)) for k in range(4)]
    # A different program is a miss, not the cached one.
    third, _ = run(tmp_path, 1)
    assert third["stats"]["compiles"] == 1 and third["stats"]["disk_cache_hits"] == 0
    assert third["results"][0] == [pytest.approx(v / 1.5 * 2.5) for v in first["results"][0]]


def _payload_offset(data: bytes) -> int:
    """Offset of the serialized executable in a cache entry (after the
    magic, four length-prefixed key parts and the payload length)."""
    assert data[:8] == b"HLBXC002"
    off = 8
    for _ in range(4):
        (n,) = struct.unpack_from("<Q", data, off)
        off += 8 + n
    return off + 8


@pytest.mark.parametrize("damage", ["garbage_payload", "truncated", "bad_magic"])
def test_corrupt_entry_is_recompiled(tmp_path: Path, damage: str) -> None:
    good, _ = run(tmp_path, 0)
    (path,) = entries(tmp_path)
    data = path.read_bytes()
    if damage == "garbage_payload":
        off = _payload_offset(data)
        n = len(data) - off
        path.write_bytes(data[:off] + (bytes(range(256)) * (n // 256 + 1))[:n])
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_bytes(b"NOTCACHE" + data[8:])
    again, stderr = run(tmp_path, 0)
    assert again["stats"]["compiles"] == 1 and again["stats"]["disk_cache_hits"] == 0
    assert again["results"] == good["results"]
    assert "compile cache" in stderr and ("deleting it" in stderr), stderr
    # The bad entry was replaced by a good one: the next process hits.
    third, _ = run(tmp_path, 0)
    assert third["stats"]["compiles"] == 0 and third["stats"]["disk_cache_hits"] == 1


def test_disabled_writes_nothing(tmp_path: Path) -> None:
    d = tmp_path / "cache"
    out, _ = run(d, 0, HLOBRIDGE_CACHE="0")
    assert out["stats"]["compiles"] == 1 and out["info"]["enabled"] is False
    assert out["info"]["disk_writes"] == 0
    assert not d.exists() or not any(d.iterdir())
    # Disabled also means no reads: a warm dir is ignored.
    run(d, 0)
    assert len(entries(d)) == 1
    off, _ = run(d, 0, HLOBRIDGE_CACHE="0")
    assert off["stats"]["compiles"] == 1 and off["stats"]["disk_cache_hits"] == 0


def test_eviction_keeps_the_dir_under_the_limit(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    run(probe, 0)
    one = entries(probe)[0].stat().st_size
    limit = int(one * 2.5)  # room for two entries, not three
    d = tmp_path / "cache"
    out, _ = run(d, 0, 1, 2, HLOBRIDGE_CACHE_MAX_BYTES=str(limit))
    assert out["stats"]["compiles"] == 3 and out["info"]["disk_writes"] == 3
    assert out["info"]["max_bytes"] == limit
    sizes = [p.stat().st_size for p in entries(d)]
    assert len(sizes) == 2 and sum(sizes) <= limit, sizes
    # Least recently used (module 0) went; 1 and 2 are still served.
    kept, _ = run(d, 1, 2, HLOBRIDGE_CACHE_MAX_BYTES=str(limit))
    assert kept["stats"]["disk_cache_hits"] == 2 and kept["stats"]["compiles"] == 0
    gone, _ = run(d, 0, HLOBRIDGE_CACHE_MAX_BYTES=str(limit))
    assert gone["stats"]["compiles"] == 1 and gone["stats"]["disk_cache_hits"] == 0
    assert sum(p.stat().st_size for p in entries(d)) <= limit
