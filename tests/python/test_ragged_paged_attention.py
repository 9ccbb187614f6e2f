"""``hb.ops.ragged_paged_attention`` against naive padded attention.

Every test draws a fresh random ragged batch (HLOBRIDGE_TEST_SEED replays one;
the seed is printed on failure) with context lengths 1, page_size - 1,
page_size, page_size + 1 and a long tail, query counts from 1 (decode) to the
whole context (prefill), shuffled block tables and pages shared between
sequences. The reference is padded attention in float64 torch (pad to the
longest sequence, mask, softmax); float32 results must agree within
rtol=1e-4, atol=2e-5, gradients within rtol=1e-3, atol=1e-4.

Run:  .venv/bin/python -m pytest -W error tests/python/test_ragged_paged_attention.py -q
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import pytest
import torch

import hlobridge as hb
from hlobridge._src.ops.rpa_kernel import kernel_attention
from hlobridge.pallas import trace_pallas

from pallas_helpers import check_snapshot, structure

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
PAGE = 16
TOL = dict(rtol=1e-4, atol=2e-5)


def ragged_batch(gen: torch.Generator, heads: int, kv_heads: int, d: int = 32, long_tail: int = 300):
    """(queries, kv_pages, kv_lens, block_tables, cu_q_lens) with the edge cases
    of the module docs. Pages are drawn shuffled from a pool; the second
    sequence reuses the first sequence's first page (shared prefix)."""
    kv_lens = [1, PAGE - 1, PAGE, PAGE + 1, 2 * PAGE + 3, long_tail]
    q_lens = [1, PAGE - 1, 1, int(torch.randint(1, PAGE + 2, (1,), generator=gen)), 2 * PAGE + 3,
              int(torch.randint(1, 40, (1,), generator=gen))]
    pages_per_seq = [-(-n // PAGE) for n in kv_lens]
    max_pages = max(pages_per_seq) + 1
    n_pages = sum(pages_per_seq) + 7
    perm = torch.randperm(n_pages, generator=gen)
    bt = torch.full((len(kv_lens), max_pages), -1, dtype=torch.int32)  # unused slots: never needed
    k = 0
    for s, n in enumerate(pages_per_seq):
        bt[s, :n] = perm[k:k + n]
        k += n
    bt[1, 0] = bt[0, 0]  # shared page (sequence 1 sees sequence 0's one-token context first)
    cu = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    q = torch.randn(int(cu[-1]), heads, d, generator=gen)
    kv = torch.randn(n_pages, 2, kv_heads, PAGE, d, generator=gen)
    return q, kv, torch.tensor(kv_lens, dtype=torch.int32), bt, cu


def padded_attention(q, kv, kv_lens, bt, cu, scale, soft_cap=None, causal=True):
    """Naive padded attention in float64: pad every sequence to the longest
    query count / context, mask, softmax, then un-pad."""
    t, h, d = q.shape
    kvh, page = kv.shape[2], kv.shape[3]
    s_count = len(kv_lens)
    q_lens = (cu[1:] - cu[:-1]).tolist()
    mq, mk = max(q_lens), int(kv_lens.max())
    qp = torch.zeros(s_count, mq, h, d, dtype=torch.float64)
    kp = torch.zeros(s_count, mk, kvh, d, dtype=torch.float64)
    vp = torch.zeros_like(kp)
    for s in range(s_count):
        n = -(-int(kv_lens[s]) // page)
        pages = kv[bt[s, :n].long()].double()                    # [n, 2, KVH, page, D]
        kvs = pages.permute(1, 0, 3, 2, 4).reshape(2, n * page, kvh, d)[:, :int(kv_lens[s])]
        kp[s, :kvs.shape[1]], vp[s, :kvs.shape[1]] = kvs[0], kvs[1]
        qp[s, :q_lens[s]] = q[int(cu[s]):int(cu[s + 1])].double()
    g = h // kvh
    kr, vr = kp.repeat_interleave(g, 2), vp.repeat_interleave(g, 2)
    sc = torch.einsum("sqhd,skhd->shqk", qp * scale, kr)
    if soft_cap is not None:
        sc = soft_cap * torch.tanh(sc / soft_cap)
    kpos = torch.arange(mk)[None, None, :]
    qpos = (kv_lens[:, None] - torch.tensor(q_lens)[:, None] + torch.arange(mq)[None, :])[:, :, None]
    mask = kpos < kv_lens[:, None, None]
    if causal:
        mask = mask & (kpos <= qpos)
    sc = sc.masked_fill(~mask[:, None], float("-inf"))
    p = torch.nan_to_num(sc.softmax(-1))                         # padded query rows: all masked
    o = torch.einsum("shqk,skhd->sqhd", p, vr)
    return torch.cat([o[s, :q_lens[s]] for s in range(s_count)]).to(q.dtype)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(SEED)


def close(a, b, **tol):
    torch.testing.assert_close(a, b, **(tol or TOL), msg=lambda m: f"seed={SEED}: {m}")


CASES = [  # (impl, heads, kv_heads, soft_cap, causal, block_q)
    ("reference", 4, 4, None, True, 16),
    ("reference", 8, 2, 20.0, True, 8),
    ("reference", 4, 1, None, False, 16),
    ("pallas", 8, 2, None, True, 16),
    ("pallas", 4, 4, 10.0, True, 8),
]


@pytest.mark.parametrize("impl,heads,kv_heads,soft_cap,causal,block_q", CASES)
def test_matches_padded_attention(gen, impl, heads, kv_heads, soft_cap, causal, block_q):
    q, kv, kv_lens, bt, cu = ragged_batch(gen, heads, kv_heads)
    scale = 0.7 / q.shape[-1] ** 0.5
    out = hb.ops.ragged_paged_attention(q, kv, kv_lens, bt, cu, scale=scale, soft_cap=soft_cap, causal=causal,
                                        impl=impl, block_q=block_q, pages_per_step=2)
    assert out.shape == q.shape and out.dtype == q.dtype
    close(out, padded_attention(q, kv, kv_lens, bt, cu, scale, soft_cap, causal))


def test_default_scale_and_int64_metadata(gen):
    q, kv, kv_lens, bt, cu = ragged_batch(gen, 4, 2)
    out = hb.ops.ragged_paged_attention(q, kv, kv_lens.long(), bt.long(), cu.long())
    close(out, padded_attention(q, kv, kv_lens, bt, cu, q.shape[-1] ** -0.5))


def test_gradients_match_padded_attention(gen):
    q, kv, kv_lens, bt, cu = ragged_batch(gen, 4, 2, d=16, long_tail=70)
    q1, kv1 = q.clone().requires_grad_(), kv.clone().requires_grad_()
    out = hb.ops.ragged_paged_attention(q1, kv1, kv_lens, bt, cu, soft_cap=15.0, pages_per_step=2)
    w = torch.randn(out.shape, generator=gen)
    (out * w).sum().backward()
    q2, kv2 = q.double().requires_grad_(), kv.double().requires_grad_()
    ref = padded_attention(q2, kv2, kv_lens, bt, cu, q.shape[-1] ** -0.5, 15.0)
    (ref * w.double()).sum().backward()
    close(out.detach(), ref.detach().float())
    close(q1.grad, q2.grad.float(), rtol=1e-3, atol=1e-4)
    close(kv1.grad, kv2.grad.float(), rtol=1e-3, atol=1e-4)  # shared page: both sequences' grads add up


def test_errors(gen):
    q, kv, kv_lens, bt, cu = ragged_batch(gen, 4, 2)
    with pytest.raises(hb.ArgumentError, match="no backward"):
        hb.ops.ragged_paged_attention(q.requires_grad_(), kv, kv_lens, bt, cu, impl="pallas")
    q = q.detach()
    bad = bt.clone()
    bad[5, 0] = kv.shape[0]
    with pytest.raises(hb.ArgumentError, match="page ids outside"):
        hb.ops.ragged_paged_attention(q, kv, kv_lens, bad, cu)
    with pytest.raises(hb.ArgumentError, match=">= its sequence's query count"):
        hb.ops.ragged_paged_attention(q, kv, torch.ones_like(kv_lens), bt, cu)
    with pytest.raises(hb.ArgumentError, match="multiple of kv_heads"):
        hb.ops.ragged_paged_attention(q[:, :3], kv, kv_lens, bt, cu)


@pytest.mark.parametrize("target", ["tpu", "cuda"])
def test_kernel_lowers_for_accelerators(target):
    """The Pallas kernel cross-lowers to one custom call whose operands are the
    packed metadata, the packed queries and the untouched KV cache."""
    s = jax.ShapeDtypeStruct
    t, h, kvh, d, page, pages, seqs, max_pages = 50, 8, 2, 64, 16, 30, 3, 7
    args = [s((t, h, d), jnp.float32), s((pages, 2, kvh, page, d), jnp.float32), s((seqs,), jnp.int32),
            s((seqs, max_pages), jnp.int32), s((seqs + 1,), jnp.int32)]
    seg = trace_pallas(kernel_attention, *args, target=target, scale=0.125, soft_cap=30.0, causal=True,
                       block_q=16, layout=target, name="ragged_paged_attention")
    (k,) = seg.kernels
    assert k.name == "ragged_paged_attention" and k.target == target
    assert k.operand_types[-1] == f"tensor<{pages}x2x{kvh}x{page}x{d}xf32>"
    assert seg.output_types == (f"tensor<{t}x{h}x{d}xf32>",)
    check_snapshot(f"rpa_{target}_{k.backend}", structure(seg.module_text))
