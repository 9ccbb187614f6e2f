"""``HLOBRIDGE_CPU_XNN``: per-program XNNPACK graph fusion on the CPU plugin
(``python/src/cpu_tuning.rs``). With ``auto``, a program whose largest dot
does at least 2^20 multiply-accumulates is compiled with XNNPACK fusion (and,
since the plugin cannot serialize those, is not written to the persistent
cache), a small one is not; results stay correct either way (float32 against
numpy in float64, rtol 1e-4 / atol 1e-4 on sums of up to 512 products).
The default (unset) touches nothing.

Each case runs a fresh interpreter: the policy is read once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_CHILD = r"""
import json, sys
import numpy as np, torch
from torch.utils.dlpack import from_dlpack
from hlobridge import _native
rng = np.random.default_rng(int(sys.argv[1]))
out = {}
for name, (m, k, n) in {"big": (256, 512, 512), "small": (16, 32, 32)}.items():
    text = f'''module @m {{
  func.func public @main(%a: tensor<{m}x{k}xf32>, %b: tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32> {{
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) -> tensor<{m}x{n}xf32>
    %1 = stablehlo.tanh %0 : tensor<{m}x{n}xf32>
    return %1 : tensor<{m}x{n}xf32>
  }}
}}
'''
    a = torch.from_numpy(rng.standard_normal((m, k), dtype=np.float32) / 8)
    b = torch.from_numpy(rng.standard_normal((k, n), dtype=np.float32) / 8)
    writes = _native.compile_cache_info()["disk_writes"]
    exe, _ = _native.compile(text)
    wrote = _native.compile_cache_info()["disk_writes"] - writes
    caps = _native.execute(exe, [a.data_ptr(), b.data_ptr()], [[m, k], [k, n]], [11, 11], [a, b])[0]
    got = from_dlpack(caps[0]).numpy().astype(np.float64)
    want = np.tanh(a.numpy().astype(np.float64) @ b.numpy().astype(np.float64))
    out[name] = {"wrote": wrote, "ok": bool(np.allclose(got, want, rtol=1e-4, atol=1e-4)),
                 "err": float(np.abs(got - want).max())}
print(json.dumps(out))
"""


def _run(tmp_path: Path, mode: str | None) -> dict[str, dict[str, float]]:
    env = dict(os.environ, HLOBRIDGE_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("HLOBRIDGE_CPU_XNN", None)
    if mode is not None:
        env["HLOBRIDGE_CPU_XNN"] = mode
    seed = str(int.from_bytes(os.urandom(4), "little"))
    r = subprocess.run([sys.executable, "-c", _CHILD, seed], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_default_leaves_every_program_alone(tmp_path: Path) -> None:
    out = _run(tmp_path, None)
    assert out["big"]["ok"] and out["small"]["ok"], out
    assert out["big"]["wrote"] == 1 and out["small"]["wrote"] == 1, out


def test_auto_fuses_only_the_matmul_heavy_program(tmp_path: Path) -> None:
    out = _run(tmp_path, "auto")
    assert out["big"]["ok"] and out["small"]["ok"], out
    # XNNPACK-fused executables are not serializable: not written to disk.
    assert out["big"]["wrote"] == 0, out
    assert out["small"]["wrote"] == 1, out


@pytest.mark.parametrize("mode", ["always", "never"])
def test_always_and_never(tmp_path: Path, mode: str) -> None:
    out = _run(tmp_path, mode)
    assert out["big"]["ok"] and out["small"]["ok"], out
    expected = 0 if mode == "always" else 1
    assert out["big"]["wrote"] == expected and out["small"]["wrote"] == expected, out
