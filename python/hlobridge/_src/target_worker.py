"""Deviceless TPU and CUDA compiles in a worker process.

``hb.compile_for("tpu:…" | "cuda:…", …)`` does not load libtpu or the CUDA
plugin into the caller's process. It hands the finished module to one
long-lived worker (``python -m hlobridge._src.target_worker``) per process,
for two reasons:

- **No environment writes in a threaded process.** libtpu reads
  ``TPU_SKIP_MDS_QUERY`` and ``ALLOW_MULTIPLE_LIBTPU_LOAD`` with ``getenv``
  when it loads (``pjrt_client::accel::TPU_LOAD_ENV``; no PJRT option
  replaces them). A Python session with torch and JAX imported has many
  threads, and ``setenv`` there races with their ``getenv``, so the Rust
  side refuses to write them in a multithreaded process
  (``TpuEnvironment``). The worker is started with them already in its
  environment (``subprocess`` passes ``env=`` to ``execve``): nothing is
  ever written, in either process.
- **The plugins' stderr becomes logging.** libtpu writes glog lines
  (``E0000 … unexpected worker hostname``, ``WARNING: could not determine
  TPU accelerator type``) straight to file descriptor 2 when it loads. The
  worker's stderr is a pipe; each line is logged at ``DEBUG`` on the
  ``hlobridge.plugin_stderr`` logger, the way the CLI turns them into
  ``plugin_stderr`` debug events.

Requests and replies are length-prefixed pickles over the worker's stdin and
stdout. A compiler error comes back as the same ``hlobridge.errors``
exception (they pickle). A worker that dies is replaced on the next call,
and the call that saw it die gets a :class:`~hlobridge.CompileError` with
the tail of its stderr. A forked child starts its own worker. The worker
exits when its stdin closes (this process exits or :func:`shutdown`).
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
from typing import IO, Any

_LOG = logging.getLogger("hlobridge.plugin_stderr")
_HEADER = struct.Struct("<Q")


def _write(stream: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read(stream: IO[bytes]) -> Any:
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError
    (n,) = _HEADER.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)


def worker_env() -> dict[str, str]:
    """The worker's environment: this process's, plus each of libtpu's
    load-time variables that is unset here (names and values from
    ``pjrt_client::accel::TPU_LOAD_ENV``)."""
    from hlobridge import _native

    env = dict(os.environ)
    for name, value in _native.tpu_load_env():
        env.setdefault(name, value)
    return env


class _Worker:
    """One worker process, its stderr-to-logging thread, and a lock that
    keeps one request in flight at a time."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hlobridge._src.target_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=worker_env(), close_fds=True)
        self.tail: collections.deque[str] = collections.deque(maxlen=40)
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._log_stderr, name="hlobridge-plugin-stderr",
                                       daemon=True)
        self.reader.start()

    def _log_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self.tail.append(line)
                _LOG.debug("%s", line)

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.proc.poll() is None

    def call(self, request: tuple[Any, ...]) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self.lock:
            try:
                _write(self.proc.stdin, request)
                status, value = _read(self.proc.stdout)
            except (EOFError, BrokenPipeError, OSError) as e:
                self.proc.wait()
                self.reader.join(timeout=5)
                from hlobridge._src.errors import CompileError

                tail = "\n".join(self.tail) or "(no output)"
                raise CompileError(
                    f"the deviceless compile worker exited with status {self.proc.returncode} "
                    f"while compiling for {request[0]}; its last stderr lines:\n{tail}") from e
        if status == "err":
            raise value
        return value

    def close(self) -> None:
        if self.pid != os.getpid():
            return  # a forked child: the parent's worker is not ours to stop
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


_worker: _Worker | None = None
_worker_lock = threading.Lock()


def _get() -> _Worker:
    global _worker
    with _worker_lock:
        if _worker is None or not _worker.alive():
            if _worker is not None and _worker.pid == os.getpid():
                _worker.close()
            _worker = _Worker()
        return _worker


def shutdown() -> None:
    """Stops this process's worker, if it has one (also done at exit)."""
    global _worker
    with _worker_lock:
        if _worker is not None:
            _worker.close()
            _worker = None


atexit.register(shutdown)


def compile_for_target(target: str, text: str, partitions: int, replicas: int,
                       shardy: bool) -> dict[str, Any]:
    """``_native.compile_for_target`` run in the worker (same arguments, same
    result dict, same errors)."""
    w = _get()
    try:
        result: dict[str, Any] = w.call((target, text, partitions, replicas, shardy))
    except BaseException:
        if not w.alive():
            shutdown()
        raise
    return result


def worker_pid() -> int | None:
    """The current worker's process id (None before the first compile)."""
    w = _worker
    return w.proc.pid if w is not None and w.alive() else None


def _serve() -> None:
    """The worker's loop: one request in, one ``("ok", dict)`` or
    ``("err", exception)`` out, until stdin closes."""
    from hlobridge import _native

    # Replies go to a private copy of fd 1; fd 1 itself (and sys.stdout)
    # then point at stderr, so whatever the plugins print, from C or
    # Python, reaches the parent's log and never the reply stream. The
    # worker has one thread here, so the dup2 races with nothing.
    stdout = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    stdin = sys.stdin.buffer
    while True:
        try:
            target, text, partitions, replicas, shardy = _read(stdin)
        except EOFError:
            return
        try:
            reply: tuple[str, Any] = (
                "ok", _native.compile_for_target(target, text, partitions, replicas, shardy))
        except Exception as e:  # noqa: BLE001 -- every error goes back to the caller
            try:
                pickle.dumps(e)
                reply = ("err", e)
            except Exception:  # noqa: BLE001
                from hlobridge._src.errors import CompileError

                reply = ("err", CompileError(f"{type(e).__name__}: {e}"))
        _write(stdout, reply)


if __name__ == "__main__":
    _serve()
