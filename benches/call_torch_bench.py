"""A JAX training step (forward, ``jax.grad``, ``optax.adamw``) of a small
torch transformer LM, with the torch model called three ways, in one run:

- ``call_torch``: ``hb.torch_module`` -- the torch forward and backward
  captured as StableHLO and compiled into the step's one XLA program;
- ``dlpack_hop``: the torch model run by eager torch from inside the jitted
  step through ``jax.pure_callback`` (forward; the backward is a second
  callback running torch autograd), arrays handed over zero-copy (numpy
  views of JAX's buffers, ``torch.from_numpy``): what torch2jax-style
  bridges do;
- ``pure_jax``: the same model written in ``jax.numpy`` (same parameters,
  checked equal to the torch forward first).

Time per step: the median of interleaved rounds
(``benches/e2e/timing.py``), with the machine's load (``uptime``). Ratios
are to ``pure_jax``. Competitors not run: torchax needs flax (not installed
here); torch2jax is not installed (its CPU path is an FFI callback into
eager torch, the ``dlpack_hop`` row's design).

    .venv/bin/python benches/call_torch_bench.py [--json out.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import torch  # noqa: E402

import hlobridge as hb  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))
from timing import interleaved  # noqa: E402

VOCAB, D, HEADS, FF, LAYERS = 512, 128, 4, 512, 2


class LM(torch.nn.Module):
    """Embedding, post-LN encoder layers (``nn.TransformerEncoderLayer``), head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, D)
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, batch_first=True)
            for _ in range(LAYERS))
        self.head = torch.nn.Linear(D, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)  # type: ignore[no-any-return]


def jax_lm(p: dict[str, Any], ids: Any) -> Any:
    """The same model in ``jax.numpy`` (torch's parameter names and layouts)."""

    def ln(x: Any, w: Any, b: Any) -> Any:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + 1e-5) * w + b

    h = p["emb.weight"][ids]
    bsz, seq, _ = h.shape
    for i in range(LAYERS):
        q = f"layers.{i}."
        qkv = h @ p[q + "self_attn.in_proj_weight"].T + p[q + "self_attn.in_proj_bias"]
        qkv = qkv.reshape(bsz, seq, 3, HEADS, D // HEADS).transpose(2, 0, 3, 1, 4)
        att = jax.nn.softmax(qkv[0] @ qkv[1].swapaxes(-1, -2) / np.sqrt(D // HEADS), axis=-1)
        o = (att @ qkv[2]).transpose(0, 2, 1, 3).reshape(bsz, seq, D)
        o = o @ p[q + "self_attn.out_proj.weight"].T + p[q + "self_attn.out_proj.bias"]
        h = ln(h + o, p[q + "norm1.weight"], p[q + "norm1.bias"])
        f = jax.nn.relu(h @ p[q + "linear1.weight"].T + p[q + "linear1.bias"])
        f = f @ p[q + "linear2.weight"].T + p[q + "linear2.bias"]
        h = ln(h + f, p[q + "norm2.weight"], p[q + "norm2.bias"])
    return h @ p["head.weight"].T + p["head.bias"]


def dlpack_hop(model: torch.nn.Module, names: list[str]) -> Any:
    """``f(params, ids)`` running ``model`` in eager torch via callbacks."""

    def run(params: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
        with warnings.catch_warnings():  # read-only views of JAX's buffers: not written
            warnings.simplefilter("ignore", UserWarning)
            state = {n: torch.from_numpy(np.asarray(params[n])) for n in names}
        with torch.no_grad():
            out = torch.func.functional_call(model, state, (torch.from_numpy(np.asarray(ids)),))
        return out.numpy()

    def grads(params: dict[str, np.ndarray], ids: np.ndarray, ct: np.ndarray
              ) -> dict[str, np.ndarray]:
        state = {n: torch.from_numpy(np.array(params[n])).requires_grad_() for n in names}
        out = torch.func.functional_call(model, state, (torch.from_numpy(np.asarray(ids)),))
        gs = torch.autograd.grad(out, list(state.values()), torch.from_numpy(np.asarray(ct)))
        return {n: g.numpy() for n, g in zip(names, gs)}

    @jax.custom_vjp
    def f(params: Any, ids: Any) -> Any:
        shape = jax.ShapeDtypeStruct((*ids.shape, VOCAB), jnp.float32)
        return jax.pure_callback(run, shape, params, ids)

    def fwd(params: Any, ids: Any) -> Any:
        return f(params, ids), (params, ids)

    def bwd(res: Any, ct: Any) -> Any:
        params, ids = res
        shapes = {n: jax.ShapeDtypeStruct(v.shape, v.dtype) for n, v in params.items()}
        return jax.pure_callback(grads, shapes, params, ids, ct), None

    f.defvjp(fwd, bwd)
    return f


def make_step(apply: Any) -> Any:
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = LM().train()
    apply, params = hb.torch_module(model)
    names = list(params)
    ids = jnp.asarray(np.random.default_rng(0).integers(0, VOCAB, (args.batch, args.seq)),
                      jnp.int32)
    y = jnp.roll(ids, -1, axis=1)
    with torch.no_grad():
        want = model(torch.from_numpy(np.array(ids)).long()).numpy()
    got = np.asarray(jax.jit(jax_lm)(params, ids))
    assert np.allclose(got, want, rtol=1e-4, atol=1e-4), np.abs(got - want).max()
    variants = {"call_torch": apply, "dlpack_hop": dlpack_hop(model, names), "pure_jax": jax_lm}
    runners: dict[str, Any] = {}
    losses = {}
    for k, fn in variants.items():
        tx, step = make_step(fn)
        state = {"p": params, "s": tx.init(params)}

        def run(step: Any = step, state: dict[str, Any] = state) -> None:
            state["p"], state["s"], val = step(state["p"], state["s"], ids, y)
            jax.block_until_ready(val)

        # first step from the same parameters: the three losses agree
        _, _, val = step(params, state["s"], ids, y)
        losses[k] = float(val)
        runners[k] = run
    assert max(losses.values()) - min(losses.values()) < 1e-4, losses
    load = os.getloadavg()
    res = interleaved(runners, reps=5 if args.quick else 15, batch=2 if args.quick else 4,
                      warmup=2)
    base = res["pure_jax"]["median_us"]
    print(f"transformer LM step: vocab {VOCAB}, d {D}, {LAYERS} layers, batch {args.batch}, "
          f"seq {args.seq}; load {load[0]:.1f}; {os.cpu_count()} cpus")
    base10 = res["pure_jax"]["p10_us"]
    print(f"{'variant':12} {'ms/step':>9} {'p10':>8} {'p90':>8} {'vs pure_jax':>12} "
          f"{'p10 vs p10':>11}")
    for k, s in res.items():
        print(f"{k:12} {s['median_us'] / 1e3:9.2f} {s['p10_us'] / 1e3:8.2f} "
              f"{s['p90_us'] / 1e3:8.2f} {s['median_us'] / base:11.2f}x "
              f"{s['p10_us'] / base10:10.2f}x")
    print("not run: torchax (needs flax, not installed), torch2jax (not installed)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"load": load, "losses": losses, "results": res,
                                         "batch": args.batch, "seq": args.seq}, indent=2))


if __name__ == "__main__":
    main()
