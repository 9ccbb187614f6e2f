"""Real-size models for ``make bench-real`` (issue #25): random weights from
the real configurations, at the batch sizes the issue names.

Each :class:`RealModel` builds its module, its inputs and its loss; all
dropout (and stochastic depth) is off so that every path computes the same
function (the loss of eager, inductor and hlobridge is compared on the first
step). Weights and batches come from ``torch.manual_seed(SEED)`` in each
worker process, so every path starts from identical values.

Models (``NAMES``): BERT-base (b8x128, 2-label classification head), GPT-2
124M (b4x128 language modelling), GPT-2's decode step (one new token at
position 128 into a static KV cache, inference only), a Llama-architecture
model of about 150M (hidden 768, 12 layers, 12 heads, intermediate 2048,
vocabulary 32000; b4x128), ViT-B/16, ResNet-50, ConvNeXt-T and
MobileNetV3-Large (b8x224x224, 1000 classes; torchvision).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["NAMES", "SEED", "RealModel", "get"]

SEED = 20251127
SEQ = 128
IMG = 224


@dataclass
class RealModel:
    """One real-size model. ``logits(model, *inputs)`` is the inference
    call, ``loss(model, *inputs, target)`` the training loss; ``paths``
    the paths it is timed on; ``prepare(model, inputs)`` runs once in
    eager before compiling (the decode step fills its KV cache there) and
    returns the inputs to use."""

    name: str
    config: str
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[], tuple[Any, ...]]
    target: Callable[[tuple[Any, ...]], torch.Tensor]
    logits: Callable[..., torch.Tensor]
    paths: tuple[str, ...] = ("infer", "train")
    prepare: Callable[[torch.nn.Module, tuple[Any, ...]], tuple[Any, ...]] | None = None
    notes: list[str] = field(default_factory=list)

    def loss(self, model: torch.nn.Module, *batch: Any) -> torch.Tensor:
        *xs, y = batch
        out = self.logits(model, *xs)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))


def _hf(config_cls: str, model_cls: str, **cfg: Any) -> Callable[[], torch.nn.Module]:
    def build() -> torch.nn.Module:
        import transformers

        config = getattr(transformers, config_cls)(**cfg)
        return getattr(transformers, model_cls)(config)

    return build


def _tokens(batch: int, vocab: int, n: int = SEQ) -> torch.Tensor:
    return torch.randint(3, vocab, (batch, n))


_GPT2 = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
_BERT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=2)
_LLAMA = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
              num_key_value_heads=12, intermediate_size=2048, vocab_size=32000,
              max_position_embeddings=2048, attention_dropout=0.0)


def _decode_prepare(model: torch.nn.Module, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Fill a static KV cache with the 128-token prompt (eager), then the
    timed call is one token at position 128; every call writes the same
    slot, so the work per call is constant."""
    from transformers import StaticCache

    prompt, token = inputs
    cache = StaticCache(config=model.config, max_cache_len=2 * SEQ)
    with torch.no_grad():
        model(input_ids=prompt, past_key_values=cache, use_cache=True,
              cache_position=torch.arange(SEQ))
    return token, cache, torch.tensor([SEQ])


def _decode_logits(m: Any, token: torch.Tensor, cache: Any, pos: torch.Tensor) -> torch.Tensor:
    return m(input_ids=token, past_key_values=cache, use_cache=True,  # type: ignore[no-any-return]
             cache_position=pos).logits


def _vision(name: str, fn: str, **kw: Any) -> RealModel:
    def build() -> torch.nn.Module:
        import torchvision.models as tvm

        model: torch.nn.Module = getattr(tvm, fn)(weights=None, **kw)
        head = getattr(getattr(model, "heads", None), "head", None)
        if isinstance(head, torch.nn.Linear):
            # torchvision zero-initializes ViT's classifier head: every logit
            # would be 0 and the agreement check empty.
            torch.nn.init.normal_(head.weight, std=0.02)
        return model

    args = ", ".join(f"{k}={v}" for k, v in kw.items())
    return RealModel(name=name, config=f"torchvision.models.{fn}({args}), b8x3x{IMG}x{IMG}",
                     build=build, inputs=lambda: (torch.randn(8, 3, IMG, IMG),),
                     target=lambda b: torch.randint(0, 1000, (8,)),
                     logits=lambda m, x: m(x))


_MODELS = [
    RealModel(name="bert-base", config="BertConfig() (base), 2 labels, b8x128",
              build=_hf("BertConfig", "BertForSequenceClassification", **_BERT),
              inputs=lambda: (_tokens(8, 30522), torch.ones(8, SEQ, dtype=torch.long)),
              target=lambda b: torch.randint(0, 2, (8,)),
              logits=lambda m, x, mask: m(input_ids=x, attention_mask=mask).logits),
    RealModel(name="gpt2", config="GPT2Config() (124M), b4x128",
              build=_hf("GPT2Config", "GPT2LMHeadModel", **_GPT2),
              inputs=lambda: (_tokens(4, 50257),),
              target=lambda b: torch.roll(b[0], -1, dims=1),
              logits=lambda m, x: m(input_ids=x, use_cache=False).logits),
    RealModel(name="gpt2-decode",
              config="GPT2Config() (124M), b4, one token at position 128, StaticCache(256)",
              build=_hf("GPT2Config", "GPT2LMHeadModel", **_GPT2),
              inputs=lambda: (_tokens(4, 50257), _tokens(4, 50257, 1)),
              target=lambda b: torch.zeros(4, dtype=torch.long),
              logits=_decode_logits, paths=("infer",), prepare=_decode_prepare),
    RealModel(name="llama-150m",
              config="LlamaConfig(hidden 768, 12 layers, 12 heads, intermediate 2048, "
                     "vocab 32000), b4x128",
              build=_hf("LlamaConfig", "LlamaForCausalLM", **_LLAMA),
              inputs=lambda: (_tokens(4, 32000),),
              target=lambda b: torch.roll(b[0], -1, dims=1),
              logits=lambda m, x: m(input_ids=x, use_cache=False).logits),
    _vision("vit-b16", "vit_b_16"),
    _vision("resnet50", "resnet50"),
    _vision("convnext-t", "convnext_tiny", stochastic_depth_prob=0.0),
    _vision("mobilenetv3-l", "mobilenet_v3_large", dropout=0.0),
]

NAMES = [m.name for m in _MODELS]


def get(name: str) -> RealModel:
    for m in _MODELS:
        if m.name == name:
            return m
    raise KeyError(f"unknown model {name!r}; known: {', '.join(NAMES)}")


def calibrate_batchnorm(spec: RealModel, model: torch.nn.Module, inputs: tuple[Any, ...]) -> None:
    """Running statistics from two real batches (cumulative average), as a
    trained model has: fresh statistics shrink eval activations towards
    float32 subnormals, which eager torch computes very slowly and XLA
    flushes (the zoo's ``calibrate_batchnorm``, on this module's inputs)."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    saved = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(2):
            spec.logits(model, *inputs)
    for m, mom in zip(bns, saved):
        m.momentum = mom
