"""Allocation failure: a program whose buffers cannot be allocated raises
``hlobridge.PjrtError`` naming the size, and the process lives on.

Each case runs in a subprocess that first warms up (imports, PJRT client,
one small call) and then caps its address space (``RLIMIT_AS``, like
``ulimit -v``) at its current size + 4 GiB, so that a 64 GiB output or a
16 GiB temporary cannot be mapped. Nothing big is ever touched, so the tests
are safe on a small machine. After each failure the next small call must
work (compared with torch eager on random inputs) and the same failing call
must fail again the same way (nothing cached in a broken state).

Measured on the CPU plugin (xla-cpu-pjrt 0.0.1): an output allocation fails
in ``PJRT_LoadedExecutable_Execute`` with ``ResourceExhausted: Out of memory
allocating N bytes``; a temporary (the sort's working buffer) fails when the
output's definition event resolves, ``Internal: ... Out of memory allocating
N bytes``. Both are ``PjrtError`` with ``function`` and ``code`` set.

Run:  .venv/bin/python -m pytest -W error tests/python/test_alloc_failure.py -q
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

TIMEOUT = 240

SCRIPT = r'''
import resource, sys
import torch, jax.numpy as jnp
import hlobridge as hb

def check_small():
    x = torch.randn(5, 7)
    torch.testing.assert_close(hb.call_jax(lambda v: v * 3.0 + 1.0, x), x * 3.0 + 1.0,
                               rtol=1e-6, atol=1e-6)

check_small()
vsz = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vsz + (4 << 30), resource.RLIM_INFINITY))

N = 1 << 17                     # N*N f32 = 64 GiB
CASES = {
    # an output that cannot be allocated
    "broadcast_output": (lambda v: jnp.broadcast_to(v[:1, :1], (N, N)), N * N * 4),
    # a huge zeros output next to a small one
    "zeros_and_small": (lambda v: (v * 2.0, jnp.zeros((N, N), jnp.float32) + v[0, 0]), N * N * 4),
    # a small output whose temporary (the sort buffer, 2^32 f32 = 16 GiB) cannot be allocated
    "temporary": (lambda v: jnp.sort(jnp.broadcast_to(v[0, 0], (1 << 32,))
                                     * jnp.arange(1 << 32, dtype=jnp.float32))[:: 1 << 24],
                  (1 << 32) * 4),
}
name = sys.argv[1]
fn, nbytes = CASES[name]
x = torch.randn(3, 3)
for attempt in range(2):
    try:
        hb.call_jax(fn, x)
        raise SystemExit(f"{name}: no error")
    except hb.PjrtError as e:
        msg = str(e)
        assert str(nbytes) in msg and "memory" in msg.lower(), msg
        assert e.function and e.code, (e.function, e.code)
        print("RAISED", name, attempt, e.function, e.code, msg, flush=True)
    check_small()
print("OK", name)
'''


@pytest.mark.parametrize("case", ["broadcast_output", "zeros_and_small", "temporary"])
def test_allocation_failure_is_pjrt_error_naming_the_size(tmp_path, case):
    script = tmp_path / "alloc.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ, PJRT_DEVICE="CPU")
    try:
        out = subprocess.run([sys.executable, "-W", "error", str(script), case], env=env,
                             capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hang: {e.stdout!r} {e.stderr!r}")
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout}\n{out.stderr[-3000:]}"
    assert f"OK {case}" in out.stdout
