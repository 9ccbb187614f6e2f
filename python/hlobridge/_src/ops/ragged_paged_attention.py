"""``hb.ops.ragged_paged_attention``: attention of a ragged batch of queries
(no padding) against a paged KV cache, for torch tensors.

Layout:

- ``queries [T, H, D]``: the query tokens of all sequences back to back;
  sequence ``s`` owns tokens ``cu_q_lens[s] : cu_q_lens[s+1]``.
- ``kv_pages [P, 2, KVH, page_size, D]``: the cache; ``[:, 0]`` keys,
  ``[:, 1]`` values. ``H`` must be a multiple of ``KVH`` (GQA: query head
  ``h`` reads KV head ``h // (H // KVH)``).
- ``context_lens [S]``: each sequence's context length (kv_len), its queries
  included: they are the last ``q_len`` tokens of the context.
- ``block_tables [S, max_pages]``: page ids of each sequence's context, in
  order. Only the first ``ceil(kv_len / page_size)`` entries are read; pages
  may be shared between sequences.

Causal masking inside a sequence (query ``i`` of ``q_len`` sees keys
``0 .. kv_len - q_len + i``), optional ``soft_cap`` (``cap * tanh(s / cap)``
on the scaled scores) and ``scale`` (default ``D ** -0.5``).

Implementations (``impl``):

- ``"reference"``: an XLA program that walks each query block's block-table
  entries and gathers only the pages it needs (see ``_rpa_reference``). The
  default on the CPU runtime. Differentiable: with inputs that require grad
  the call goes through ``call_jax``'s ``jax.vjp`` (gradients for queries and
  ``kv_pages``; the loop then runs to the block-table width, masked).
- ``"pallas"``: the Pallas kernel (``_rpa_kernel``), the default on a
  ``cuda``/``tpu`` runtime; on the CPU runtime it runs in interpret mode (for
  testing). No backward: asking for gradients raises ``ArgumentError``.

Accumulation is float32 whatever the input dtype.
"""

from __future__ import annotations

from typing import Any

import torch

from hlobridge._src.errors import ArgumentError

__all__ = ["ragged_paged_attention"]


def _reference(q: Any, kv: Any, kv_lens: Any, bt: Any, cu: Any, **kw: Any) -> Any:
    from hlobridge._src.ops.rpa_reference import reference_attention

    return reference_attention(q, kv, kv_lens, bt, cu, **kw)


def _pallas(q: Any, kv: Any, kv_lens: Any, bt: Any, cu: Any, *, interpret: bool, **kw: Any) -> Any:
    from hlobridge._src.ops.rpa_kernel import kernel_attention

    if not interpret:
        return kernel_attention(q, kv, kv_lens, bt, cu, **kw)
    from hlobridge._src.pallas import rewrite_pallas_calls

    import jax
    from jax._src import core as jcore

    closed = jax.make_jaxpr(lambda *a: kernel_attention(*a, **kw))(q, kv, kv_lens, bt, cu)
    jaxpr = rewrite_pallas_calls(closed.jaxpr, lambda p: {**p, "interpret": True})
    return jcore.eval_jaxpr(jaxpr, closed.consts, q, kv, kv_lens, bt, cu)[0]


