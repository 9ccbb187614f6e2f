"""``aten._native_multi_head_attention`` spelled out in core aten ops.

``nn.MultiheadAttention`` takes its "fast path" at inference (``eval()``
under ``no_grad``, ``batch_first=True``, self-attention, e.g. every encoder
block of torchvision's ViT), which calls this fused op. torch_xla has no
lowering for it and torch registers no decomposition, so without this entry
such a model fails to compile (``UnsupportedOpError``). The formula is the
one of the CPU kernel (``aten/src/ATen/native/transformers/attention.cpp``):
one input projection split in three, the query scaled by ``1/sqrt(head
dim)`` before ``q @ kᵀ``, a masked softmax and the output projection.

Masks, as ``MultiheadAttention.merge_masks`` hands them over:
``mask_type`` 0 is an ``(L, S)`` attention mask, 1 a ``(B, S)`` key
padding mask, 2 both merged to ``(B, heads, L, S)``. A boolean mask marks
the positions to leave out; a float mask is added to the scores.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F


def _native_multi_head_attention(
        query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, embed_dim: int,
        num_head: int, qkv_weight: torch.Tensor, qkv_bias: torch.Tensor,
        proj_weight: torch.Tensor, proj_bias: torch.Tensor, mask: torch.Tensor | None = None,
        need_weights: bool = True, average_attn_weights: bool = True,
        mask_type: int | None = None) -> tuple[torch.Tensor, Any]:
    b, lq, e = query.shape
    s = key.shape[1]
    hd = embed_dim // num_head
    w_q, w_k, w_v = qkv_weight.split(embed_dim, dim=0)
    b_q, b_k, b_v = qkv_bias.split(embed_dim, dim=0)

    def heads(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, n: int) -> torch.Tensor:
        return F.linear(x, w, bias).reshape(b, n, num_head, hd).transpose(1, 2)

    q = heads(query, w_q, b_q, lq) * (1.0 / math.sqrt(hd))
    k = heads(key, w_k, b_k, s)
    v = heads(value, w_v, b_v, s)
    scores = q @ k.transpose(-2, -1)  # (B, heads, L, S)
    if mask is not None:
        if mask_type == 1 or (mask_type is None and mask.dim() == 2 and mask.shape[0] == b
                              and mask.shape != (lq, s)):
            m = mask.reshape(b, 1, 1, s)
        else:
            m = mask
        if m.dtype == torch.bool:
            scores = scores.masked_fill(m, float("-inf"))
        else:
            scores = scores + m.to(scores.dtype)
    attn = torch.softmax(scores, dim=-1)
    out = (attn @ v).transpose(1, 2).reshape(b, lq, e)
    out = F.linear(out, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    return out, (attn.mean(dim=1) if average_attn_weights else attn)


def attention_decompositions() -> dict[Any, Any]:
    """The entries this module adds to the backend's decomposition table."""
    return {torch.ops.aten._native_multi_head_attention.default: _native_multi_head_attention}
