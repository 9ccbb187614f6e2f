"""PyTorch inside JAX: :func:`call_torch` and :func:`torch_module` (see
``docs/call_torch.md``).

One concept per module:

- :mod:`~hlobridge._src.call_torch.capture`: a torch function traced
  (``make_fx``) and lowered with the ``torch.compile`` backend's pieces into
  one StableHLO module per input signature, cached;
- :mod:`~hlobridge._src.call_torch.embed`: that module embedded into the JAX
  program being traced (``jax.export.Exported.call``, inlined by XLA), with
  ``jax.vmap`` by re-capture;
- :mod:`~hlobridge._src.call_torch.vjp`: ``jax.grad`` through a
  ``custom_vjp`` whose backward is the torch backward, captured the same way;
- :mod:`~hlobridge._src.call_torch.call`: ``hb.call_torch`` (pytrees, static
  arguments, the per-function cache);
- :mod:`~hlobridge._src.call_torch.module`: ``hb.torch_module`` (parameters
  as a dict of JAX arrays, mutated buffers as outputs).
"""

from hlobridge._src.call_torch.call import call_torch
from hlobridge._src.call_torch.capture import clear, stats
from hlobridge._src.call_torch.module import torch_module

__all__ = ["call_torch", "clear", "stats", "torch_module"]
