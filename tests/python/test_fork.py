"""Fork safety: a process forked after hlobridge created its PJRT client.

The client's worker threads do not exist in a forked child, so running
anything on the inherited client hangs (measured before the fix: a
``DataLoader(num_workers=2)`` with ``fork`` workers calling ``hb.call_jax``
after the parent used hlobridge never returned), and XLA's compile watchdog
thread is gone too, so compiling in the child aborts the process (measured:
``Mutex::Fer with pending CondVar queueing``). Now:

- ``HLOBRIDGE_AFTER_FORK=error`` (default): the child's first hlobridge call
  raises ``hlobridge.ForkError`` naming the cause and the fix (spawn);
- ``HLOBRIDGE_AFTER_FORK=reinit``: the child leaks the inherited client and
  creates its own; programs the parent compiled load from the persistent
  compile cache and run; a new compilation raises ``ForkError``;
- a program compiled before the fork raises ``ForkError`` in the child;
- the parent keeps working; ``spawn`` workers just work.

Every scenario runs in a fresh subprocess under a timeout, so a regression
fails instead of hanging the suite. JAX warns at ``os.fork()`` that forking a
multithreaded process may deadlock (it may, for JAX's own backend); the
scripts filter exactly that warning (and the DataLoader's advice when two
workers exceed the cores); everything else runs with ``-W error``.
Results are compared with torch eager on random inputs (float32,
rtol=1e-5, atol=1e-5).

Run:  .venv/bin/python -m pytest -W error tests/python/test_fork.py -q
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TIMEOUT = 240

PRELUDE = """
import os, sys, warnings
warnings.filterwarnings("ignore", message=r"os\\.fork\\(\\) was called", category=RuntimeWarning)
# the DataLoader's advice when 2 workers exceed the cores (taskset -c 0 runs)
warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
import torch, jax.numpy as jnp
import hlobridge as hb

def f(x):
    return jnp.sin(x) * 2.0 + 1.0

def ref(x):
    return torch.sin(x) * 2.0 + 1.0

