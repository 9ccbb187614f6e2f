"""The persistent compile cache keys the environment the plugin reads into
code generation (``XLA_FLAGS`` and the others listed in
docs/compile_cache.md): a program compiled under fast-math flags is never
served to a process without them.

``isnan(x) + 10 * isinf(x)`` of ``[1, nan, inf, 2]`` is ``[0, 1, 10, 0]``;
with ``--xla_cpu_enable_fast_math=true`` and NaN/Inf not honoured, XLA folds
both tests to false (``[0, 0, 0, 0]``). Each compile runs in a fresh
interpreter (the plugin parses ``XLA_FLAGS`` once per process), all sharing
one ``HLOBRIDGE_CACHE_DIR``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import json
import torch
from torch.utils.dlpack import from_dlpack
from hlobridge import _native
MODULE = '''module @m {
  func.func public @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    %nan = stablehlo.compare NE, %x, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %a = stablehlo.abs %x : tensor<4xf32>
    %inf = stablehlo.constant dense<0x7F800000> : tensor<4xf32>
    %isinf = stablehlo.compare EQ, %a, %inf : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
    %n = stablehlo.convert %nan : (tensor<4xi1>) -> tensor<4xf32>
    %i = stablehlo.convert %isinf : (tensor<4xi1>) -> tensor<4xf32>
    %ten = stablehlo.constant dense<10.0> : tensor<4xf32>
    %i10 = stablehlo.multiply %i, %ten : tensor<4xf32>
    %r = stablehlo.add %n, %i10 : tensor<4xf32>
    return %r : tensor<4xf32>
  }
}
'''
exe, _ = _native.compile(MODULE)
x = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
caps, *_ = _native.execute(exe, [x.data_ptr()], [(4,)], [_native.ELEMENT_TYPES["f32"]], [x])
st = _native.stats()
print(json.dumps({"result": from_dlpack(caps[0]).tolist(), "compiles": st["compiles"],
                  "disk_hits": st["disk_cache_hits"]}))
"""

FAST_MATH = ("--xla_cpu_enable_fast_math=true --xla_cpu_fast_math_honor_nans=false "
             "--xla_cpu_fast_math_honor_infs=false")
CORRECT = [0.0, 1.0, 10.0, 0.0]


def run(cache_dir: Path, xla_flags: str | None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("HLOBRIDGE_CACHE", "XLA_FLAGS")}
    env.update(HLOBRIDGE_CACHE_DIR=str(cache_dir), PJRT_DEVICE="CPU")
    if xla_flags is not None:
        env["XLA_FLAGS"] = xla_flags
    p = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_fast_math_entry_is_not_served_without_the_flags(tmp_path: Path) -> None:
    fast = run(tmp_path, FAST_MATH)
    # The flags do change the generated code (else this test proves nothing).
    assert fast["result"] == [0.0, 0.0, 0.0, 0.0], fast
    assert fast["compiles"] == 1
    plain = run(tmp_path, None)
    assert plain["result"] == CORRECT, plain
    assert plain["compiles"] == 1 and plain["disk_hits"] == 0, plain
    # Each environment has its own entry, and each is served to its own.
    assert run(tmp_path, None) == {"result": CORRECT, "compiles": 0, "disk_hits": 1}
    again = run(tmp_path, FAST_MATH)
    assert again["disk_hits"] == 1 and again["result"] == [0.0, 0.0, 0.0, 0.0], again
    assert len(list(tmp_path.glob("*.pjrt"))) == 2


def test_plain_entry_is_not_served_to_a_fast_math_process(tmp_path: Path) -> None:
    plain = run(tmp_path, None)
    assert plain["result"] == CORRECT
    fast = run(tmp_path, FAST_MATH)
    assert fast["compiles"] == 1 and fast["disk_hits"] == 0, fast
