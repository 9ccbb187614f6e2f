"""torch_xla's own ``call_jax`` in the e2e benchmark (variant d), run inside
the jax 0.7.1 venv of ``benches/torch_xla/env.py``.

Hybrid step: the torch parts run as torch_xla lazy tensors on the ``xla``
device, the JAX parts through ``torch_xla.core.xla_builder.call_jax``; each
step ends with ``torch_xla.sync()`` + ``xm.wait_device_ops()`` so the program
has run. Also times a tiny ``call_jax`` (dispatch overhead).

Usage: txla_worker.py CONFIG_JSON OUT_DIR
  CONFIG_JSON: {"sizes": {name: [n, d_in, d_out]}, "step_reps": {name: [reps, batch]},
                "tiny": [reps, batch] | null}
Writes OUT_DIR/<size>.npz (the step's outputs, for the parent's check) and
prints one JSON line of timing stats.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("PJRT_DEVICE", "CPU")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "examples"))
sys.path.insert(0, str(HERE.parent))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch_xla  # noqa: E402
import torch_xla.core.xla_builder as xb  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402

from hybrid_common import INPUT_NAMES, act_loss, make_inputs, sgd  # noqa: E402
from timing import interleaved  # noqa: E402


def tiny_jax(x: jax.Array) -> jax.Array:
    """``benches/call_jax_overhead.tiny_jax`` (not imported: that module loads
    hlobridge, which needs the project's jax)."""
    return x * 2 + 1


def step_fn(n: int, d_in: int, d_out: int):
    dev = torch_xla.device()
    inp = {k: v.to(dev) for k, v in make_inputs(n, d_in, d_out).items()}
    x, y, w, b, mw, mb, ones = (inp[k] for k in INPUT_NAMES)

    def step() -> list[torch.Tensor]:
        h = x @ w.T + b
        loss, dh = xb.call_jax(act_loss, (h, y))
        dw, db = dh.T @ x, dh.T @ ones
        outs = xb.call_jax(sgd, (w, b, mw, mb, dw, db))
        torch_xla.sync()
        xm.wait_device_ops()
        return [loss, *outs]

    return step


def main() -> None:
    cfg = json.loads(sys.argv[1])
    out_dir = Path(sys.argv[2])
    res: dict[str, object] = {"jax_version": jax.__version__, "torch_xla": torch_xla.__version__}
    with torch.no_grad():
        for name, (n, d_in, d_out) in cfg["sizes"].items():
            step = step_fn(n, d_in, d_out)
            outs = [t.cpu().numpy() for t in step()]
            np.savez(out_dir / f"{name}.npz", *outs)
            reps, batch = cfg["step_reps"][name]
            res[f"step/{name}"] = interleaved({"s": step}, reps, batch)["s"]
        if cfg.get("tiny"):
            x8 = torch.randn(8, generator=torch.Generator().manual_seed(0)).to(torch_xla.device())

            def tiny() -> torch.Tensor:
                out = xb.call_jax(tiny_jax, (x8,))
                torch_xla.sync()
                xm.wait_device_ops()
                return out

            reps, batch = cfg["tiny"]
            res["tiny"] = interleaved({"t": tiny}, reps, batch)["t"]
    print(json.dumps(res))


if __name__ == "__main__":
    main()
