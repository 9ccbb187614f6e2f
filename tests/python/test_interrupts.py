"""Ctrl-C (SIGINT) during a long compile and during a long execution.

hlobridge releases the GIL around PJRT compile and execute. SIGINT then only
sets Python's flag (the C-level handler does nothing else), the native call
runs to completion, and ``KeyboardInterrupt`` is raised when it returns. These
tests check that this is what happens and that nothing is left poisoned: the
process never aborts or deadlocks, the next calls work (compared with torch
eager on fresh random inputs, float32 rtol=1e-4/atol=1e-5), the interrupted
compile's program is in the in-memory cache, and its persistent cache entry
is complete (a fresh process loads it from disk and gets the same result).

Each scenario runs in a subprocess driven over stdout, with a timeout: a
regression fails instead of hanging the suite.

Run:  .venv/bin/python -m pytest -W error tests/python/test_interrupts.py -q
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

TIMEOUT = 300

COMMON = r'''
import os, sys, time
import torch, jax, jax.numpy as jnp
import hlobridge as hb
from hlobridge import _native

def big_program(n):
    """A chain of n (dot, transpose, sine) steps on 64x64: XLA's compile time
    grows faster than linearly with n (seconds at n=1200 on 2 cores)."""
    t = "tensor<64x64xf32>"
    lines = ["func.func @main(%a: " + t + ") -> " + t + " {",
             "  %v0 = stablehlo.sine %a : " + t]
    for i in range(1, n + 1):
        p = f"%v{i-1}"
        lines.append(f"  %d{i} = stablehlo.dot_general {p}, {p}, contracting_dims = [1] x [0]"
                     f" : ({t}, {t}) -> {t}")
        lines.append(f"  %t{i} = stablehlo.transpose %d{i}, dims = [1, 0] : ({t}) -> {t}")
        lines.append(f"  %v{i} = stablehlo.sine %t{i} : {t}")
    lines.append(f"  return %v{n} : {t}\n}}")
    return "module {\n" + "\n".join(lines) + "\n}"

def run(exe, a):
    caps = _native.execute(exe, [a.data_ptr()], [list(a.shape)], [_native.ELEMENT_TYPES["f32"]], [a])[0]
    return torch.from_dlpack(caps[0])

def small_check():
    x = torch.randn(33, 17)
    torch.testing.assert_close(hb.call_jax(lambda v: jnp.tanh(v) * 3.0, x), torch.tanh(x) * 3.0,
                               rtol=1e-4, atol=1e-5)

def iterate(x, n):
    return jax.lax.fori_loop(0, n[0], lambda i, v: jnp.sin(v) * 1.0001 + 0.001, x)

def iterate_ref(x, n):
    for _ in range(n):
        x = torch.sin(x) * 1.0001 + 0.001
    return x

def say(*a):
    print(*a, flush=True)
'''

MAIN = r'''
N_BIG = int(sys.argv[1])
N_LOOP = int(sys.argv[2])

def interrupted(label, fn):
    """Runs fn; the driver sends SIGINT once it reads READY. The interrupt
    must surface as KeyboardInterrupt (during fn's native call it is raised
    when that call returns; the sleeps catch one landing after it: the driver
    sends it 1 s after reading READY, which a loaded 2-core machine can delay,
    and a call can finish within that second)."""
    t0 = time.perf_counter()
    say("READY", label)
    try:
        fn()
        for _ in range(1000):
            time.sleep(0.01)
        say("NOT-INTERRUPTED", label)
        sys.exit(3)
    except KeyboardInterrupt:
        say("INTERRUPTED", label, f"{time.perf_counter() - t0:.2f}s")

# 1. compile
text = big_program(N_BIG)
small_check()                                  # the runtime exists before the long compile
interrupted("compile", lambda: _native.compile(text))
small_check()
before = hb.stats()["cache_hits"]
exe, hit = _native.compile(text)               # the interrupted compile finished and was cached
assert hit and hb.stats()["cache_hits"] == before + 1
a = torch.randn(64, 64, generator=torch.Generator().manual_seed(7))
y = run(exe, a)
assert torch.isfinite(y).all()
torch.save(y, "big_out.pt")
info = _native.compile_cache_info()
assert info["entries"] >= 1, info

# 2. execute (warm: compiled and on the fast path; the long part is the run)
x = torch.randn(1 << 20)
n1 = torch.tensor([1], dtype=torch.int32)
torch.testing.assert_close(hb.call_jax(iterate, x, n1), iterate_ref(x, 1), rtol=1e-4, atol=1e-5)
n_long = torch.tensor([N_LOOP], dtype=torch.int32)
interrupted("execute", lambda: hb.call_jax(iterate, x, n_long))
n3 = torch.tensor([3], dtype=torch.int32)
x2 = torch.randn(1 << 20)
torch.testing.assert_close(hb.call_jax(iterate, x2, n3), iterate_ref(x2, 3), rtol=1e-4, atol=1e-5)
small_check()
t0 = time.perf_counter()
hb.call_jax(iterate, x, n_long)
say("LONG-RUN", f"{time.perf_counter() - t0:.2f}s")
say("DONE")
'''

RELOAD = r'''
exe, hit = _native.compile(big_program(int(sys.argv[1])))
assert not hit and exe.from_disk_cache, "the interrupted compile left no usable disk cache entry"
a = torch.randn(64, 64, generator=torch.Generator().manual_seed(7))
torch.testing.assert_close(run(exe, a), torch.load("big_out.pt"), rtol=0, atol=0)
say("RELOADED")
'''


def _script(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(COMMON) + textwrap.dedent(body))
    return p


def test_sigint_during_compile_and_execute_leaves_process_usable(tmp_path):
    env = dict(os.environ, PJRT_DEVICE="CPU", HLOBRIDGE_CACHE_DIR=str(tmp_path / "cache"))
    main = _script(tmp_path, "main.py", MAIN)
    proc = subprocess.Popen([sys.executable, "-W", "error", str(main), "1200", "1500"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    lines: list[str] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("READY"):
                time.sleep(1.0)               # well inside the native call
                proc.send_signal(signal.SIGINT)
            if line.startswith("DONE") or time.monotonic() > deadline:
                break
        _, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"hang: stdout={lines} stderr={err[-3000:]}")
    assert proc.returncode == 0, f"exit {proc.returncode}: stdout={lines}\nstderr={err[-3000:]}"
    assert any(s.startswith("INTERRUPTED compile") for s in lines), lines
    assert any(s.startswith("INTERRUPTED execute") for s in lines), lines
    assert lines[-1] == "DONE", lines
    print("\n".join(lines))  # the interrupt latency, for the record (-s)

    reload = _script(tmp_path, "reload.py", RELOAD)
    out = subprocess.run([sys.executable, "-W", "error", str(reload), "1200"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0 and "RELOADED" in out.stdout, out.stderr[-3000:]
