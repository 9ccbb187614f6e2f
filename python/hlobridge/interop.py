"""Zero-copy conversions between torch tensors and JAX arrays via DLPack.

Both directions share memory when the producer's buffer is acceptable to the
consumer as is; JAX copies CPU tensors that are not suitably aligned (torch's
CPU allocations are 64-byte aligned, so fresh tensors are shared).
"""

from __future__ import annotations

import jax
import torch

__all__ = ["pt_to_jax", "jax_to_pt"]


def pt_to_jax(t: torch.Tensor) -> jax.Array:
    """A JAX array sharing ``t``'s memory (``t`` must be contiguous and must
    not require grad; detach it first)."""
    return jax.dlpack.from_dlpack(t)


def jax_to_pt(a: jax.Array) -> torch.Tensor:
    """A torch tensor sharing ``a``'s buffer."""
    return torch.from_dlpack(a)
