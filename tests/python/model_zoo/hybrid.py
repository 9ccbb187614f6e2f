"""Hybrid zoo rows: one model per family with JAX doing real work inside
it (``model_zoo/jax_pieces.py``), run through ``torch.compile`` inference
and training and through ``compile_train_step`` with an Optax optimizer
(``hb.optim.JaxOptimizer``), each compared with the eager *torch* original
(the JAX pieces mirror the torch modules they replace).

- ``hf-llama+jax`` (decoder LMs): every ``LlamaRMSNorm`` in JAX, attention
  as a Pallas kernel (registered as a ``transformers`` attention
  implementation);
- ``hf-bert+jax`` (encoders): every LayerNorm and GELU in JAX, attention
  as the Pallas kernel (with BERT's padding mask);
- ``tv-convnext+jax`` (torchvision CNNs): the ConvNeXt blocks' LayerNorm
  and GELU in JAX;
- ``timm-vit+jax`` (timm): attention as the Pallas kernel, LayerNorms and
  GELUs in JAX.

The Optax step is ``optax.adamw(lr, weight_decay=0.01)`` then
``optax.apply_updates``, against ``torch.optim.AdamW`` (the same update).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from model_zoo.jax_pieces import (JaxGELU, JaxLayerNorm, JaxRMSNorm, JaxTimmAttention,
                                  register_hf_attention, swap)
from model_zoo.spec import ZooModel

__all__ = ["HYBRIDS", "HybridModel", "OPTAX_WEIGHT_DECAY", "optax_adamw"]

OPTAX_WEIGHT_DECAY = 0.01


@dataclass(frozen=True)
class HybridModel:
    """A zoo model with torch modules swapped for JAX ones."""

    name: str
    base: ZooModel
    pieces: str
    """What runs in JAX, in words (for docs/models.md)."""
    apply: Callable[[torch.nn.Module], int]
    """Swaps the JAX pieces into a built model in place; returns how many
    modules it swapped."""
    jax_fns: tuple[str, ...]
    """The JAX functions that must show up as segments of the programs
    hlobridge runs (checked on the receipts)."""


def optax_adamw(lr: float) -> Any:
    """``hb.optim.JaxOptimizer`` running ``optax.adamw`` then
    ``optax.apply_updates``. The Optax state travels as its list of leaves:
    ``call_jax`` under tracing returns arrays in tuples, lists and dicts
    only, and Optax states are named tuples (``ScaleByAdamState``)."""
    import jax
    import optax

    import hlobridge as hb

    tx = optax.adamw(lr, weight_decay=OPTAX_WEIGHT_DECAY)
    treedef: list[Any] = []

    def init(params: Any) -> Any:
        leaves, tree = jax.tree_util.tree_flatten(tx.init(params))
        treedef[:] = [tree]
        return leaves

    def update(params: Any, grads: Any, leaves: Any) -> tuple[Any, Any]:
        state = jax.tree_util.tree_unflatten(treedef[0], leaves)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), jax.tree_util.tree_leaves(state)

    return hb.optim.JaxOptimizer(init, update)


def _is(cls: type) -> Callable[[torch.nn.Module], bool]:
    return lambda m: type(m) is cls


def _llama(model: torch.nn.Module) -> int:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    model.set_attn_implementation(register_hf_attention())  # type: ignore[operator]
    return swap(model, _is(LlamaRMSNorm), JaxRMSNorm)


def _bert(model: torch.nn.Module) -> int:
    from transformers.activations import GELUActivation

    model.set_attn_implementation(register_hf_attention())  # type: ignore[operator]
    n = swap(model, _is(torch.nn.LayerNorm), JaxLayerNorm)
    return n + swap(model, _is(GELUActivation), lambda _: JaxGELU())


def _convnext(model: torch.nn.Module) -> int:
    # Exactly nn.LayerNorm: the blocks' channels-last norms (the stem's and
    # the downsamplers' LayerNorm2d stay torch).
    n = swap(model, _is(torch.nn.LayerNorm), JaxLayerNorm)
    return n + swap(model, _is(torch.nn.GELU), lambda _: JaxGELU())


def _timm_vit(model: torch.nn.Module) -> int:
    from timm.layers import LayerNorm, Mlp
    from timm.models.vision_transformer import Attention

    n = swap(model, _is(Attention), JaxTimmAttention)
    n += swap(model, _is(LayerNorm), JaxLayerNorm)  # timm's: F.layer_norm, last axis
    gelus = [m for m in model.modules() if isinstance(m, Mlp)]
    for mlp in gelus:
        assert type(mlp.act) is torch.nn.GELU
        mlp.act = JaxGELU()
    return n + len(gelus)


def _hybrids() -> list[HybridModel]:
    from model_zoo import by_name

    return [
        HybridModel("hf-llama+jax", by_name("hf-llama"),
                    "RMSNorm (JAX), attention (Pallas kernel)", _llama,
                    ("jax_rms_norm", "jax_attention")),
        HybridModel("hf-bert+jax", by_name("hf-bert"),
                    "LayerNorm, GELU (JAX), attention with padding mask (Pallas kernel)",
                    _bert, ("jax_layer_norm", "jax_gelu", "jax_attention")),
        HybridModel("tv-convnext+jax", by_name("tv-convnext_tiny"),
                    "the blocks' LayerNorm and GELU (JAX)", _convnext,
                    ("jax_layer_norm", "jax_gelu")),
        HybridModel("timm-vit+jax", by_name("timm-vit"),
                    "attention (Pallas kernel), LayerNorm, GELU (JAX)", _timm_vit,
                    ("jax_attention", "jax_layer_norm", "jax_gelu")),
    ]


HYBRIDS: list[HybridModel] = _hybrids()
