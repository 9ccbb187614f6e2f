"""XLA:CPU: a weight-gradient-shaped product ``Aᵀ·B`` (``A [rows, k]``,
``B [rows, n]``, contracting dimension 0 of both, the form torch's
``mm(grad.t(), x)`` lowers to) against the same product with ``A`` already
transposed (``[k, rows] · [rows, n]``). XLA:CPU runs the first through its
plain dot emitter and hands the second to a YNNPACK fusion; printed: which
path each took and the CPU time per call (median of interleaved rounds).
Quoted in docs/call_torch.md (Performance).

    .venv/bin/python benches/xla_cpu_transposed_dot.py
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

SHAPES = [(512, 128, 384), (512, 128, 512), (512, 256, 1024), (512, 256, 8192)]


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"load average {os.getloadavg()[0]:.1f}; CPU ms per call (median)")
    for rows, k, n in SHAPES:
        a = jnp.asarray(rng.standard_normal((rows, k)), jnp.float32)
        b = jnp.asarray(rng.standard_normal((rows, n)), jnp.float32)
        at = jnp.asarray(np.array(a).T.copy())
        transposed = jax.jit(lambda a, b: jax.lax.dot_general(a, b, (((0,), (0,)), ((), ()))))
        plain = jax.jit(lambda at, b: at @ b)
        variants = {"A^T B": (transposed.lower(a, b).compile(), (a, b)),
                    "(A^T) B": (plain.lower(at, b).compile(), (at, b))}
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(60):
            for name, (fn, args) in variants.items():
                c0 = time.process_time()
                for _ in range(5):
                    fn(*args).block_until_ready()
                times[name].append((time.process_time() - c0) / 5)
        med = {name: statistics.median(v) * 1e3 for name, v in times.items()}
        paths = {name: "ynnpack" if "ynn" in fn.as_text() else "plain dot"
                 for name, (fn, _) in variants.items()}
        print(f"[{rows},{k}]^T x [{rows},{n}]: " + ", ".join(
            f"{name} {paths[name]} {med[name]:.3f} ms" for name in variants)
            + f"; ratio {med['A^T B'] / med['(A^T) B']:.2f}x")


if __name__ == "__main__":
    main()
