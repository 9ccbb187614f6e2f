"""Fused operators for torch tensors built on hlobridge (JAX/Pallas inside).

- :func:`ragged_paged_attention`: attention over a ragged batch of queries
  against a paged KV cache.
"""

from __future__ import annotations

from hlobridge._src.ops.ragged_paged_attention import ragged_paged_attention

__all__ = ["ragged_paged_attention"]
