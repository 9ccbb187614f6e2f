"""A JAX training step (forward, ``jax.grad``, ``optax.adamw``) of a torch
transformer, the torch model called each of these ways, in one run (issue
#29's "Measure"):

- ``call_torch``: ``hb.torch_module``: the torch forward and backward
  captured as StableHLO and compiled into the step's one XLA program;
- ``torchax``: torchax's ``JittableModule`` (``functional_call`` under
  ``torch_view`` / ``jax_view``): torch ops re-implemented in JAX while JAX
  traces;
- ``torch2jax``: rdyro/torch2jax (PyPI ``wrap-torch2jax``):
  ``torch2jax(fn, *example_args, depth=1)``, eager torch through an XLA FFI
  custom call of its C++ extension (compiled on first use with torch's
  ``cpp_extension``, cached under ``~/.cache/torch2jax``), its VJP a second
  FFI call running ``torch.func.vjp``;
- ``dlpack_hop``: eager torch from inside the jitted step through
  ``jax.pure_callback`` (forward, and torch autograd for the backward),
  arrays handed over zero-copy where possible: the callback bridges' design;
- ``pure_jax``: the same model written in ``jax.numpy`` (transformers 5
  ships no Flax models), checked against eager torch first.

Models (``benches/call_torch_models.py``): by default the zoo's GPT-2
(``GPT2LMHeadModel``) at d 256, 4 layers, vocab 8192, batch 4, seq 128;
``--quick`` the small LM (2 ``TransformerEncoderLayer`` s, d 128).

Every row's forward is checked against eager torch and every row's first
step loss against pure JAX's before timing. Time per step: the median of
interleaved rounds (``benches/e2e/timing.py``), with p10/p90 and the
machine's load (``uptime``) before and after; ratios are to ``pure_jax``.
Also the process's CPU time per step (median; all threads), which a loaded
machine disturbs less than wall time, and each compiled step's HLO census
(``benches/call_torch_hlo.py``; ``--hlo-dump DIR`` writes the HLO). Writes ``--json`` and ``--md`` (a Markdown table). The competitors are
bench-only dependencies: ``pip install -r benches/requirements.txt`` (``make
bench`` does); a row whose package is missing says so.

    .venv/bin/python benches/call_torch_bench.py [--quick] [--json out.json] [--md out.md]
        [--rows call_torch,torchax] [--reps N] [--hlo-dump DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("PJRT_DEVICE", "CPU")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "e2e"))
sys.path.insert(0, str(HERE))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import torch  # noqa: E402

import hlobridge as hb  # noqa: E402
from call_torch_hlo import hlo_summary  # noqa: E402
from call_torch_models import BenchModel, gpt2, small_lm  # noqa: E402
from call_torch_rivals import dlpack_hop, torch2jax_apply, torchax_apply  # noqa: E402
from timing import interleaved  # noqa: E402

ROWS = ("call_torch", "torchax", "torch2jax", "dlpack_hop", "pure_jax")


def make_step(apply: Any) -> Any:
    """``(tx, step)``: the jitted training step (next-token cross-entropy,
    ``jax.value_and_grad``, ``optax.adamw``) of ``apply(params, ids) -> logits``."""
    tx = optax.adamw(1e-3, weight_decay=0.01)

    def loss(p: Any, ids: Any, y: Any) -> Any:
        logp = jax.nn.log_softmax(apply(p, ids))
        return -jnp.mean(jnp.take_along_axis(logp, y[..., None], axis=-1))

    @jax.jit
    def step(p: Any, s: Any, ids: Any, y: Any) -> Any:
        val, g = jax.value_and_grad(loss)(p, ids, y)
        upd, s = tx.update(g, s, p)
        return optax.apply_updates(p, upd), s, val

    return tx, step


def _error(e: BaseException) -> str:
    """One line: the exception's type and message, argument reprs cut."""
    msg = f"{type(e).__name__}: {e}".split("\n")[0]
    return msg.split("(*(")[0][:200]