def ragged_paged_attention(queries: torch.Tensor, kv_pages: torch.Tensor, context_lens: torch.Tensor,
                           block_tables: torch.Tensor, cu_q_lens: torch.Tensor, *, scale: float | None = None,
                           soft_cap: float | None = None, causal: bool = True, impl: str = "auto",
                           block_q: int = 16, pages_per_step: int = 8, validate: bool = True) -> torch.Tensor:
    """Attention of ragged ``queries [T, H, D]`` over the paged KV cache
    (see the module docs for the layout). Returns ``[T, H, D]`` in the
    queries' dtype.

    ``impl``: ``"auto"``, ``"reference"`` or ``"pallas"``. ``block_q``: query
    rows per work item (a power of two for the Pallas kernel);
    ``pages_per_step``: pages gathered per loop step of the reference path.
    ``validate`` checks lengths and block-table entries on the host (one
    small device-to-host read); invalid input raises ``ArgumentError``."""
    from hlobridge import _native
    from hlobridge._src.jax_bridge import call_jax

    if queries.dim() != 3 or kv_pages.dim() != 5 or kv_pages.shape[1] != 2:
        raise ArgumentError(f"ragged_paged_attention: want queries [T, H, D] and kv_pages [P, 2, KVH, page, D], "
                            f"got {tuple(queries.shape)} and {tuple(kv_pages.shape)}")
    t, h, d = queries.shape
    n_pages, _, kvh, page, dk = kv_pages.shape
    if dk != d or h % kvh:
        raise ArgumentError(f"ragged_paged_attention: head_dim {d} vs {dk}, or heads {h} not a multiple of "
                            f"kv_heads {kvh}")
    if block_tables.dim() != 2 or context_lens.shape != (block_tables.shape[0],) or \
            cu_q_lens.shape != (block_tables.shape[0] + 1,):
        raise ArgumentError(f"ragged_paged_attention: want context_lens [S], block_tables [S, max_pages], "
                            f"cu_q_lens [S+1]; got {tuple(context_lens.shape)}, {tuple(block_tables.shape)}, "
                            f"{tuple(cu_q_lens.shape)}")
    if block_q < 1 or block_q & (block_q - 1):
        raise ArgumentError(f"ragged_paged_attention: block_q must be a power of two, got {block_q}")
    kv_lens, bt, cu = (x.to(torch.int32).contiguous() for x in (context_lens, block_tables, cu_q_lens))
    if validate:
        _validate(t, n_pages, page, kv_lens, bt, cu)
    platform = _native.runtime().platform
    if impl == "auto":
        impl = "pallas" if platform in ("cuda", "tpu") else "reference"
    wants_grad = torch.is_grad_enabled() and (queries.requires_grad or kv_pages.requires_grad)
    common: dict[str, Any] = dict(scale=float(d ** -0.5 if scale is None else scale),
                                  soft_cap=None if soft_cap is None else float(soft_cap), causal=bool(causal),
                                  block_q=int(block_q))
    if impl == "reference":
        return call_jax(_reference, queries, kv_pages, kv_lens, bt, cu, pages_per_step=int(pages_per_step),
                           differentiable=wants_grad, **common)
    if impl != "pallas":
        raise ArgumentError(f"ragged_paged_attention: impl must be 'auto', 'reference' or 'pallas', got {impl!r}")
    if wants_grad:
        raise ArgumentError("ragged_paged_attention: the Pallas kernel has no backward; for gradients use "
                            "impl='reference' (differentiable through call_jax), or call under torch.no_grad()")
    target = "tpu" if platform == "tpu" else "cuda"
    return call_jax(_pallas, queries, kv_pages, kv_lens, bt, cu, interpret=platform not in ("cuda", "tpu"),
                       layout=target, **common)


def _validate(t: int, n_pages: int, page: int, kv_lens: torch.Tensor, bt: torch.Tensor, cu: torch.Tensor) -> None:
    cu_h, kv_h, bt_h = cu.cpu(), kv_lens.cpu(), bt.cpu()
    q_len = cu_h[1:] - cu_h[:-1]
    problems = []
    if int(cu_h[0]) != 0 or int(cu_h[-1]) != t or bool((q_len < 0).any()):
        problems.append(f"cu_q_lens must rise from 0 to {t} (got {cu_h.tolist()[:8]}...)")
    if bool((kv_h < q_len).any()):
        problems.append("every context_len must be >= its sequence's query count")
    if bool((kv_h > bt_h.shape[1] * page).any()):
        problems.append(f"a context_len exceeds max_pages * page_size = {bt_h.shape[1] * page}")
    needed = torch.arange(bt_h.shape[1])[None, :] < ((kv_h + page - 1) // page)[:, None]
    if bool(((bt_h < 0) | (bt_h >= n_pages))[needed].any()):
        problems.append(f"block_tables holds page ids outside [0, {n_pages}) among the pages in use")
    if problems:
        raise ArgumentError("ragged_paged_attention: " + "; ".join(problems))