def check(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
"""


def run_script(tmp_path: Path, body: str, env_extra: dict[str, str] | None = None,
               name: str = "script.py", head: str = "", timeout: int = TIMEOUT) -> str:
    """Runs PRELUDE + head + body in a fresh interpreter (``-W error``) with a
    timeout; returns stdout and fails with stderr on a non-zero exit."""
    script = tmp_path / name
    script.write_text(PRELUDE + textwrap.dedent(head) + textwrap.dedent(body))
    # A fresh persistent compile cache: the parent really compiles (a disk hit
    # would not start XLA's compile watchdog, and the child could compile).
    env = dict(os.environ, PJRT_DEVICE="CPU", HLOBRIDGE_CACHE_DIR=str(tmp_path / "cache"),
               **(env_extra or {}))
    try:
        out = subprocess.run([sys.executable, "-W", "error", str(script)], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"timed out after {timeout}s (hang): stdout={e.stdout!r} stderr={e.stderr!r}")
    assert out.returncode == 0, f"exit {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    return out.stdout


DATALOADER = """
from torch.utils.data import DataLoader, Dataset

class Items(Dataset):
    # Item i: call_jax on a fresh random input; even items reuse the parent's
    # signature (64x64, compiled and on the native fast path in the parent),
    # odd items have a new shape (lowered and compiled in the worker).
    def __len__(self):
        return 6

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(1000 + i)
        x = torch.randn(64, 64 if i % 2 == 0 else 8 + i, generator=g)
        try:
            y = hb.call_jax(f, x)
            y2 = hb.call_jax(f, x)   # second call: the worker's own cached program
            return ("ok", os.getpid(), x, y, y2)
        except hb.BridgeError as e:
            return ("error", os.getpid(), type(e).__name__, str(e))

def run(method):
    x = torch.randn(64, 64)
    check(hb.call_jax(f, x), ref(x))            # parent creates its client first
    dl = DataLoader(Items(), num_workers=2, batch_size=None, multiprocessing_context=method)
    results = list(dl)
    pids = {r[1] for r in results}
    assert os.getpid() not in pids and len(pids) == 2, pids
    x2 = torch.randn(64, 64)
    check(hb.call_jax(f, x2), ref(x2))          # the parent keeps working
    x3 = torch.randn(5, 7)
    check(hb.call_jax(f, x3), ref(x3))          # ... also for a new signature
    return results
"""


def test_fork_dataloader_workers_default_raise_fork_error(tmp_path):
    out = run_script(tmp_path, head=DATALOADER, body="""
    results = run("fork")
    for r in results:
        assert r[0] == "error" and r[2] == "ForkError", r
        assert "'spawn'" in r[3] and "forked" in r[3], r[3]
    assert issubclass(hb.ForkError, hb.BridgeError)
    print("OK", len(results))
    """)
    assert "OK 6" in out


def test_fork_dataloader_worker_error_reaches_the_parent_as_fork_error(tmp_path):
    """The workers do not catch: each raises ForkError, torch pickles it
    (class and message) to the parent, which re-raises it as ForkError and
    the DataLoader ends at once. Before the errors were picklable the
    exception was lost and the DataLoader waited for its own timeout; here
    the whole script has 60 s (interpreter start and the parent's compile
    included)."""
    out = run_script(tmp_path, timeout=60, body="""
    from torch.utils.data import DataLoader, Dataset

    class Calls(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return hb.call_jax(f, torch.randn(64, 64))   # not caught: ForkError

    x = torch.randn(64, 64)
    check(hb.call_jax(f, x), ref(x))                     # the parent's client first
    dl = DataLoader(Calls(), num_workers=2, batch_size=None, multiprocessing_context="fork")
    try:
        list(dl)
    except hb.BridgeError as e:
        assert type(e) is hb.ForkError, type(e)
        assert "'spawn'" in str(e) and "forked" in str(e), str(e)
    else:
        raise AssertionError("the workers' ForkError did not reach the parent")
    x2 = torch.randn(64, 64)
    check(hb.call_jax(f, x2), ref(x2))                   # the parent keeps working
    print("OK raised")
    """)
    assert "OK raised" in out


def test_fork_dataloader_workers_reinit(tmp_path):
    """Even items use the parent's signature: loaded from the persistent cache
    onto the worker's fresh client and run. Odd items need a new compilation:
    ForkError (XLA would abort the worker), never a hang or an abort."""
    out = run_script(tmp_path, head=DATALOADER, body="""
    results = run("fork")
    for i, r in enumerate(results):
        if i % 2 == 0:
            assert r[0] == "ok", r
            _, _, x, y, y2 = r
            check(y, ref(x)); check(y2, ref(x))
        else:
            assert r[0] == "error" and r[2] == "ForkError", r
            assert "compile" in r[3] and "'spawn'" in r[3], r[3]
    print("OK", len(results))
    """, env_extra={"HLOBRIDGE_AFTER_FORK": "reinit"})
    assert "OK 6" in out


def test_spawn_dataloader_workers(tmp_path):
    # spawn workers import the dataset by module name: put it in a module.
    (tmp_path / "fork_items.py").write_text(PRELUDE + textwrap.dedent(DATALOADER))
    out = run_script(tmp_path, """
    from fork_items import run, check, ref
    if __name__ == "__main__":
        for r in run("spawn"):
            assert r[0] == "ok", r
            _, _, x, y, y2 = r
            check(y, ref(x)); check(y2, ref(x))
        print("OK spawn")
    """)
    assert "OK spawn" in out


def test_program_compiled_before_fork_raises_in_child(tmp_path):
    """os.fork() directly, HLOBRIDGE_AFTER_FORK=reinit: in the child a program
    object compiled by the parent raises ForkError (it never runs on the dead
    client), freeing the parent's outputs does not hang, call_jax on the
    parent's signature works on the fresh client (also in a grandchild), a new
    signature is a ForkError; under the default mode every use is a ForkError;
    a bad HLOBRIDGE_AFTER_FORK value is an ArgumentError; the parent goes on."""
    out = run_script(tmp_path, """
    from hlobridge import _native
    x = torch.randn(16, 16)
    y_parent = hb.call_jax(f, x)
    check(y_parent, ref(x))
    text = "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> { return %a : tensor<4xf32> }"
    exe, _ = _native.compile("module {" + text + "}")
    F32 = _native.ELEMENT_TYPES["f32"]

    def run_exe(a):
        caps = _native.execute(exe, [a.data_ptr()], [[4]], [F32], [a])[0]
        return torch.from_dlpack(caps[0])

    def child(grandchild):
        try:
            try:
                run_exe(torch.ones(4))
                return 10
            except hb.ForkError as e:
                if "compiled" not in str(e):
                    return 11
            globals().pop("y_parent", None)   # a parent output (a PJRT buffer of the old client)
            x1 = torch.randn(16, 16)
            check(hb.call_jax(f, x1), ref(x1))
            check(hb.call_jax(f, x1), ref(x1))
            try:
                hb.call_jax(f, torch.randn(3, 5))
                return 13
            except hb.ForkError as e:
                if "compile" not in str(e):
                    return 14
            if grandchild:
                return wait(fork_and(lambda: child(False)))
            return 0
        except BaseException as e:
            print("child failed:", repr(e), file=sys.stderr, flush=True)
            return 12

    def fork_and(fn):
        pid = os.fork()
        if pid == 0:
            os._exit(fn())
        return pid

    def wait(pid):
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)

    def expect(exc, word):
        def body():
            try:
                hb.call_jax(f, torch.randn(16, 16))
                return 20
            except exc as e:
                return 0 if word in str(e) else 21
        return body

    os.environ["HLOBRIDGE_AFTER_FORK"] = "reinit"
    assert wait(fork_and(lambda: child(True))) == 0
    os.environ["HLOBRIDGE_AFTER_FORK"] = "bogus"
    assert wait(fork_and(expect(hb.ArgumentError, "HLOBRIDGE_AFTER_FORK"))) == 0
    del os.environ["HLOBRIDGE_AFTER_FORK"]
    assert wait(fork_and(expect(hb.ForkError, "spawn"))) == 0

    x3 = torch.randn(16, 16)
    check(hb.call_jax(f, x3), ref(x3))
    x4 = torch.randn(2, 3)
    check(hb.call_jax(f, x4), ref(x4))
    a = torch.arange(4, dtype=torch.float32)
    assert torch.equal(run_exe(a), a)
    print("OK direct")
    """)
    assert "OK direct" in out


def test_fork_before_any_client_is_plain(tmp_path):
    """A child forked before the parent created a client inherits nothing and
    works normally, also under HLOBRIDGE_AFTER_FORK=error."""
    out = run_script(tmp_path, """
    pid = os.fork()
    if pid == 0:
        try:
            x = torch.randn(8, 8)
            check(hb.call_jax(f, x), ref(x))
            os._exit(0)
        except BaseException as e:
            print("child failed:", repr(e), file=sys.stderr, flush=True)
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    x = torch.randn(8, 8)
    check(hb.call_jax(f, x), ref(x))
    print("OK before")
    """, {"HLOBRIDGE_AFTER_FORK": "error"})
    assert "OK before" in out
