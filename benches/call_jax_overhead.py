"""Per-call overhead of `hlobridge.call_jax` against `jax.jit` and torch eager.

Two workloads, each run as:

- ``hlobridge``: ``hb.call_jax(f, *torch_tensors)`` → torch tensors (zero-copy in
  and out, compiled once, per-function cache hit on every call);
- ``native execute``: the runtime floor under ``call_jax``:
  ``hlobridge._native.execute`` on prepared pointers + ``torch.from_dlpack``
  (no pytree handling, no cache lookup, no receipt);
- ``jax.jit``: ``jax.jit(f)(*jax_arrays).block_until_ready()`` on arrays that
  already live in JAX (no conversion: the anchor);
- ``jax.jit+dlpack``: what one writes by hand to run JAX on torch tensors:
  ``torch.from_dlpack(jf(*map(jax.dlpack.from_dlpack, ts)))``;
- ``torch eager``: the same computation in torch;
- ``hlobridge lazy``: ``hb.call_jax`` on torch_xla ``xla`` tensors (device
  data), results back as ``xla`` tensors;
- ``torch_xla call_jax``: torch_xla's own ``xla_builder.call_jax`` on ``xla``
  tensors followed by ``torch_xla.sync()`` and ``wait_device_ops()``. It needs
  jax 0.7.1, so it runs in a throwaway venv (``benches/torch_xla/env.py``,
  made on first use; ``--no-torch-xla`` skips it) in a subprocess right after
  the other variants, with the same repetitions.

``hlobridge`` minus ``native execute`` is the Python-side cost of ``call_jax``;
``native execute`` against ``jax.jit`` compares the two XLA builds (the
xla-cpu-pjrt plugin against jaxlib's own CPU client) as much as dispatch.

Workloads: ``tiny`` (``x * 2 + 1`` on 8 floats: pure dispatch overhead) and
``step128`` (a 128x128 torch→jax→torch update ``w - 0.01 * x.T @ tanh(x @ w)``).

Each timing is the median over ``--reps`` batches of ``--batch`` calls, the
variants' batches interleaved in a random order each round (so load from
other processes, and torch's and jaxlib's thread pools still spinning after
their own batches, affect all of them alike); the table prints µs per call and ratios against
``jax.jit`` and torch eager, all measured in the same run.

Run:  .venv/bin/python benches/call_jax_overhead.py [--reps 101] [--batch 100] [--json]
      [--no-torch-xla]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from collections.abc import Callable
from typing import Any

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax
import jax.dlpack
import jax.numpy as jnp
import torch
from torch.utils.dlpack import from_dlpack

import hlobridge as hb
from hlobridge import _native

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))
from timing import interleaved  # noqa: E402  (benches/e2e/timing.py)


def tiny_jax(x: Any) -> Any:
    return x * 2 + 1


def tiny_torch(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def step_jax(w: Any, x: Any) -> Any:
    return w - 0.01 * (x.T @ jnp.tanh(x @ w))


def step_torch(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return w - 0.01 * (x.T @ torch.tanh(x @ w))


def median_us(variants: dict[str, Callable[[], object]], reps: int,
              batch: int) -> dict[str, float]:
    """Median µs per call of each variant, timed interleaved (one batch of
    each variant per round, in a fresh random order each round; see
    ``benches/e2e/timing.py``), so load from other processes, and the thread
    pools that torch and jaxlib leave spinning after their own batches, hit
    every variant alike."""
    return {k: s["median_us"] for k, s in interleaved(variants, reps, batch).items()}


def workload(fj: Callable[..., Any], ft: Callable[..., torch.Tensor],
             ts: list[torch.Tensor], reps: int, batch: int) -> dict[str, float]:
    jf = jax.jit(fj)
    js = [jnp.asarray(t.numpy()) for t in ts]
    with torch.no_grad():
        ref = ft(*ts)
        out = hb.call_jax(fj, *ts)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        r = hb.last_receipt()
        assert r is not None and r.input_copies == 0
        exe, _ = _native.compile(jf.lower(*js).as_text())
        ptrs, shapes = [t.data_ptr() for t in ts], [tuple(t.shape) for t in ts]
        codes = [_native.ELEMENT_TYPES["f32"]] * len(ts)
        import torch_xla

        xs = [t.to(torch_xla.device()) for t in ts]
        variants = {
            "hlobridge": lambda: hb.call_jax(fj, *ts),
            "hlobridge lazy": lambda: hb.call_jax(fj, *xs),
            "native execute": lambda: [from_dlpack(c) for c in
                                       _native.execute(exe, ptrs, shapes, codes, ts)[0]],
            "jax.jit": lambda: jf(*js).block_until_ready(),
            "jax.jit+dlpack": lambda: from_dlpack(
                jf(*[jax.dlpack.from_dlpack(t) for t in ts])),
            "torch eager": lambda: ft(*ts),
        }
        return median_us(variants, reps, batch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=101, help="batches (the median is taken)")
    ap.add_argument("--batch", type=int, default=100, help="calls per batch")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--no-torch-xla", dest="torch_xla", action="store_false",
                    help="skip torch_xla's own call_jax (needs a jax 0.7.1 venv)")
    a = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    results = {
        "tiny": workload(tiny_jax, tiny_torch, [torch.randn(8, generator=g)],
                         a.reps, a.batch),
        "step128": workload(step_jax, step_torch,
                            [torch.randn(128, 128, generator=g),
                             torch.randn(128, 128, generator=g)], a.reps, a.batch // 4),
    }
    if a.torch_xla:
        sys.path.insert(0, str(Path(__file__).resolve().parent / "torch_xla"))
        import env  # benches/torch_xla/env.py

        worker = Path(__file__).resolve().parent / "torch_xla" / "worker.py"
        out = subprocess.run([str(env.python()), str(worker), str(a.reps), str(a.batch)],
                             check=True, capture_output=True, text=True).stdout
        txla = json.loads(out.strip().splitlines()[-1])
        for wl in ("tiny", "step128"):
            results[wl]["torch_xla call_jax"] = txla[wl]
    if a.json:
        print(json.dumps(results, indent=2))
        return
    rt = hb.runtime()
    print(f"call_jax overhead — platform {rt.platform}, torch {torch.__version__}, "
          f"jax {jax.__version__}; median of {a.reps} batches")
    print(f"{'workload':9} {'variant':19} {'µs/call':>9} {'÷ jax.jit':>10} {'÷ torch':>8} "
          f"{'torch_xla ÷ this':>17}")
    for wl, res in results.items():
        txla = res.get("torch_xla call_jax")
        for k, us in res.items():
            speedup = f"{txla / us:17.2f}" if txla else ""
            print(f"{wl:9} {k:19} {us:9.2f} {us / res['jax.jit']:10.2f} "
                  f"{us / res['torch eager']:8.2f} {speedup}")


if __name__ == "__main__":
    main()
