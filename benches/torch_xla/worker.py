"""Times torch_xla's own ``call_jax`` (run inside the jax 0.7.1 venv made by
``env.py``; prints JSON).

Per call: ``torch_xla.core.xla_builder.call_jax(f, args)`` on ``xla`` tensors,
then ``torch_xla.sync()`` and ``xm.wait_device_ops()``, so the program has run
and the result is materialised on the device, as with ``hlobridge.call_jax``.

Usage (from call_jax_overhead.py):  worker.py REPS BATCH
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.core.xla_builder as xb  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402


def tiny(x):
    return x * 2 + 1


def step(w, x):
    return w - 0.01 * (x.T @ jnp.tanh(x @ w))


def median_us(fn, reps: int, batch: int) -> float:
    for _ in range(max(3, batch // 10)):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        times.append((time.perf_counter() - t0) / batch)
    return statistics.median(times) * 1e6


def main() -> None:
    reps, batch = int(sys.argv[1]), int(sys.argv[2])
    dev = torch_xla.device()
    g = torch.Generator().manual_seed(0)
    x8 = torch.randn(8, generator=g).to(dev)
    w = torch.randn(128, 128, generator=g).to(dev)
    x = torch.randn(128, 128, generator=g).to(dev)

    def run(f, args):
        def call():
            out = xb.call_jax(f, args)
            torch_xla.sync()
            xm.wait_device_ops()
            return out
        return call

    ref = run(step, (w, x))().cpu()
    want = w.cpu() - 0.01 * (x.cpu().T @ torch.tanh(x.cpu() @ w.cpu()))
    torch.testing.assert_close(ref, want, rtol=1e-4, atol=1e-4)
    print(json.dumps({
        "jax_version": jax.__version__,
        "tiny": median_us(run(tiny, (x8,)), reps, batch),
        "step128": median_us(run(step, (w, x)), reps, max(1, batch // 4)),
    }))


if __name__ == "__main__":
    main()
