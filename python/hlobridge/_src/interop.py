"""Zero-copy conversions between torch tensors and JAX arrays via DLPack.

Both directions share memory when the producer's buffer is acceptable to the
consumer as is; JAX copies CPU tensors that are not suitably aligned (torch's
CPU allocations are 64-byte aligned, so fresh tensors are shared).
"""

from __future__ import annotations

from typing import cast

import jax
import jax.dlpack
from torch import Tensor
from torch.utils.dlpack import from_dlpack

__all__ = ["pt_to_jax", "jax_to_pt"]


def pt_to_jax(t: Tensor) -> jax.Array:
    """A JAX array sharing ``t``'s memory (``t`` must be contiguous and must
    not require grad; detach it first)."""
    return cast(jax.Array, jax.dlpack.from_dlpack(t))


def jax_to_pt(a: jax.Array) -> Tensor:
    """A torch tensor sharing ``a``'s buffer."""
    return from_dlpack(a)
