"""Shared by the 2-process ``torch.distributed`` tests: the launcher (pytest
side) and the helpers every worker uses (worker side).

Launcher: :func:`run_workers` starts ``WORLD`` copies of a worker script
(``WORKER RANK WORLD PORT OUT_JSON SEED``) with gloo on 127.0.0.1, each in
its own session, waits for all of them against ONE deadline, then kills
whatever is left (process groups) and returns each rank's ``{case:
result}``. The port comes from the kernel (bind to port 0); a worker whose
rendezvous port was taken in the meantime fails its ``init_process_group``
within the 60 s store timeout, and the launcher retries once on a new port.

Worker side: :func:`run_cases` initializes the process group (60 s
timeout on every collective), runs each case on every rank with a barrier
between cases (a case that fails, fails on both ranks alike: all of them
fail before or after their collectives), and writes the results.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WORLD = 2


# -- launcher (pytest side) ------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kill_group(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait()


_RENDEZVOUS_FAILED = 3
"""A worker's exit status when ``init_process_group`` failed (port taken)."""


def run_workers(worker: Path, out: Path, seed: int, timeout_s: float,
                extra_env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Both ranks' reports; asserts that they finished in time and cleanly."""
    for attempt in range(2):
        procs, logs, timed_out = _launch(worker, out, seed, timeout_s, extra_env)

        def tail(r: int) -> str:
            return (out / f"rank{r}.log").read_text(errors="replace")[-4000:]

        if attempt == 0 and not timed_out and \
                any(p.returncode == _RENDEZVOUS_FAILED for p in procs):
            continue  # the port was taken between free_port() and the bind
        for r, p in enumerate(procs):
            assert not timed_out, f"seed={seed}: workers ran past {timeout_s} s; rank {r}:\n" \
                                  f"{tail(r)}"
            assert p.returncode == 0, f"seed={seed}: rank {r} exited {p.returncode}:\n{tail(r)}"
        return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]
    raise AssertionError("unreachable")


def _launch(worker: Path, out: Path, seed: int, timeout_s: float,
            extra_env: dict[str, str] | None
            ) -> tuple[list[subprocess.Popen[bytes]], list[Any], bool]:
    port = free_port()
    env = {**os.environ, "PJRT_DEVICE": "CPU", **(extra_env or {})}
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    for r in range(WORLD):
        log = open(out / f"rank{r}.log", "wb")  # noqa: SIM115 (closed below)
        logs.append(log)
        procs.append(subprocess.Popen(
            [sys.executable, str(worker), str(r), str(WORLD), str(port),
             str(out / f"rank{r}.json"), str(seed)],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True))
    deadline = time.monotonic() + timeout_s
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        timed_out = any(p.poll() is None for p in procs)
        for p in procs:
            _kill_group(p)
        for log in logs:
            log.close()
    return procs, logs, timed_out


# -- worker side ---------------------------------------------------------------
def chain(e: BaseException | None) -> list[str]:
    """Exception class names, outermost first (through Dynamo's
    ``BackendCompilerFailed.inner_exception`` and ``__cause__``)."""
    names: list[str] = []
    while e is not None and len(names) < 8:
        names.append(type(e).__name__)
        e = getattr(e, "inner_exception", None) or e.__cause__
    return names


def innermost_message(e: BaseException) -> str:
    while True:
        nxt = getattr(e, "inner_exception", None) or e.__cause__
        if nxt is None:
            return str(e)
        e = nxt


def run_cases(cases: list[Callable[[], dict[str, Any]]], argv: list[str]) -> None:
    """The worker's main: ``argv`` is ``RANK WORLD PORT OUT_JSON SEED``."""
    import datetime
    import traceback

    import torch
    import torch.distributed as dist

    rank, world, port, out = int(argv[1]), int(argv[2]), argv[3], argv[4]
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=60))
    except Exception:  # noqa: BLE001 (the launcher retries on another port)
        traceback.print_exc()
        sys.exit(_RENDEZVOUS_FAILED)
    results: dict[str, Any] = {}
    for case in cases:
        name = case.__name__.removeprefix("case_")
        torch._dynamo.reset()
        t0 = time.monotonic()
        try:
            results[name] = case()
        except Exception as e:  # noqa: BLE001
            results[name] = {"status": "error", "chain": chain(e),
                             "message": innermost_message(e)[:2000],
                             "traceback": traceback.format_exc()[-3000:]}
        results[name]["seconds"] = round(time.monotonic() - t0, 2)
        dist.barrier()  # keep the ranks in step between cases
        with open(out + ".partial", "w") as f:
            json.dump(results, f)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    dist.destroy_process_group()


def flat(tensors: Any) -> Any:
    """The tensors, detached, flattened and concatenated."""
    import torch

    return torch.cat([t.detach().reshape(-1) for t in tensors])


def ranks_max_diff(t: Any) -> float:
    """Largest difference of ``t`` between the ranks (0.0 when identical)."""
    import torch
    import torch.distributed as dist

    parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.contiguous())
    return max(float((p - parts[0]).abs().max()) for p in parts)
