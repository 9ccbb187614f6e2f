"""Shared pieces of ragged paged attention: the work list (query blocks of
one sequence each), packing ragged queries into blocks and scattering the
results back, and one online-softmax step. Used by the XLA reference path and
by the Pallas kernel."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

NEG_INF = -1e30
"""Score of masked positions (finite, so fully masked rows give no NaN)."""


class WorkList(NamedTuple):
    """One row per work item: a block of up to ``block_q`` consecutive query
    tokens of one sequence. Items past the real count have ``q_count == 0``."""

    seq: jax.Array       # [W] sequence index
    tok0: jax.Array      # [W] index of the first query token in the ragged query array
    q_count: jax.Array   # [W] valid query rows (0..block_q)
    pos0: jax.Array      # [W] position in its sequence's context of the first query
    kv_len: jax.Array    # [W] context length of the sequence
    kv_end: jax.Array    # [W] keys this block needs: [0, kv_end)


def num_work_items(num_tokens: int, num_seqs: int, block_q: int) -> int:
    """Static upper bound of the number of query blocks: every block holds at
    least one token, and sum(ceil(q_len / block_q)) <= (T + S (block_q-1)) / block_q."""
    return max(1, min(-(-(num_tokens + num_seqs * (block_q - 1)) // block_q), num_tokens))


def work_list(cu_q_lens: jax.Array, kv_lens: jax.Array, num_tokens: int, block_q: int, causal: bool) -> WorkList:
    """Split every sequence's queries into blocks of ``block_q`` (in-graph)."""
    s = kv_lens.shape[0]
    w_count = num_work_items(num_tokens, s, block_q)
    q_len = cu_q_lens[1:] - cu_q_lens[:-1]
    nb = (q_len + block_q - 1) // block_q
    cum = jnp.cumsum(nb)
    w = jnp.arange(w_count, dtype=jnp.int32)
    seq = jnp.clip(jnp.searchsorted(cum, w, side="right"), 0, s - 1).astype(jnp.int32)
    blk = w - (cum[seq] - nb[seq])
    real = w < cum[-1]
    q_count = jnp.where(real, jnp.clip(q_len[seq] - blk * block_q, 0, block_q), 0).astype(jnp.int32)
    pos0 = (kv_lens[seq] - q_len[seq] + blk * block_q).astype(jnp.int32)
    kv_len = kv_lens[seq].astype(jnp.int32)
    kv_end = jnp.minimum(kv_len, pos0 + q_count) if causal else kv_len
    kv_end = jnp.where(q_count > 0, kv_end, 0).astype(jnp.int32)
    tok0 = (cu_q_lens[seq] + blk * block_q).astype(jnp.int32)
    return WorkList(seq, tok0, q_count, pos0, kv_len, kv_end)


def pack_queries(q: jax.Array, wl: WorkList, block_q: int, kv_heads: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Ragged ``q [T, H, D]`` -> ``[W, KVH, G*block_q, D]`` (rows ordered
    (group member, token)), plus the token index ``[W, block_q]`` and its
    validity mask."""
    t, h, d = q.shape
    g = h // kv_heads
    idx = wl.tok0[:, None] + jnp.arange(block_q, dtype=jnp.int32)[None, :]
    valid = jnp.arange(block_q)[None, :] < wl.q_count[:, None]
    rows = q[jnp.clip(idx, 0, t - 1)]                          # [W, BQ, H, D]
    w = rows.shape[0]
    rows = rows.reshape(w, block_q, kv_heads, g, d).transpose(0, 2, 3, 1, 4)
    return rows.reshape(w, kv_heads, g * block_q, d), idx, valid


def unpack_output(o: jax.Array, idx: jax.Array, valid: jax.Array, num_tokens: int, heads: int) -> jax.Array:
    """Inverse of :func:`pack_queries`: ``[W, KVH, G*BQ, D]`` -> ``[T, H, D]``."""
    w, kvh, r, d = o.shape
    bq = idx.shape[1]
    o = o.reshape(w, kvh, r // bq, bq, d).transpose(0, 3, 1, 2, 4).reshape(w, bq, heads, d)
    target = jnp.where(valid, idx, num_tokens)                  # invalid rows are dropped
    return jnp.zeros((num_tokens, heads, d), o.dtype).at[target].set(o, mode="drop")


def softmax_step(carry: tuple[Any, Any, Any], s: Any, mask: Any, v: Any,
                 dot: Any) -> tuple[Any, Any, Any]:
    """One online-softmax update with scores ``s [..., R, K]`` (masked by
    ``mask``) and values ``v``; ``carry = (m [..., R, 1], l [..., R, 1], acc [..., R, D])``.
    ``dot(p, v)`` contracts p's last axis with v's key axis."""
    m, l_sum, acc = carry
    s = jnp.where(mask, s, NEG_INF)
    m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
    p = jnp.where(mask, jnp.exp(s - m_new), 0.0)
    alpha = jnp.exp(m - m_new)
    return m_new, alpha * l_sum + jnp.sum(p, axis=-1, keepdims=True), alpha * acc + dot(p, v)
