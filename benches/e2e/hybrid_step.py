"""The hybrid training step (torch linear layer, JAX activation + loss
gradient, torch weight gradient, JAX momentum SGD) run five ways in this
process, checked against each other, then timed interleaved:

- ``hlobridge fused``: the four segments stitched into ONE program
  (``examples/hybrid_common.build_fused``), run with ``_native.execute``;
- ``hlobridge call_jax (unfused)``: torch eager + one ``hb.call_jax`` per JAX
  part (the demo's "unfused" way, for reference);
- ``dlpack hop``: torch eager + ``jax.jit`` for the JAX parts, tensors handed
  over with ``jax.dlpack.from_dlpack`` / ``torch.utils.dlpack.from_dlpack``;
- ``host copy hop``: the same, but through numpy with explicit copies
  (``jnp.array(t.numpy())`` in, ``np.array(jax_array)`` out);
- ``pure jax``: the whole step in one ``jax.jit`` on arrays already in JAX
  (the XLA limit: jaxlib's own CPU client, no framework hop);
- ``pure jax @plugin``: the same jitted step lowered to StableHLO and run by
  hlobridge's runtime on the xla-cpu-pjrt plugin: pure JAX on the SAME XLA
  build as the fused program, so the ratio to it is the cost of stitching
  itself (jaxlib's bundled XLA CPU is a different, faster-at-matmul build).

torch_xla's ``call_jax`` (variant d) needs jax 0.7.1 and runs in a subprocess
(``txla_worker.py``); its outputs are written to an ``.npz`` and checked
against the fused ones here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import jax
import jax.dlpack
import jax.numpy as jnp
import numpy as np
import torch
from torch.utils.dlpack import from_dlpack

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

import hlobridge as hb  # noqa: E402
from hybrid_common import (  # noqa: E402
    INPUT_NAMES, OUTPUT_NAMES, act_loss, build_fused, make_inputs, pure_jax_step, sgd)

SIZES: dict[str, tuple[int, int, int]] = {
    "small": (16, 32, 32),       # small-op-heavy: dispatch and hops dominate
    "medium": (64, 128, 128),
    "large": (256, 512, 512),    # matmul-bound
}
FUSED = "hlobridge fused"
UNFUSED = "hlobridge call_jax (unfused)"
DLPACK = "dlpack hop"
HOST = "host copy hop"
PURE_JAX = "pure jax"
PURE_JAX_PLUGIN = "pure jax @plugin"
TORCH_XLA = "torch_xla call_jax"
TOL = {"rtol": 1e-4, "atol": 1e-5}

Step = Callable[[], list[torch.Tensor]]


def variants(n: int, d_in: int, d_out: int) -> dict[str, Step]:
    """Every in-process variant of the step for one size, all on the same inputs;
    each returns the outputs ``OUTPUT_NAMES`` as torch tensors."""
    inp = make_inputs(n, d_in, d_out)
    x, y, w, b, mw, mb, ones = (inp[k] for k in INPUT_NAMES)
    fused = build_fused(inp)
    jal, jsgd = jax.jit(act_loss), jax.jit(sgd)
    jstep = jax.jit(pure_jax_step)
    jx = [jnp.array(inp[k].numpy()) for k in INPUT_NAMES]
    to_jax = jax.dlpack.from_dlpack

    def unfused() -> list[torch.Tensor]:
        h = x @ w.T + b
        loss, dh = hb.call_jax(act_loss, h, y)
        dw, db = dh.T @ x, dh.T @ ones
        return [loss, *hb.call_jax(sgd, w, b, mw, mb, dw, db)]

    def dlpack_hop() -> list[torch.Tensor]:
        h = x @ w.T + b
        loss, dh = jal(to_jax(h), to_jax(y))
        dh_t = from_dlpack(dh)
        dw, db = dh_t.T @ x, dh_t.T @ ones
        outs = jsgd(*(to_jax(t) for t in (w, b, mw, mb, dw, db)))
        return [from_dlpack(loss), *(from_dlpack(o) for o in outs)]

    def host_hop() -> list[torch.Tensor]:
        h = x @ w.T + b
        loss, dh = jal(jnp.array(h.numpy()), jnp.array(y.numpy()))
        dh_t = torch.from_numpy(np.array(dh))
        dw, db = dh_t.T @ x, dh_t.T @ ones
        outs = jsgd(*(jnp.array(t.numpy()) for t in (w, b, mw, mb, dw, db)))
        return [torch.from_numpy(np.array(o)) for o in (loss, *outs)]

    from hlobridge import _native

    plugin_exe, _ = _native.compile(jstep.lower(*jx).as_text())
    dense = [inp[k].contiguous() for k in INPUT_NAMES]
    ptrs, shapes = [t.data_ptr() for t in dense], [tuple(t.shape) for t in dense]
    codes = [_native.ELEMENT_TYPES["f32"]] * len(dense)

    def pure_jax_plugin() -> list[torch.Tensor]:
        caps = _native.execute(plugin_exe, ptrs, shapes, codes, dense)[0]
        return [from_dlpack(c) for c in caps]

    def pure_jax() -> list[torch.Tensor]:
        outs = jstep(*jx)
        jax.block_until_ready(outs)
        return outs  # type: ignore[return-value]  (jax arrays; converted in check())

    return {FUSED: fused.run, UNFUSED: unfused, DLPACK: dlpack_hop, HOST: host_hop,
            PURE_JAX: pure_jax, PURE_JAX_PLUGIN: pure_jax_plugin}


def as_torch(outs: list[object]) -> list[torch.Tensor]:
    return [o if isinstance(o, torch.Tensor) else torch.from_numpy(np.array(o)) for o in outs]


def check(steps: dict[str, Step], extra: dict[str, list[np.ndarray]] | None = None) -> dict[str, float]:
    """Assert every variant's outputs match the fused program's (rtol 1e-4,
    atol 1e-5); returns each variant's largest absolute difference."""
    with torch.no_grad():
        ref = as_torch(steps[FUSED]())
        results = {k: as_torch(fn()) for k, fn in steps.items() if k != FUSED}
    for k, arrays in (extra or {}).items():
        results[k] = [torch.from_numpy(a) for a in arrays]
    diffs = {}
    for k, outs in results.items():
        assert len(outs) == len(OUTPUT_NAMES), (k, len(outs))
        for name, got, want in zip(OUTPUT_NAMES, outs, ref):
            torch.testing.assert_close(got.reshape(want.shape), want, **TOL,
                                       msg=lambda m, k=k, name=name: f"{k} {name}: {m}")
        diffs[k] = max(float((g.reshape(r.shape) - r).abs().max()) for g, r in zip(outs, ref))
    return diffs
