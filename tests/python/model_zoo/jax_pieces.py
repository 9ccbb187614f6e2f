"""JAX pieces that replace parts of zoo models for the hybrid rows: each is
a torch module whose forward runs JAX through ``hb.call_jax`` and mirrors
the torch module it replaces (same parameters, same names, same math), so
the hybrid model can be compared with the eager torch original.

- :class:`JaxRMSNorm`: Llama's ``LlamaRMSNorm`` (float32 statistics);
- :class:`JaxLayerNorm`: ``nn.LayerNorm`` over the last axis;
- :class:`JaxGELU`: the exact (erf) GELU of ``nn.GELU``/HF ``"gelu"``;
- :func:`pallas_attention`: softmax attention as a Pallas kernel (one
  program per batch row and head; interpret mode on the CPU plugin) with a
  ``jax.custom_vjp`` whose backward is plain ``jax.numpy``. It serves Hugging
  Face models as a registered attention implementation
  (:func:`register_hf_attention`) and timm's ViT through
  :class:`JaxTimmAttention`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl

import hlobridge as hb

__all__ = ["JaxGELU", "JaxLayerNorm", "JaxRMSNorm", "JaxTimmAttention", "HF_ATTENTION",
           "pallas_attention", "register_hf_attention", "swap"]

HF_ATTENTION = "hlobridge_pallas"
"""The name the Pallas attention is registered under in ``transformers``."""


# -- norms and activations ----------------------------------------------------


def jax_rms_norm(x: jax.Array, w: jax.Array, eps: float) -> jax.Array:
    h = x.astype(jnp.float32)
    h = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + eps)
    return w * h.astype(x.dtype)


def jax_layer_norm(x: jax.Array, w: jax.Array, b: jax.Array, eps: float) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * w + b


def jax_gelu(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=False)


class JaxRMSNorm(torch.nn.Module):
    """``LlamaRMSNorm`` in JAX (the weight stays a torch parameter)."""

    def __init__(self, orig: torch.nn.Module) -> None:
        super().__init__()
        self.weight = orig.weight
        self.eps = float(orig.variance_epsilon)  # type: ignore[arg-type]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return hb.call_jax(jax_rms_norm, x, self.weight, self.eps)  # type: ignore[no-any-return]


class JaxLayerNorm(torch.nn.Module):
    """``nn.LayerNorm`` over the last axis, in JAX."""

    def __init__(self, orig: torch.nn.LayerNorm) -> None:
        super().__init__()
        assert len(orig.normalized_shape) == 1 and orig.elementwise_affine
        self.weight, self.bias = orig.weight, orig.bias
        self.eps = float(orig.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return hb.call_jax(jax_layer_norm, x, self.weight, self.bias,  # type: ignore[no-any-return]
                           self.eps)


class JaxGELU(torch.nn.Module):
    """The exact GELU, in JAX."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return hb.call_jax(jax_gelu, x)  # type: ignore[no-any-return]


def swap(model: torch.nn.Module, match: Callable[[torch.nn.Module], bool],
         make: Callable[[Any], torch.nn.Module]) -> int:
    """Replace every submodule for which ``match`` holds by ``make(it)``, in
    place (parameter names and order are kept); returns how many."""
    hits = [(name, m) for name, m in model.named_modules() if name and match(m)]
    for name, m in hits:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, make(m))
    return len(hits)


# -- attention: a Pallas kernel -------------------------------------------------


def _attention_kernel(q_ref: Any, k_ref: Any, v_ref: Any, mask_ref: Any, o_ref: Any, *,
                      scale: float) -> None:
    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    s = jnp.dot(q, k.T, preferred_element_type=jnp.float32) * scale + mask_ref[...]
    p = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    p = p / jnp.sum(p, axis=-1, keepdims=True)
    o_ref[...] = jnp.dot(p.astype(v.dtype), v,
                         preferred_element_type=jnp.float32).astype(o_ref.dtype)