def appliers(bm: BenchModel, params: dict[str, Any], ids: Any,
             rows: set[str] | None = None) -> dict[str, Any]:
    """Each row's ``apply(params, ids)`` (of ``rows``, default all), or the
    reason it cannot be made; ``ids``: the step's input (torch2jax bakes in
    its shape)."""
    apply_ct, _ = hb.torch_module(bm.module, forward=bm.forward)
    makers = {
        "call_torch": lambda: apply_ct,
        "torchax": lambda: torchax_apply(bm),
        "torch2jax": lambda: torch2jax_apply(bm, params, ids),
        "dlpack_hop": lambda: dlpack_hop(bm, list(params)),
        "pure_jax": lambda: bm.jax_apply,
    }
    out: dict[str, Any] = {}
    for k, make in makers.items():
        if rows is not None and k not in rows:
            continue
        try:
            out[k] = make()
        except Exception as e:  # noqa: BLE001 -- the reason goes in the table
            out[k] = _error(e)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--quick", action="store_true", help="the small LM, fewer rounds")
    ap.add_argument("--reps", type=int, help="interleaved rounds (default 15, quick 7)")
    ap.add_argument("--rows", default=",".join(ROWS),
                    help="comma-separated subset of " + ",".join(ROWS) + " (pure_jax always)")
    ap.add_argument("--hlo-dump", type=Path, help="write each step's optimized HLO here")
    args = ap.parse_args()
    t_start = time.perf_counter()
    load_before = os.getloadavg()
    bm = small_lm() if args.quick else gpt2()
    _, params = hb.torch_module(bm.module, forward=bm.forward)
    ids = jnp.asarray(np.random.default_rng(0).integers(0, bm.vocab, (bm.batch, bm.seq)),
                      jnp.int32)
    y = jnp.roll(ids, -1, axis=1)
    with torch.no_grad():
        want = bm.forward(bm.module, torch.from_numpy(np.array(ids)).long()).numpy()
    rows: dict[str, dict[str, Any]] = {k: {} for k in ROWS}
    runners: dict[str, Any] = {}
    losses: dict[str, float] = {}
    cpu: dict[str, list[float]] = {}
    wanted = set(args.rows.split(",")) | {"pure_jax"}
    rows = {k: v for k, v in rows.items() if k in wanted}
    for k, apply in appliers(bm, params, ids, wanted).items():
        row = rows[k]
        if isinstance(apply, str):
            row["error"] = apply
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = np.asarray(jax.jit(apply)(params, ids))
            err = float(np.abs(got - want).max())
            row["forward_max_abs_err"] = err
            if not np.allclose(got, want, rtol=bm.tol, atol=bm.tol):
                row["error"] = f"forward differs from eager torch: max abs {err:.2e}"
                continue
            tx, jitted = make_step(apply)
            state = {"p": params, "s": tx.init(params)}
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                step = jitted.lower(params, state["s"], ids, y).compile()
            _, _, val = step(params, state["s"], ids, y)
            losses[k] = float(val)
            row["first_step_s"] = time.perf_counter() - t0
            row["hlo"] = hlo_summary(step, k, args.hlo_dump and args.hlo_dump / bm.name)
        except Exception as e:  # noqa: BLE001
            row["error"] = _error(e)
            continue

        cpu[k] = []

        def run(step: Any = step, state: dict[str, Any] = state, cpu_s: list[float] = cpu[k]
                ) -> None:
            c0 = time.process_time()
            state["p"], state["s"], val = step(state["p"], state["s"], ids, y)
            jax.block_until_ready(val)
            cpu_s.append(time.process_time() - c0)

        runners[k] = run
    base_loss = losses["pure_jax"]
    for k, v in losses.items():
        assert abs(v - base_loss) < 1e-3, (k, v, base_loss)
    reps = args.reps or (7 if args.quick else 15)
    res = interleaved(runners, reps=reps, batch=2 if args.quick else 1, warmup=1)
    load_after = os.getloadavg()
    for k, s in res.items():
        rows[k].update(s)
        rows[k]["loss"] = losses[k]
        rows[k]["cpu_median_us"] = statistics.median(cpu[k][1:]) * 1e6  # after the warm-up
    base = res["pure_jax"]
    for k in res:
        rows[k]["vs_pure_jax"] = res[k]["median_us"] / base["median_us"]
        rows[k]["p10_vs_pure_jax"] = res[k]["p10_us"] / base["p10_us"]
        rows[k]["cpu_vs_pure_jax"] = rows[k]["cpu_median_us"] / rows["pure_jax"]["cpu_median_us"]
    report = {"model": bm.name, "describe": bm.describe, "batch": bm.batch, "seq": bm.seq,
              "load_before": load_before, "load_after": load_after, "cpus": os.cpu_count(),
              "jax": jax.__version__, "torch": torch.__version__, "rows": rows,
              "command": " ".join(["benches/call_torch_bench.py", *sys.argv[1:]]),
              "wall_s": time.perf_counter() - t_start}
    text = markdown(report)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(text)


def markdown(r: dict[str, Any]) -> str:
    """The report as a Markdown table with a header line."""
    lb, la = r["load_before"], r["load_after"]
    lines = [
        f"JAX training step (forward, `jax.grad`, `optax.adamw`) of {r['describe']}; "
        f"batch {r['batch']}, sequence {r['seq']}. Median of interleaved rounds (p10-p90); "
        f"ratios to pure JAX. {r['cpus']} CPUs, load average {lb[0]:.1f} before / "
        f"{la[0]:.1f} after; jax {r['jax']}, torch {r['torch']}. Generated by "
        f"`{r['command']}` ({r['wall_s']:.0f} s). CPU ms/step: the process's CPU time "
        f"per step (all threads; median), steadier than wall time on a loaded machine. dots: `dot` ops in the optimized "
        f"step (all computations); fusions: top-level fusions; GB accessed: XLA's cost "
        f"analysis (the `torch2jax` and `dlpack_hop` rows' torch work runs outside the "
        f"program).", "",
        "| variant | ms/step | p10-p90 ms | vs pure JAX (median) | vs pure JAX (p10) "
        "| CPU ms/step | CPU vs pure JAX | first step s (compile) | dots | fusions "
        "| GB accessed | forward vs eager torch |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for k, row in r["rows"].items():
        if "median_us" not in row:
            lines.append(f"| `{k}` | - | - | - | - | - | - | - | - | - | - | not run: "
                         f"{row.get('error', '?').replace('|', '/')} |")
            continue
        h = row["hlo"]
        lines.append(
            f"| `{k}` | {row['median_us'] / 1e3:.1f} | {row['p10_us'] / 1e3:.1f}-"
            f"{row['p90_us'] / 1e3:.1f} | {row['vs_pure_jax']:.2f}x | "
            f"{row['p10_vs_pure_jax']:.2f}x | {row['cpu_median_us'] / 1e3:.1f} | "
            f"{row['cpu_vs_pure_jax']:.2f}x | {row['first_step_s']:.1f} | "
            f"{h['dot']} | {h['fusion']} | {h['gb_accessed']:.2f} | "
            f"max abs err {row['forward_max_abs_err']:.1e} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
