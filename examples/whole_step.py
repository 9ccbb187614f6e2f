"""The same idea as ``hybrid_train_step.py``, written the way a PyTorch user
writes it: an ``nn.Module`` whose forward calls a JAX function, a loss, and a
JAX optimizer update -- handed to ``hb.compile_train_step``, which captures
forward, backward and update as ONE stitched program.

It prints the receipt of the one executable, checks three steps against eager
PyTorch (autograd + ``torch.optim.SGD(momentum=0.9)``), and times the step
against the unfused way (eager torch with ``hb.call_jax`` for the JAX
activation, and the optimizer update in eager torch).
"""

from __future__ import annotations

import copy
import os
import statistics
import sys
import time

os.environ.setdefault("PJRT_DEVICE", "CPU")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hlobridge as hb  # noqa: E402

LR, BETA = 0.05, 0.9


def jax_act(h: jax.Array) -> jax.Array:
    """The model's activation, in JAX."""
    return jnp.sin(h) * jnp.exp(-0.1 * h * h)


class Model(torch.nn.Module):
    def __init__(self, d_in: int, d_hidden: int, d_out: int) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(d_in, d_hidden)
        self.fc2 = torch.nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(hb.call_jax(jax_act, self.fc1(x)))


def momentum_init(params: dict[str, jax.Array]) -> dict[str, jax.Array]:
    return {k: jnp.zeros_like(v) for k, v in params.items()}


def momentum_update(params: dict[str, jax.Array], grads: dict[str, jax.Array],
                    state: dict[str, jax.Array]
                    ) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
    """Momentum SGD in JAX (torch.optim.SGD semantics), Optax-style."""
    state = jax.tree_util.tree_map(lambda m, g: BETA * m + g, state, grads)
    return jax.tree_util.tree_map(lambda p, m: p - LR * m, params, state), state


def loss_fn(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(model(x), y)


def median_us(fn: object, reps: int = 300) -> float:
    for _ in range(20):
        fn()  # type: ignore[operator]
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> int:
    torch.manual_seed(int(os.environ.get("HLOBRIDGE_DEMO_SEED", "0")))
    d_in, d_hidden, d_out, batch = 64, 128, 32, 32
    model = Model(d_in, d_hidden, d_out)
    eager = copy.deepcopy(model)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=LR, momentum=BETA)
    step = hb.compile_train_step(model, loss_fn,
                                 hb.optim.JaxOptimizer(momentum_init, momentum_update))

    ok = True
    receipt = None
    for i in range(3):
        x, y = torch.randn(batch, d_in), torch.randn(batch, d_out)
        loss = step(x, y)
        receipt = hb.last_receipt()  # the whole-step program's (before the eager calls below)
        eager_opt.zero_grad()
        ref = loss_fn(eager, x, y)
        ref.backward()
        eager_opt.step()
        ref = ref.detach()
        worst = max(float((p.detach() - q.detach()).abs().max())
                    for p, q in zip(model.parameters(), eager.parameters()))
        good = abs(float(loss) - float(ref)) <= 1e-5 + 1e-4 * abs(float(ref)) and worst <= 1e-4
        ok &= good
        print(f"step {i}: loss {float(loss):.6f} (eager {float(ref):.6f}), "
              f"max |param - eager| {worst:.2e}  {'OK' if good else 'MISMATCH'}")

    assert receipt is not None
    (program,) = step.graphs[0].programs.values()
    print(f"\nprograms compiled for the step: {len(step.graphs)} (on the first call; "
          f"later steps are cache hits)")
    print(f"receipt of the last step: platform={receipt.platform} cache={receipt.cache} "
          f"run={receipt.run_time_s * 1e6:.0f} us, ONE executable "
          f"{program.exe.fingerprint} with {len(receipt.segments)} segments:")
    for seg in receipt.segments:
        print(f"  {seg.name:<40} [{seg.producer}]")

    x, y = torch.randn(batch, d_in), torch.randn(batch, d_out)

    def unfused() -> None:
        eager_opt.zero_grad()
        loss_fn(eager, x, y).backward()
        eager_opt.step()

    fused_us = median_us(lambda: step(x, y))
    unfused_us = median_us(unfused)
    print(f"\nstep time: whole-step program {fused_us:.0f} us vs eager torch + call_jax "
          f"{unfused_us:.0f} us ({unfused_us / fused_us:.1f}x)")
    print("check against eager PyTorch:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
