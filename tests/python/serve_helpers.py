"""Shared pieces of the export/serve tests: the hybrid model (torch layers,
a JAX function through ``call_jax`` with a Pallas kernel in interpret mode),
and starting ``hlobridge serve`` on a free loopback port."""

from __future__ import annotations

import os
import selectors
import subprocess
from pathlib import Path

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl

import hlobridge as hb
from harness import binary_cmd, find_binary


def _kernel(x_ref, o_ref):  # type: ignore[no-untyped-def]
    o_ref[...] = jnp.tanh(x_ref[...]) * 2.0


def act(h):  # type: ignore[no-untyped-def]
    """JAX: a Pallas kernel (interpret mode) plus a jnp op."""
    k = pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(h.shape, h.dtype), interpret=True)
    return k(h) + jnp.sin(h)


class Hybrid(torch.nn.Module):
    """torch Linear -> JAX/Pallas activation -> torch Linear, times a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(hb.call_jax(act, torch.relu(self.fc1(x)))) * self.scale


def start_server(artifact: Path, *flags: str, timeout: float = 120.0) -> tuple[subprocess.Popen[str], str]:
    """Starts ``hlobridge serve`` on ``127.0.0.1:0``; returns the process
    and its ``host:port`` (read from its first stdout line)."""
    binary = find_binary()
    if binary is None:
        raise RuntimeError("hlobridge binary not found (build target/release/hlobridge)")
    proc = subprocess.Popen([*binary_cmd(binary), "serve", str(artifact), "--addr", "127.0.0.1:0", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HLOBRIDGE_LOG": "warn"})
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout):
        proc.kill()
        raise RuntimeError("hlobridge serve did not start")
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        err = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(f"hlobridge serve failed: {line!r} {err}")
    return proc, line.rsplit(" ", 1)[1].strip()


def stop_server(proc: subprocess.Popen[str]) -> int:
    """SIGTERM, then wait; returns the exit status."""
    if proc.poll() is None:
        proc.terminate()
    try:
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
