"""Training-step time of a torch model with a JAX activation (``call_jax``)
under four regimes, measured in one run:

  hlobridge  torch.compile(backend="hlobridge"): forward and backward each ONE
             stitched program (torch + JAX segments); optimizer step in torch
  hb step    hlobridge.compile_train_step: forward, backward and the SGD update
             captured as ONE stitched program per step (whole-step capture)
  eager      plain PyTorch; call_jax runs its own compiled JAX programs
  inductor   torch.compile(backend="inductor"); call_jax stays an opaque op
  jax.jit    the same model written in pure JAX, whole step (incl. SGD) jitted,
             on jaxlib's own bundled XLA CPU client
  jax@plugin the same jitted JAX step lowered to StableHLO and run through
             hlobridge's runtime on the xla-cpu-pjrt plugin: pure JAX on the
             SAME XLA as hlobridge (the issue's anchor), parameters fed back
             zero-copy each step

Run manually:  PJRT_DEVICE=CPU .venv/bin/python benches/compile_backend_bench.py [--batch 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

import hlobridge as hb  # noqa: E402
from hlobridge import dynamo as hbd  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "e2e"))
from timing import interleaved  # noqa: E402  (benches/e2e/timing.py)

LR = 0.05


def jax_act(h: jax.Array) -> jax.Array:
    """GELU (tanh form) times a sine gate, in JAX."""
    return 0.5 * h * (1 + jnp.tanh(0.79788456 * (h + 0.044715 * h**3))) * jnp.cos(0.1 * h)


class Model(torch.nn.Module):
    def __init__(self, d_in: int, d_hidden: int, d_out: int) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(d_in, d_hidden)
        self.fc2 = torch.nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.sigmoid(self.fc1(x)) * 4 - 2
        return self.fc2(hb.call_jax(jax_act, h))


def torch_step(model: Callable[[torch.Tensor], torch.Tensor], params: list[torch.nn.Parameter],
               opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def make_torch(kind: str, d: tuple[int, int, int], x: torch.Tensor, y: torch.Tensor
               ) -> Callable[[], object]:
    torch.manual_seed(0)
    model = Model(*d)
    fn: Callable[[torch.Tensor], torch.Tensor] = model
    if kind == "hlobridge":
        fn = torch.compile(model, backend=hbd.backend, dynamic=False)
    elif kind == "inductor":
        fn = torch.compile(model, backend="inductor", dynamic=False)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=LR)
    return lambda: torch_step(fn, params, opt, x, y)


def make_hb_step(d: tuple[int, int, int], x: torch.Tensor, y: torch.Tensor
                 ) -> Callable[[], object]:
    torch.manual_seed(0)
    model = Model(*d)
    step = hb.compile_train_step(
        model, lambda m, x, y: torch.nn.functional.mse_loss(m(x), y), hb.optim.SGD(LR))
    return lambda: step(x, y)


def make_jax(d: tuple[int, int, int], x: torch.Tensor, y: torch.Tensor) -> Callable[[], object]:
    torch.manual_seed(0)
    m = Model(*d)
    params = {k: jnp.asarray(v.detach().numpy()) for k, v in m.state_dict().items()}
    xj, yj = jnp.asarray(x.numpy()), jnp.asarray(y.numpy())

    def loss_fn(p: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
        h = jax.nn.sigmoid(x @ p["fc1.weight"].T + p["fc1.bias"]) * 4 - 2
        out = jax_act(h) @ p["fc2.weight"].T + p["fc2.bias"]
        return jnp.mean((out - y) ** 2)

    @jax.jit
    def step(p: dict[str, jax.Array], x: jax.Array, y: jax.Array
             ) -> tuple[dict[str, jax.Array], jax.Array]:
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        return jax.tree_util.tree_map(lambda a, b: a - LR * b, p, g), loss

    state = {"p": params}

    def run() -> object:
        state["p"], loss = step(state["p"], xj, yj)
        return loss.block_until_ready()

    return run


def make_jax_on_plugin(d: tuple[int, int, int], x: torch.Tensor, y: torch.Tensor
                      ) -> Callable[[], object]:
    """The pure-JAX step compiled and run by hlobridge's PJRT runtime."""
    from hlobridge import _native

    torch.manual_seed(0)
    m = Model(*d)
    names = list(m.state_dict())
    state = [v.detach().clone().contiguous() for v in m.state_dict().values()]

    def step(*arrays: jax.Array) -> tuple[jax.Array, ...]:
        p = dict(zip(names, arrays[:-2]))
        xj, yj = arrays[-2:]

        def loss_fn(p: dict[str, jax.Array]) -> jax.Array:
            h = jax.nn.sigmoid(xj @ p["fc1.weight"].T + p["fc1.bias"]) * 4 - 2
            out = jax_act(h) @ p["fc2.weight"].T + p["fc2.bias"]
            return jnp.mean((out - yj) ** 2)

        loss, g = jax.value_and_grad(loss_fn)(p)
        return (*(p[k] - LR * g[k] for k in names), loss)

    args = [*state, x, y]
    sds = [jax.ShapeDtypeStruct(tuple(t.shape), jnp.float32) for t in args]
    exe, _ = _native.compile(jax.jit(step).lower(*sds).as_text())
    code = _native.ELEMENT_TYPES["f32"]
    shapes = [tuple(t.shape) for t in args]
    codes = [code] * len(args)
    box = {"state": state}

    def run() -> object:
        ins = [*box["state"], x, y]
        caps = _native.execute(exe, [t.data_ptr() for t in ins], shapes, codes, ins)[0]
        outs = [torch.from_dlpack(c) for c in caps]
        box["state"] = outs[:-1]
        return outs[-1]

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dims", type=int, nargs=3, default=[256, 512, 256])
    ap.add_argument("--reps", type=int, default=300, help="steps per regime")
    ap.add_argument("--batch-steps", type=int, default=5,
                    help="steps per timed batch (median over batches)")
    a = ap.parse_args()
    d = (a.dims[0], a.dims[1], a.dims[2])
    x, y = torch.randn(a.batch, d[0]), torch.randn(a.batch, d[2])
    print(f"training step, batch {a.batch}, {d[0]} -> {d[1]} -> {d[2]}, {a.reps} steps each, interleaved "
          f"(torch {torch.__version__}, jax {jax.__version__}, "
          f"{torch.get_num_threads()} torch threads)")
    results: dict[str, float | str] = {}
    variants: dict[str, Callable[[], object]] = {}
    for kind in ("hlobridge", "hb step", "eager", "inductor", "jax.jit", "jax@plugin"):
        try:
            if kind == "hb step":
                fn = make_hb_step(d, x, y)
            elif kind == "jax.jit":
                fn = make_jax(d, x, y)
            elif kind == "jax@plugin":
                fn = make_jax_on_plugin(d, x, y)
            else:
                fn = make_torch(kind, d, x, y)
            fn()  # trace and compile outside the timing
            variants[kind] = fn
        except Exception as e:  # report why a regime cannot run here
            results[kind] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
            if os.environ.get("HLOBRIDGE_BENCH_TRACE"):
                traceback.print_exc()
    # Interleaved: every round runs one batch of each regime in a fresh random
    # order, so that the shared VM's slow phases hit all of them alike.
    stats = interleaved(variants, reps=max(1, a.reps // a.batch_steps), batch=a.batch_steps,
                        warmup=10)
    for kind in ("hlobridge", "hb step", "eager", "inductor", "jax.jit", "jax@plugin"):
        if kind in stats:
            results[kind] = stats[kind]["median_us"]
    base = results["hlobridge"]
    print(f"{'regime':<10} {'us/step':>10} {'vs hlobridge':>13}")
    for kind, t in results.items():
        if isinstance(t, str):
            print(f"{kind:<10} {t}")
        else:
            ratio = f"{t / base:.2f}x" if isinstance(base, float) else "-"
            print(f"{kind:<10} {t:>10.1f} {ratio:>13}")
    for mine in ("hlobridge", "hb step"):
        for anchor in ("jax.jit", "jax@plugin", "eager"):
            t, a = results[mine], results[anchor]
            if isinstance(t, float) and isinstance(a, float):
                target = "target < 1" if anchor == "eager" else "target <= 1.1 on the same XLA"
                print(f"{mine} / {anchor} = {t / a:.2f} ({target})")


if __name__ == "__main__":
    main()
