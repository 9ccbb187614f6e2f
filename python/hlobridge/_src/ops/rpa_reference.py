"""The XLA reference path of ragged paged attention (what runs on CPU).

Work items (query blocks of one sequence) are processed one after another
(``lax.map``); for each, a loop walks the sequence's block table in chunks of
``pages_per_step`` pages and gathers only those pages -- up to the last page
the block's causal window needs -- with an online softmax. The work done is
proportional to the ragged batch, not to a padded one.

``differentiable=True`` gives the chunk loop a static trip count (the block
table width) so that JAX can reverse-differentiate it; chunks past a block's
needs are then computed and fully masked.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from hlobridge._src.ops.rpa_common import NEG_INF, pack_queries, softmax_step, unpack_output, work_list


def reference_attention(q: jax.Array, kv_pages: jax.Array, kv_lens: jax.Array, block_tables: jax.Array,
                        cu_q_lens: jax.Array, *, scale: float, soft_cap: float | None, causal: bool,
                        block_q: int, pages_per_step: int, differentiable: bool) -> jax.Array:
    """``q [T, H, D]``, ``kv_pages [P, 2, KVH, page, D]`` -> ``[T, H, D]``."""
    t, h, d = q.shape
    _, _, kvh, page, _ = kv_pages.shape
    max_pages = block_tables.shape[1]
    pps = min(pages_per_step, max_pages)
    chunk = pps * page
    wl = work_list(cu_q_lens, kv_lens, t, block_q, causal)
    qp, idx, valid = pack_queries((q * scale).astype(jnp.float32), wl, block_q, kvh)
    rows = qp.shape[2]
    row_tok = jnp.arange(rows, dtype=jnp.int32) % block_q
    max_chunks = -(-max_pages // pps)

    def one_item(args: tuple[jax.Array, ...]) -> jax.Array:
        qb, seq, q_count, pos0, kv_len, kv_end = args          # qb [KVH, R, D]
        row_pos = pos0 + row_tok                                 # [R]
        row_ok = row_tok < q_count
        table = block_tables[seq]

        def step(c: jax.Array, carry: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
            slots = c * pps + jnp.arange(pps, dtype=jnp.int32)
            pages = kv_pages[table[jnp.clip(slots, 0, max_pages - 1)]]       # [pps, 2, KVH, page, D]
            kv = pages.transpose(1, 2, 0, 3, 4).reshape(2, kvh, chunk, d).astype(jnp.float32)
            s = jnp.einsum("hrd,hkd->hrk", qb, kv[0])
            if soft_cap is not None:
                s = soft_cap * jnp.tanh(s / soft_cap)
            kpos = c * chunk + jnp.arange(chunk, dtype=jnp.int32)
            mask = (kpos[None, :] < kv_len) & row_ok[:, None]
            if causal:
                mask = mask & (kpos[None, :] <= row_pos[:, None])
            return softmax_step(carry, s, mask[None], kv[1],
                                lambda p, v: jnp.einsum("hrk,hkd->hrd", p, v))

        init = (jnp.full((kvh, rows, 1), NEG_INF, jnp.float32),
                jnp.zeros((kvh, rows, 1), jnp.float32), jnp.zeros((kvh, rows, d), jnp.float32))
        if differentiable:
            _, l_sum, acc = lax.fori_loop(0, max_chunks, step, init)
        else:
            n_chunks = (kv_end + chunk - 1) // chunk
            _, l_sum, acc = lax.fori_loop(0, n_chunks, step, init)
        return acc / jnp.where(l_sum > 0, l_sum, 1.0)

    out = lax.map(one_item, (qp, wl.seq, wl.q_count, wl.pos0, wl.kv_len, wl.kv_end))
    return unpack_output(out, idx, valid, t, h).astype(q.dtype)
