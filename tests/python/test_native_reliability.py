"""Reliability of the native extension under threads and torch tracing.

- No process-wide deadlock: the compile-cache hit branch used to hold the
  cache mutex while it logged, and logging takes the GIL (Python may then
  hand the GIL to a thread waiting for that mutex). Two threads calling
  ``call_jax`` with fresh lambdas hung within seconds; the repro runs in a
  subprocess that must finish within a timeout.
- The native fast path declines whenever a torch mode is active (make_fx's
  proxy mode, FakeTensorMode, a user TorchDispatchMode or TorchFunctionMode,
  a functorch transform), so a traced graph records the ``call_jax`` op
  instead of a constant eager result.
- Zero-copy inputs hold the tensor's storage, not just the tensor: another
  thread swapping the storage (``set_``, ``.data = ...``) while the GIL is
  released cannot free memory PJRT reads. Runs in a subprocess so a crash
  is a test failure.

Numerics are compared with torch eager on fresh random inputs (float32,
rtol=1e-5, atol=1e-5).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import hlobridge as hb
from hlobridge._src import entry_cache

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))


def run_child(code: str, timeout: float, **env: str) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if k != "HLOBRIDGE_LOG"}
    e.update(PJRT_DEVICE="CPU", HLOBRIDGE_TEST_SEED=str(SEED), **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True, timeout=timeout)


_DEADLOCK = """
    import sys, threading, torch, hlobridge as hb
    sys.setswitchinterval(1e-5)   # hand the GIL over often
    x = torch.ones(8)
    errors = []
    def work():
        try:
            for _ in range(150):
                # A fresh lambda each call: a Python-side miss, then a hit in
                # the native compile cache (same module text).
                hb.call_jax(lambda a: a * 2.0, x)
        except BaseException as e:
            errors.append(repr(e))
    ts = [threading.Thread(target=work) for _ in range(2)]
    for t in ts: t.start()
    for t in ts: t.join()
    assert not errors, errors
    print("done", hb.stats()["cache_hits"])
