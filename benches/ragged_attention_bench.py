"""Ragged paged attention vs padded attention: query tokens per second on a
realistic length mix (run manually; one run, prints a table and JSON).

Batch: ``--seqs`` sequences with context lengths log-uniform in [15, 8000];
a quarter are prefills (queries = the whole context, capped at
``--prefill-cap``), the rest decode one token. GQA with ``--heads`` query
heads over ``--kv-heads`` KV heads, head_dim ``--dim``, pages of
``--page-size`` tokens in a shuffled cache.

- ``ragged``: ``hb.ops.ragged_paged_attention`` (CPU: the XLA reference path,
  which gathers only the pages each query block needs).
- ``padded``: the same attention in JAX, every sequence padded to the longest
  query count and context (all of each block-table row gathered), one
  sequence at a time (``lax.map``) so that memory stays bounded.

Both run as compiled programs through ``hb.call_jax``; the first call
(compilation) is excluded, then the median of ``--reps`` runs is reported.

``--target cuda`` runs the Pallas kernel (``impl="pallas"``) through a CUDA
PJRT plugin (set ``HLOBRIDGE_PLUGIN``) -- written for a GPU machine, not run
on the CPU-only development machine.

    PJRT_DEVICE=CPU .venv/bin/python benches/ragged_attention_bench.py
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

import hlobridge as hb


def make_batch(args: argparse.Namespace, rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
    """(queries, kv_pages, kv_lens, block_tables, cu_q_lens) for the length mix."""
    kv_lens = np.exp(rng.uniform(math.log(15), math.log(8000), args.seqs)).astype(np.int64)
    prefill = rng.random(args.seqs) < 0.25
    q_lens = np.where(prefill, np.minimum(kv_lens, args.prefill_cap), 1)
    pages = -(-kv_lens // args.page_size)
    max_pages = int(pages.max())
    n_pages = int(pages.sum())
    perm = rng.permutation(n_pages)
    bt = np.zeros((args.seqs, max_pages), np.int32)
    k = 0
    for s, n in enumerate(pages):
        bt[s, :n] = perm[k:k + n]
        k += n
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    g = torch.Generator().manual_seed(args.seed)
    q = torch.randn(int(cu[-1]), args.heads, args.dim, generator=g)
    kv = torch.randn(n_pages, 2, args.kv_heads, args.page_size, args.dim, generator=g)
    return q, kv, torch.from_numpy(kv_lens.astype(np.int32)), torch.from_numpy(bt), torch.from_numpy(cu)


def padded_attention(q, kv_pages, kv_lens, bt, cu, *, max_q: int, scale: float):
    """Padded baseline (JAX): pad to [S, max_q] queries and [S, max_pages*page] keys."""
    t, h, d = q.shape
    _, _, kvh, page, _ = kv_pages.shape
    s_count, max_pages = bt.shape
    q_lens = cu[1:] - cu[:-1]
    rows = cu[:-1, None] + jnp.arange(max_q)[None, :]
    row_ok = jnp.arange(max_q)[None, :] < q_lens[:, None]
    qp = q[jnp.clip(rows, 0, t - 1)] * scale                       # [S, max_q, H, D]

    def one(args):
        qs, table, kv_len, q_len = args
        kv = kv_pages[table].transpose(1, 2, 0, 3, 4).reshape(2, kvh, max_pages * page, d)
        qg = qs.reshape(max_q, kvh, h // kvh, d)
        sc = jnp.einsum("qhgd,hkd->hgqk", qg, kv[0])
        kpos = jnp.arange(max_pages * page)[None, :]
        qpos = (kv_len - q_len + jnp.arange(max_q))[:, None]
        sc = jnp.where((kpos < kv_len) & (kpos <= qpos), sc, -1e30)
        o = jnp.einsum("hgqk,hkd->qhgd", jax.nn.softmax(sc, axis=-1), kv[1])
        return o.reshape(max_q, h, d)

    out = jax.lax.map(one, (qp, bt, kv_lens, q_lens))
    target = jnp.where(row_ok, rows, t)
    return jnp.zeros_like(q).at[target].set(out, mode="drop")


def timed(fn, reps: int) -> tuple[float, torch.Tensor]:
    out = fn()                                                      # compile + first run
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--seqs", type=int, default=16)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--prefill-cap", type=int, default=256)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-padded", action="store_true", help="skip the padded baseline")
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    q, kv, kv_lens, bt, cu = make_batch(args, rng)
    platform = hb.runtime().platform
    if args.target == "cuda" and platform != "cuda":
        raise SystemExit(f"--target cuda needs the CUDA PJRT plugin (HLOBRIDGE_PLUGIN); the runtime is {platform}")
    impl = "pallas" if args.target == "cuda" else "reference"
    scale = args.dim ** -0.5
    q_lens = (cu[1:] - cu[:-1]).numpy()
    t_tokens = int(cu[-1])
    useful = int(sum(int(ql) * int(kl) - ql * (ql - 1) // 2 for ql, kl in zip(q_lens, kv_lens.numpy())))
    padded_pairs = args.seqs * int(q_lens.max()) * bt.shape[1] * args.page_size
    with torch.no_grad():
        t_rag, out_rag = timed(lambda: hb.ops.ragged_paged_attention(q, kv, kv_lens, bt, cu, impl=impl), args.reps)
        res = {"target": args.target, "impl": impl, "platform": platform, "seqs": args.seqs, "tokens": t_tokens,
               "kv_tokens": int(kv_lens.sum()), "heads": args.heads, "kv_heads": args.kv_heads, "dim": args.dim,
               "page_size": args.page_size, "useful_qk_pairs": useful, "padded_qk_pairs": padded_pairs,
               "ragged_s": t_rag, "ragged_tokens_per_s": t_tokens / t_rag}
        if not args.no_padded:
            t_pad, out_pad = timed(lambda: hb.call_jax(padded_attention, q, kv, kv_lens, bt, cu,
                                                       max_q=int(q_lens.max()), scale=scale), args.reps)
            res.update(padded_s=t_pad, padded_tokens_per_s=t_tokens / t_pad, speedup=t_pad / t_rag,
                       max_abs_diff=float((out_rag - out_pad).abs().max()))
    print(f"batch: {args.seqs} seqs, {t_tokens} query tokens, {res['kv_tokens']} context tokens "
          f"(kv_len log-uniform 15..8000, 1/4 prefill capped at {args.prefill_cap}); "
          f"H={args.heads} KVH={args.kv_heads} D={args.dim} page={args.page_size}")
    print(f"q.k pairs: useful {useful:,}, padded {padded_pairs:,} ({padded_pairs / useful:.1f}x)")
    print(f"ragged ({impl}): {t_rag * 1e3:9.1f} ms  {res['ragged_tokens_per_s']:10.0f} tokens/s")
    if "padded_s" in res:
        print(f"padded (jax)    : {res['padded_s'] * 1e3:9.1f} ms  {res['padded_tokens_per_s']:10.0f} tokens/s"
              f"  -> ragged is {res['speedup']:.1f}x faster; max |diff| {res['max_abs_diff']:.2e}")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
