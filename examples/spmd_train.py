"""Data-parallel + tensor-parallel training of a hybrid torch + JAX model,
stitched into ONE program and run SPMD over 2 processes x 2 devices on JAX's
distributed runtime (gloo collectives on CPU):

    torchrun --nproc-per-node 2 examples/spmd_train.py

The model is a 2-layer MLP, Megatron-style: the first Linear is split by
columns and the second by rows over the ``tp`` mesh axis (each process's two
devices); the batch is split over the ``dp`` axis (the processes). Per device
and step, one stitched program runs:

    fwd1   [torch]  z = x @ W1 + b1                      (column shard)
    act    [jax]    a = silu(z), and silu'(z) for the backward
    fwd2   [torch]  yhat = all_reduce_tp(a @ W2) + b2    (torch collective over tp)
    loss   [jax]    loss, dyhat                          (MSE over the global batch)
    bwd    [torch]  dW1, db1, dW2, db2                   (hand-written backward)
    sync   [torch]  all_reduce_dp(loss, grads)           (torch collectives over dp)
    adam   [jax]    optax.adam update of every shard

The torch collectives (``funcol.all_reduce``) are rewritten by hlobridge's
stitcher pass into global-device-id all-reduces over the right mesh axis.
Each process checks its shards of the parameters after ``--steps`` steps, and
the losses, against the same training in eager torch on one process
(full batch, full weights, ``torch.optim.Adam``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import hlobridge.distributed as hbd

N, D, H, O = 16, 8, 16, 4
LR = 0.05


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--tol", type=float, default=2e-5,
                    help="max |param - reference| and relative loss difference")
    args = ap.parse_args()
    if "RANK" not in os.environ:
        print("run me under torchrun: torchrun --nproc-per-node 2 examples/spmd_train.py",
              file=sys.stderr)
        return 2
    # Before anything touches JAX: 2 CPU devices per process, coordinator on MASTER_PORT + 1.
    info = hbd.initialize(local_devices=2)

    import jax
    import jax.numpy as jnp
    import optax
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from jax.sharding import PartitionSpec as P

    from hlobridge import spmd

    dist.init_process_group("gloo")  # torch collectives are only traced, never run
    mesh = spmd.process_mesh(("dp", "tp"))
    dp, tp = mesh.shape["dp"], mesh.shape["tp"]
    n, h = N // dp, H // tp  # per-device batch rows and hidden units
    world = dist.group.WORLD

    class Fwd1(torch.nn.Module):
        def forward(self, x, w1, b1):  # type: ignore[no-untyped-def]
            return x @ w1 + b1

    class Fwd2(torch.nn.Module):
        def forward(self, a, w2, b2):  # type: ignore[no-untyped-def]
            return funcol.all_reduce(a @ w2, "sum", world) + b2

    class Bwd(torch.nn.Module):
        def forward(self, x, a, dact, w2, dy):  # type: ignore[no-untyped-def]
            dz = (dy @ w2.T) * dact
            return x.T @ dz, dz.sum(0), a.T @ dy, dy.sum(0)

    class Sync(torch.nn.Module):
        def forward(self, loss, g1, gb1, g2, gb2):  # type: ignore[no-untyped-def]
            return tuple(funcol.all_reduce(t, "sum", world) for t in (loss, g1, gb1, g2, gb2))

    def act(z):  # type: ignore[no-untyped-def]
        a = jax.nn.silu(z)
        return a, jax.grad(lambda t: jax.nn.silu(t).sum())(z)

    def loss_fn(yhat, y):  # type: ignore[no-untyped-def]
        # Sum over this device's rows / global batch: the dp all-reduce makes the mean.
        return jnp.sum((yhat - y) ** 2) / N, 2.0 * (yhat - y) / N

    opt = optax.adam(LR)
    names = ("w1", "b1", "w2", "b2")
    shapes = {"w1": (D, h), "b1": (h,), "w2": (h, O), "b2": (O,)}

    def adam(*flat):  # type: ignore[no-untyped-def]
        params, grads, mu, nu = (dict(zip(names, flat[i * 4:(i + 1) * 4])) for i in range(4))
        count = flat[16]
        state = (optax.ScaleByAdamState(count=count, mu=mu, nu=nu), optax.EmptyState())
        updates, (st, _) = opt.update(grads, state, params)
        new = optax.apply_updates(params, updates)
        return (*(new[k] for k in names), *(st.mu[k] for k in names),
                *(st.nu[k] for k in names), st.count)

    def sds(*shape: int, dtype=jnp.float32):  # type: ignore[no-untyped-def]
        return jax.ShapeDtypeStruct(shape, dtype)

    def jax_text(fn, *avals):  # type: ignore[no-untyped-def]
        return jax.jit(fn).lower(*avals).as_text()

    t0 = time.perf_counter()
    r = torch.randn
    segments = [
        spmd.torch_segment("fwd1", Fwd1(), (r(n, D), r(D, h), r(h)), ["x", "w1", "b1"], ["z"]),
        ("act", "jax", jax_text(act, sds(n, h)), "main", ["z"], ["a", "dact"]),
        spmd.torch_segment("fwd2", Fwd2(), (r(n, h), r(h, O), r(O)), ["a", "w2", "b2"], ["yhat"],
                           mesh=mesh, axes="tp"),
        ("loss", "jax", jax_text(loss_fn, sds(n, O), sds(n, O)), "main", ["yhat", "y"],
         ["loss_part", "dy"]),
        spmd.torch_segment("bwd", Bwd(), (r(n, D), r(n, h), r(n, h), r(h, O), r(n, O)),
                           ["x", "a", "dact", "w2", "dy"], ["g1p", "gb1p", "g2p", "gb2p"]),
        spmd.torch_segment("sync", Sync(), (r(()), r(D, h), r(h), r(h, O), r(O)),
                           ["loss_part", "g1p", "gb1p", "g2p", "gb2p"],
                           ["loss", "g1", "gb1", "g2", "gb2"], mesh=mesh, axes="dp"),
        ("adam", "jax",
         jax_text(adam, *[sds(*shapes[k]) for k in names] * 4, sds(dtype=jnp.int32)), "main",
         [*names, "g1", "gb1", "g2", "gb2", *(f"mu_{k}" for k in names),
          *(f"nu_{k}" for k in names), "count"],
         [*(f"{k}_new" for k in names), *(f"mu_{k}_new" for k in names),
          *(f"nu_{k}_new" for k in names), "count_new"]),
    ]
    state_names = [*names, *(f"mu_{k}" for k in names), *(f"nu_{k}" for k in names), "count"]

    def ty(shape: tuple[int, ...], dt: str = "f32") -> str:
        return "tensor<" + "".join(f"{d}x" for d in shape) + dt + ">"

    inputs = [("x", ty((n, D))), ("y", ty((n, O))),
              *[(s, ty(shapes[s.split("_")[-1]])) for s in state_names[:-1]],
              ("count", ty((), "i32"))]
    spec = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None), "b2": P()}
    in_specs = {"x": P("dp", None), "y": P("dp", None)}
    for s in state_names[:-1]:
        in_specs[s] = spec[s.split("_")[-1]]
    outputs = ["loss", *(f"{s}_new" for s in state_names)]
    out_specs = [P(), *(in_specs.get(s, P()) for s in state_names)]
    prog = spmd.stitch_spmd(inputs, segments, outputs, mesh, in_specs, out_specs, "spmd_step")
    build_s = time.perf_counter() - t0

    # The same data and initial weights on every process (seeded), sliced per process.
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(N, D, generator=g), torch.randn(N, O, generator=g)
    W1, B1 = torch.randn(D, H, generator=g) / D**0.5, torch.randn(H, generator=g) * 0.1
    W2, B2 = torch.randn(H, O, generator=g) / H**0.5, torch.randn(O, generator=g) * 0.1
    rows = slice(info.process_id * (N // dp), (info.process_id + 1) * (N // dp))
    full = {"w1": W1, "b1": B1, "w2": W2, "b2": B2}
    local = [X[rows], Y[rows], *full.values(), *(torch.zeros_like(t) for t in full.values()) ,
             *(torch.zeros_like(t) for t in full.values()), torch.zeros((), dtype=torch.int32)]
    arrays = prog.global_arrays(*local)
    data, state = arrays[:2], arrays[2:]
    consts = [a for nme, a in zip(prog.input_names, arrays) if nme in prog.constants]
    losses = []
    t1 = time.perf_counter()
    for _ in range(args.steps):
        out = prog.run_global(*data, *state[:len(state_names)], *consts)
        losses.append(float(spmd.to_local(out[0])))
        state = out[1:]
    jax.block_until_ready(state)
    run_s = time.perf_counter() - t1
    got = {k: spmd.to_local(a) for k, a in zip(names, state[:4])}

    # Reference: one process, eager torch, the whole batch, torch.optim.Adam.
    ref = {k: t.clone().requires_grad_(True) for k, t in full.items()}
    topt = torch.optim.Adam(ref.values(), lr=LR)
    ref_losses = []
    for _ in range(args.steps):
        topt.zero_grad()
        z = X @ ref["w1"] + ref["b1"]
        yhat = torch.nn.functional.silu(z) @ ref["w2"] + ref["b2"]
        loss = ((yhat - Y) ** 2).sum() / N
        loss.backward()
        topt.step()
        ref_losses.append(loss.item())
    # This process's blocks of the reference parameters (the whole tp axis is local).
    errs = {k: (got[k] - ref[k].detach()).abs().max().item() for k in names}
    loss_err = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(losses, ref_losses))
    if info.process_id == 0:
        print(f"mesh {dict(mesh.shape)} over {info.num_processes} processes "
              f"({info.global_devices} devices); program: {len(segments)} segments, "
              f"torch collectives rewritten: "
              f"{sum(s.report.get('rewritten', 0) for s in segments if hasattr(s, 'report'))}")
        print(f"build {build_s:.2f}s, {args.steps} steps {run_s:.3f}s (first step compiles)")
        print("losses    ", " ".join(f"{v:.6f}" for v in losses))
        print("reference ", " ".join(f"{v:.6f}" for v in ref_losses))
    print(f"rank {info.process_id}: max |param - reference| "
          + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()) + f"; loss (relative) {loss_err:.2e}",
          flush=True)
    ok = max(*errs.values(), loss_err) <= args.tol
    hbd.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
