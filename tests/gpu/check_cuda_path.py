#!/usr/bin/env python3
"""End-to-end check of hlobridge's CUDA run path against torch CUDA eager,
for a GPU machine (run by ``tests/gpu/run.sh``).

Runs a JAX MLP (``hb.call_jax`` on CUDA tensors, which routes to
``hlobridge.devices.call_jax_cuda``) and the same function as module text
through ``DeviceProgram``, on fresh random inputs; compares each output with
torch CUDA eager (float32, full-precision products on both sides:
rtol=1e-4, atol=1e-4), checks that inputs were zero-copy views and outputs
live on the inputs' GPU, and prints a JSON summary (errors, and the median
wall time per call of each path: indicative only, they depend on the GPU).
Exit status 1 when a check fails, 2 without a GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the summary here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import torch

    import hlobridge as hb
    from hlobridge.devices import DeviceProgram, runtime

    if not torch.cuda.is_available():
        print("no CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    hi = jax.lax.Precision.HIGHEST

    def mlp(x, w1, b1, w2):
        h = jax.nn.relu(jnp.dot(x, w1, precision=hi) + b1)
        return jnp.dot(h, w2, precision=hi), jnp.mean(h, axis=0)

    def eager(x, w1, b1, w2):
        h = torch.relu(x @ w1 + b1)
        return h @ w2, h.mean(0)

    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator("cuda").manual_seed(args.seed)
    dev = torch.device("cuda", torch.cuda.current_device())
    shapes = [(256, 512), (512, 1024), (1024,), (1024, 128)]

    def draw() -> list:
        # Products scaled by 1/sqrt(fan-in), so outputs are O(1) and the
        # absolute tolerance below means the same for every draw.
        return [torch.randn(*s, device=dev, generator=g) / (s[0] ** 0.5 if len(s) == 2 else 1.0)
                for s in shapes]

    ins = draw()
    summary: dict[str, object] = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
                                  "jax": jax.__version__}
    failures: list[str] = []
    rt = runtime("cuda")
    summary["runtime"] = {"platform": rt.platform, "version": rt.platform_version, "plugin": rt.plugin_path}

    def check(name: str, got, want) -> None:
        for i, (a, b) in enumerate(zip(got, want)):
            if a.device != dev:
                failures.append(f"{name}: output {i} on {a.device}, inputs on {dev}")
            err = (a - b).abs().max().item()
            summary[f"{name}_max_abs_err_{i}"] = err
            try:
                torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
            except AssertionError as e:
                failures.append(f"{name}: output {i}: {e}")
        r = hb.last_receipt()
        if r is None or r.platform != "cuda" or r.input_copies != 0:
            failures.append(f"{name}: receipt {r}")

    def timed(fn) -> float:
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts) * 1e3

    want = eager(*ins)
    check("call_jax", hb.call_jax(mlp, *ins), want)
    sds = [jax.ShapeDtypeStruct(tuple(t.shape), jnp.float32) for t in ins]
    text = jax.jit(mlp).trace(*sds).lower(lowering_platforms=("cuda",)).as_text()
    prog = DeviceProgram(text)
    check("device_program", prog(*ins), want)
    # Fresh inputs through the compiled program.
    ins2 = draw()
    check("device_program_fresh", prog(*ins2), eager(*ins2))
    summary["ms_per_call_hlobridge"] = timed(lambda: prog(*ins))
    summary["ms_per_call_torch_eager"] = timed(lambda: eager(*ins))
    summary["failures"] = failures
    text_out = json.dumps(summary, indent=2, default=str)
    print(text_out)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text_out + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