"""


def test_two_threads_with_fresh_lambdas_do_not_deadlock() -> None:
    # The default log filter (HLOBRIDGE_LOG unset): every cache hit logs.
    try:
        p = run_child(_DEADLOCK, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("two threads calling call_jax deadlocked (no progress in 90 s)")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("done"), p.stdout


def _registered(f, *args):
    """Call once eagerly so the native fast path has the signature, and
    check that it serves the next call outside any mode."""
    hb.call_jax(f, *args)
    assert entry_cache.fast_call(f, args) is not entry_cache.MISS
    return f


@pytest.fixture
def gen() -> torch.Generator:
    hb.clear_cache()
    return torch.Generator().manual_seed(SEED)


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"seed={SEED}: {m}")


def test_make_fx_real_records_the_op_not_the_eager_result(gen) -> None:
    f = _registered(lambda a: a * 2.0 + 1.0, torch.randn(4, generator=gen))

    def g(t):
        return hb.call_jax(f, t) + 1

    gm = make_fx(g, tracing_mode="real")(torch.randn(4, generator=gen))
    assert "hlobridge.call_jax" in gm.code, gm.code
    x = torch.full((4,), 10.0)
    close(gm(x), torch.full((4,), 22.0))
    y = torch.randn(4, generator=gen)
    close(gm(y), y * 2 + 2)


@pytest.mark.parametrize("mode", ["fake"])
def test_make_fx_fake_modes_record_the_op(gen, mode) -> None:
    f = _registered(lambda a: jnp.tanh(a) * 3.0, torch.randn(5, generator=gen))
    gm = make_fx(lambda t: hb.call_jax(f, t) - 1, tracing_mode=mode)(torch.randn(5, generator=gen))
    assert "hlobridge.call_jax" in gm.code, gm.code
    y = torch.randn(5, generator=gen)
    close(gm(y), torch.tanh(y) * 3 - 1)


class _Recording(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class _FunctionMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_fast_path_declines_under_modes(gen) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = torch.randn(6, generator=gen)
    f = _registered(lambda a: a - 3.0, x)
    with FakeTensorMode(allow_non_fake_inputs=True):
        assert entry_cache.fast_call(f, (x,)) is entry_cache.MISS
    with _Recording():
        assert entry_cache.fast_call(f, (x,)) is entry_cache.MISS
    with _FunctionMode():
        assert entry_cache.fast_call(f, (x,)) is entry_cache.MISS

    seen = []

    def inside_vmap(row):
        seen.append(entry_cache.fast_call(f, (x,)) is entry_cache.MISS)
        return row

    torch.vmap(inside_vmap)(torch.zeros(2, 3))
    assert seen == [True]
    # Outside every mode it serves the call again, with the right values.
    out = entry_cache.fast_call(f, (x,))
    assert out is not entry_cache.MISS
    close(out, x - 3)


def test_call_under_a_dispatch_mode_is_computed(gen) -> None:
    x = torch.randn(6, generator=gen)
    f = _registered(lambda a: jnp.exp(a), x)
    with _Recording():
        y = hb.call_jax(f, x)
    close(y, torch.exp(x))


def test_non_strided_tensors_decline_instead_of_failing(gen) -> None:
    x = torch.randn(4, generator=gen)
    f = _registered(lambda a: a + 1.0, x)
    assert entry_cache.fast_call(f, (x.to_sparse(),)) is entry_cache.MISS
    if torch.backends.mkldnn.is_available():
        # Same dtype, shape and "contiguous", but no storage.
        assert entry_cache.fast_call(f, (x.to_mkldnn(),)) is entry_cache.MISS


_STORAGE_SWAP = """
    import os, gc, threading, time, torch, jax.numpy as jnp, hlobridge as hb
    torch.manual_seed(int(os.environ["HLOBRIDGE_TEST_SEED"]))
    N = 1 << 22   # 16 MiB per input: its own mmap, unmapped when freed
    KW = os.environ["SWAP_PATH"] == "general"   # keyword args: the general path
    def f(a, b):
        for _ in range(4):
            a = jnp.sin(a) * b + jnp.cos(b) * a
        return a
    def eager(a, b):
        for _ in range(4):
            a = torch.sin(a) * b + torch.cos(b) * a
        return a
    a, b = torch.randn(N), torch.randn(N)
    call = (lambda a, b: hb.call_jax(f, a, b=b)) if KW else (lambda a, b: hb.call_jax(f, a, b))
    call(a, b)   # compiled before the race
    t0 = time.perf_counter(); call(a, b); run_s = time.perf_counter() - t0
    box = {"t": None, "k": 0}
    go, done = threading.Event(), threading.Event()
    def swapper():
        while True:
            go.wait(); go.clear()
            t = box["t"]
            if t is None:
                return
            # Into the call (the GIL is released while PJRT reads the
            # inputs), then give the tensor another storage and collect.
            time.sleep(run_s / 8)
            if box["k"] % 2:
                t.set_(torch.empty(0))
            else:
                t.data = torch.empty(3)
            box["k"] += 1
            gc.collect()
            # Reuse whatever was freed: a dangling read sees NaNs, if the
            # unmapped memory does not crash it first.
            junk = [torch.full((N,), float("nan")) for _ in range(3)]
            del junk
            done.set()
    th = threading.Thread(target=swapper)
    th.start()
    try:
        for i in range(10):
            a, b = torch.randn(N), torch.randn(N)
            want = eager(a, b)
            box["t"] = a if i % 2 else b
            go.set()
            try:
                got = call(a, b)
            except hb.ArgumentError as e:
                # The swap came before the general path took the storage
                # (a starved thread): refused with a clear error, not read.
                assert "storage" in str(e), e
                got = None
            done.wait(); done.clear()
            if got is not None:
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
                box["checked"] = box.get("checked", 0) + 1
    finally:
        box["t"] = None
        go.set()
        th.join()
    assert box.get("checked", 0) >= 5, box
    print("ok", box["k"], run_s)
"""


@pytest.mark.parametrize("path", ["fast", "general"])
def test_storage_swap_during_a_call_keeps_inputs_alive(path: str) -> None:
    # Every allocation of 1 MiB or more is its own mapping, unmapped on free
    # (glibc otherwise raises the threshold and keeps freed memory mapped).
    p = run_child(_STORAGE_SWAP, timeout=300, MALLOC_MMAP_THRESHOLD_="1048576",
                  SWAP_PATH=path)
    assert p.returncode == 0, f"seed={SEED} rc={p.returncode}\n{p.stderr[-4000:]}"
    assert p.stdout.startswith("ok 10 "), p.stdout