def _attention_pallas(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                      scale: float) -> jax.Array:
    b, h, s, d = q.shape
    t = k.shape[2]

    def head(bi: Any, hi: Any) -> tuple[Any, ...]:
        return (bi, hi, 0, 0)

    def mask_block(bi: Any, hi: Any) -> tuple[Any, ...]:
        return (bi, 0, 0, 0)

    return pl.pallas_call(  # type: ignore[no-any-return]
        functools.partial(_attention_kernel, scale=scale),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(b, h),
        in_specs=[pl.BlockSpec((None, None, s, d), head),
                  pl.BlockSpec((None, None, t, d), head),
                  pl.BlockSpec((None, None, t, d), head),
                  pl.BlockSpec((None, None, s, t), mask_block)],
        out_specs=pl.BlockSpec((None, None, s, d), head),
    )(q, k, v, mask)


def _attention_reference(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                         scale: float) -> jax.Array:
    s = jnp.einsum("bhsd,bhtd->bhst", q, k) * scale + mask
    return jnp.einsum("bhst,bhtd->bhsd", jax.nn.softmax(s, axis=-1), v)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
               scale: float) -> jax.Array:
    return _attention_pallas(q, k, v, mask, scale)


def _attention_fwd(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: float
                   ) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    return _attention_pallas(q, k, v, mask, scale), (q, k, v, mask)


def _attention_bwd(scale: float, res: tuple[jax.Array, ...], g: jax.Array
                   ) -> tuple[jax.Array, ...]:
    _, vjp = jax.vjp(functools.partial(_attention_reference, scale=scale), *res)
    return vjp(g)  # type: ignore[no-any-return]


_attention.defvjp(_attention_fwd, _attention_bwd)


def jax_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, scale: float,
                  n_rep: int) -> jax.Array:
    """``q`` [B, H, S, D], ``k``/``v`` [B, H/n_rep, T, D] (grouped-query
    heads are repeated here), ``mask`` additive [B, 1, S, T]; returns
    [B, S, H, D]."""
    if n_rep > 1:
        k, v = jnp.repeat(k, n_rep, axis=1), jnp.repeat(v, n_rep, axis=1)
    mask = jnp.broadcast_to(mask, (q.shape[0], 1, q.shape[2], k.shape[2])).astype(q.dtype)
    return jnp.swapaxes(_attention(q, k, v, mask, scale), 1, 2)


def pallas_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """Softmax attention through the Pallas kernel, on torch tensors (see
    :func:`jax_attention`); ``mask`` None means no mask."""
    if mask is None:
        mask = query.new_zeros(query.shape[0], 1, query.shape[2], key.shape[2])
    elif mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill(
            ~mask, torch.finfo(query.dtype).min)
    n_rep = query.shape[1] // key.shape[1]
    return hb.call_jax(jax_attention, query, key, value,  # type: ignore[no-any-return]
                       mask.to(query.dtype), float(scale), n_rep)


def _hf_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                  value: torch.Tensor, attention_mask: torch.Tensor | None,
                  scaling: float | None = None, dropout: float = 0.0, **_: Any
                  ) -> tuple[torch.Tensor, None]:
    assert dropout == 0.0 or not module.training, "the zoo runs without dropout"
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    return pallas_attention(query, key, value, attention_mask, scale), None


def register_hf_attention() -> str:
    """Register the Pallas attention with ``transformers`` (and eager's
    additive mask for it); returns its name, for
    ``model.set_attn_implementation``."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    AttentionInterface.register(HF_ATTENTION, _hf_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(HF_ATTENTION, eager_mask)
    return HF_ATTENTION


class JaxTimmAttention(torch.nn.Module):
    """timm's ViT ``Attention`` with its softmax attention in the Pallas
    kernel (``qkv`` and ``proj`` stay torch linears, with their names)."""

    def __init__(self, orig: Any) -> None:
        super().__init__()
        assert orig.gate is None, "gated attention is not mirrored"
        self.num_heads, self.head_dim, self.scale = orig.num_heads, orig.head_dim, orig.scale
        self.attn_dim = orig.attn_dim
        self.qkv, self.q_norm, self.k_norm = orig.qkv, orig.q_norm, orig.k_norm
        self.norm, self.proj = orig.norm, orig.proj

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None,
                is_causal: bool = False) -> torch.Tensor:
        assert attn_mask is None and not is_causal, "ViT attention is unmasked"
        b, n, _ = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        out = pallas_attention(q, k, v, None, self.scale)  # [B, N, H, D]
        return self.proj(self.norm(out.reshape(b, n, self.attn_dim)))
