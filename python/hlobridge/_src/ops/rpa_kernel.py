"""The Pallas kernel of ragged paged attention (GPU and TPU targets; runs in
interpret mode on CPU for testing).

Grid: ``(work item, kv head)``. A program holds the ``G * block_q`` query
rows of one query block and one KV head (the G query heads sharing it, GQA),
and walks its sequence's block table one page at a time up to the last page
its causal window needs (a dynamic trip count: pages that are not needed are
never read), with an online softmax in float32.

How pages are read differs by target:

- ``cuda`` (Triton) / interpret: the KV cache is one global-memory ref that
  the kernel indexes with the page id read from the block table.
- ``tpu`` (Mosaic): work-item metadata and block tables are scalar-prefetched
  into SMEM; the KV cache stays in HBM (``memory_space=ANY``) and each needed
  K and V page is DMA'd into VMEM (``sync_copy``; no double buffering yet).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from hlobridge._src.ops.rpa_common import pack_queries, softmax_step, unpack_output, work_list


def _body(meta_ref: Any, bt_ref: Any, q_ref: Any, load: Any, o_ref: Any, *, page: int, block_q: int,
          max_pages: int, soft_cap: float | None, causal: bool) -> None:
    w = pl.program_id(0)
    head = pl.program_id(1)
    seq = meta_ref[w * 4 + 0]
    pos0 = meta_ref[w * 4 + 1]
    q_count = meta_ref[w * 4 + 2]
    kv_len = meta_ref[w * 4 + 3]
    q = q_ref[...].astype(jnp.float32)                          # [R, D] (already scaled)
    rows, d = q.shape
    # lax.rem/lax.div, not % and //: Python-style rounding lowers through `sign`, which
    # Mosaic only lowers when it can query a real TPU.
    row_tok = lax.rem(lax.broadcasted_iota(jnp.int32, (rows, page), 0), jnp.int32(block_q))
    col = lax.broadcasted_iota(jnp.int32, (rows, page), 1)
    kv_end = jnp.minimum(kv_len, pos0 + q_count) if causal else kv_len
    n_pages = jnp.where(q_count > 0, lax.div(kv_end + page - 1, jnp.int32(page)), 0)

    def step(j: Any, carry: Any) -> Any:
        k, v = load(bt_ref[seq * max_pages + j], head)          # [page, D] each
        s = lax.dot_general(q, k.astype(jnp.float32), (((1,), (1,)), ((), ())),
                            preferred_element_type=jnp.float32)
        if soft_cap is not None:
            s = soft_cap * jnp.tanh(s / soft_cap)
        kpos = j * page + col
        mask = (kpos < kv_len) & (row_tok < q_count)
        if causal:
            mask = mask & (kpos <= pos0 + row_tok)
        return softmax_step(carry, s, mask, v.astype(jnp.float32),
                            lambda p, vv: jnp.dot(p, vv, preferred_element_type=jnp.float32))

    init = (jnp.full((rows, 1), -1e30, jnp.float32), jnp.zeros((rows, 1), jnp.float32),
            jnp.zeros((rows, d), jnp.float32))
    _, l_sum, acc = lax.fori_loop(0, n_pages, step, init)
    o_ref[...] = (acc / jnp.where(l_sum > 0, l_sum, 1.0)).astype(o_ref.dtype)


def _gpu_kernel(meta_ref: Any, bt_ref: Any, q_ref: Any, kv_ref: Any, o_ref: Any, **kw: Any) -> None:
    def load(pid: Any, head: Any) -> tuple[Any, Any]:
        return kv_ref[pid, 0, head], kv_ref[pid, 1, head]

    _body(meta_ref, bt_ref, q_ref, load, o_ref, **kw)


def _tpu_kernel(meta_ref: Any, bt_ref: Any, q_ref: Any, kv_ref: Any, o_ref: Any, k_buf: Any, v_buf: Any,
                **kw: Any) -> None:
    from jax.experimental.pallas import tpu as pltpu

    def load(pid: Any, head: Any) -> tuple[Any, Any]:
        pltpu.sync_copy(kv_ref.at[pid, 0, head], k_buf)
        pltpu.sync_copy(kv_ref.at[pid, 1, head], v_buf)
        return k_buf[...], v_buf[...]

    _body(meta_ref, bt_ref, q_ref, load, o_ref, **kw)


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def kernel_attention(q: jax.Array, kv_pages: jax.Array, kv_lens: jax.Array, block_tables: jax.Array,
                     cu_q_lens: jax.Array, *, scale: float, soft_cap: float | None, causal: bool,
                     block_q: int, layout: str) -> jax.Array:
    """Ragged paged attention through the Pallas kernel; ``layout`` is
    ``tpu`` (Mosaic: scalar prefetch + DMA) or ``cuda`` (Triton; also what
    the interpret mode runs). Same arguments as the reference path."""
    t, h, d = q.shape
    _, _, kvh, page, _ = kv_pages.shape
    max_pages = block_tables.shape[1]
    wl = work_list(cu_q_lens, kv_lens, t, block_q, causal)
    qp, idx, valid = pack_queries(q * jnp.asarray(scale, q.dtype), wl, block_q, kvh)
    w_count, _, rows, _ = qp.shape
    meta = jnp.stack([wl.seq, wl.pos0, wl.q_count, wl.kv_len], axis=1).reshape(-1).astype(jnp.int32)
    bt = block_tables.reshape(-1).astype(jnp.int32)
    kw = dict(page=page, block_q=block_q, max_pages=max_pages, soft_cap=soft_cap, causal=causal)
    qo_spec = pl.BlockSpec((None, None, rows, d), lambda w, hh, *_: (w, hh, 0, 0))
    out_shape = jax.ShapeDtypeStruct(qp.shape, q.dtype)
    if layout == "tpu":
        from jax.experimental.pallas import tpu as pltpu

        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, grid=(w_count, kvh),
            in_specs=[qo_spec, pl.BlockSpec(memory_space=pl.ANY)], out_specs=qo_spec,
            scratch_shapes=[pltpu.VMEM((page, d), kv_pages.dtype), pltpu.VMEM((page, d), kv_pages.dtype)])
        out = pl.pallas_call(functools.partial(_tpu_kernel, **kw), out_shape=out_shape, grid_spec=grid_spec,
                             name="ragged_paged_attention",
                             compiler_params=pltpu.CompilerParams(
                                 dimension_semantics=("parallel", "arbitrary")))(meta, bt, qp, kv_pages)
    else:
        # Triton blocks must have power-of-two sizes: pad the metadata vectors.
        meta = jnp.pad(meta, (0, _pow2(meta.shape[0]) - meta.shape[0]))
        bt = jnp.pad(bt, (0, _pow2(bt.shape[0]) - bt.shape[0]))
        whole = [pl.BlockSpec(meta.shape, lambda w, hh: (0,)), pl.BlockSpec(bt.shape, lambda w, hh: (0,)),
                 qo_spec, pl.BlockSpec(kv_pages.shape, lambda w, hh: (0, 0, 0, 0, 0))]
        out = pl.pallas_call(functools.partial(_gpu_kernel, **kw), out_shape=out_shape, grid=(w_count, kvh),
                             in_specs=whole, out_specs=qo_spec, name="ragged_paged_attention")(meta, bt, qp, kv_pages)
    return unpack_output(out, idx, valid, t, h)
