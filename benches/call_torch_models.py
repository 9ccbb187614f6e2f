"""The models of ``benches/call_torch_bench.py``: each a torch module, the
function that calls it (ids -> logits) and the same model written in
``jax.numpy`` over the torch parameter names and layouts (the "pure JAX"
row; transformers 5 ships no Flax models, so there is no Flax version to
use instead).

- ``gpt2`` (the default): a zoo transformer at a useful size, Hugging Face
  ``GPT2LMHeadModel`` (the zoo's ``hf-gpt2`` architecture, random weights)
  with d 256, 4 layers, 4 heads, vocabulary 8192, batch 4, sequence 128
  (5.3M parameters, tied embedding and head);
- ``lm`` (``--quick``): a small LM, embedding, 2 post-LN
  ``nn.TransformerEncoderLayer`` s (d 128, 4 heads, FF 512), head,
  vocabulary 512, batch 8, sequence 64.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch


@dataclass
class BenchModel:
    """A torch model with its JAX twin and its input size."""

    name: str
    describe: str
    module: torch.nn.Module
    forward: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]
    """``forward(module, ids) -> logits`` (what every row calls)."""
    jax_apply: Callable[[dict[str, Any], Any], Any]
    """The same model in ``jax.numpy``: ``jax_apply(params, ids) -> logits``."""
    vocab: int
    batch: int
    seq: int
    tol: float
    """Forward agreement with eager torch (rtol = atol)."""


def _ln(x: Any, w: Any, b: Any, eps: float = 1e-5) -> Any:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * w + b


# -- the small LM (--quick) ---------------------------------------------------
LM_VOCAB, LM_D, LM_HEADS, LM_FF, LM_LAYERS = 512, 128, 4, 512, 2


class LM(torch.nn.Module):
    """Embedding, post-LN encoder layers (``nn.TransformerEncoderLayer``), head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(LM_VOCAB, LM_D)
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(LM_D, LM_HEADS, LM_FF, dropout=0.0,
                                             batch_first=True)
            for _ in range(LM_LAYERS))
        self.head = torch.nn.Linear(LM_D, LM_VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.emb(ids)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)  # type: ignore[no-any-return]


def jax_lm(p: dict[str, Any], ids: Any) -> Any:
    """:class:`LM` in ``jax.numpy``."""
    hd = LM_D // LM_HEADS
    h = p["emb.weight"][ids]
    bsz, seq, _ = h.shape
    for i in range(LM_LAYERS):
        q = f"layers.{i}."
        qkv = h @ p[q + "self_attn.in_proj_weight"].T + p[q + "self_attn.in_proj_bias"]
        qkv = qkv.reshape(bsz, seq, 3, LM_HEADS, hd).transpose(2, 0, 3, 1, 4)
        att = jax.nn.softmax(qkv[0] @ qkv[1].swapaxes(-1, -2) / np.sqrt(hd), axis=-1)
        o = (att @ qkv[2]).transpose(0, 2, 1, 3).reshape(bsz, seq, LM_D)
        o = o @ p[q + "self_attn.out_proj.weight"].T + p[q + "self_attn.out_proj.bias"]
        h = _ln(h + o, p[q + "norm1.weight"], p[q + "norm1.bias"])
        f = jax.nn.relu(h @ p[q + "linear1.weight"].T + p[q + "linear1.bias"])
        f = f @ p[q + "linear2.weight"].T + p[q + "linear2.bias"]
        h = _ln(h + f, p[q + "norm2.weight"], p[q + "norm2.bias"])
    return h @ p["head.weight"].T + p["head.bias"]


def small_lm() -> BenchModel:
    torch.manual_seed(0)
    return BenchModel(
        name="lm", describe=f"small LM: 2 post-LN nn.TransformerEncoderLayer, d {LM_D}, "
        f"{LM_HEADS} heads, FF {LM_FF}, vocab {LM_VOCAB}",
        module=LM().train(), forward=lambda m, ids: m(ids), jax_apply=jax_lm,
        vocab=LM_VOCAB, batch=8, seq=64, tol=1e-4)


# -- GPT-2 (the zoo's hf-gpt2 architecture at a useful size) -------------------
GPT_VOCAB, GPT_D, GPT_HEADS, GPT_LAYERS, GPT_POS = 8192, 256, 4, 4, 128


def jax_gpt2(p: dict[str, Any], ids: Any) -> Any:
    """``GPT2LMHeadModel`` (pre-LN, ``gelu_new``, causal attention, head
    tied to ``wte``) in ``jax.numpy``; ``Conv1D`` weights are ``[in, out]``."""
    hd = GPT_D // GPT_HEADS
    bsz, seq = ids.shape
    h = p["transformer.wte.weight"][ids] + p["transformer.wpe.weight"][:seq]
    causal = jnp.tril(jnp.ones((seq, seq), bool))
    for i in range(GPT_LAYERS):
        q = f"transformer.h.{i}."
        a = _ln(h, p[q + "ln_1.weight"], p[q + "ln_1.bias"])
        qkv = a @ p[q + "attn.c_attn.weight"] + p[q + "attn.c_attn.bias"]
        qh, kh, vh = (t.reshape(bsz, seq, GPT_HEADS, hd).transpose(0, 2, 1, 3)
                      for t in jnp.split(qkv, 3, axis=-1))
        s = qh @ kh.swapaxes(-1, -2) / np.sqrt(hd)
        att = jax.nn.softmax(jnp.where(causal, s, jnp.finfo(s.dtype).min), axis=-1)
        o = (att @ vh).transpose(0, 2, 1, 3).reshape(bsz, seq, GPT_D)
        h = h + o @ p[q + "attn.c_proj.weight"] + p[q + "attn.c_proj.bias"]
        m = _ln(h, p[q + "ln_2.weight"], p[q + "ln_2.bias"])
        f = jax.nn.gelu(m @ p[q + "mlp.c_fc.weight"] + p[q + "mlp.c_fc.bias"], approximate=True)
        h = h + f @ p[q + "mlp.c_proj.weight"] + p[q + "mlp.c_proj.bias"]
    h = _ln(h, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"])
    return h @ p["transformer.wte.weight"].T


def gpt2() -> BenchModel:
    import transformers

    cfg = transformers.GPT2Config(
        vocab_size=GPT_VOCAB, n_embd=GPT_D, n_layer=GPT_LAYERS, n_head=GPT_HEADS,
        n_positions=GPT_POS, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    module = transformers.GPT2LMHeadModel(cfg).train()
    n = sum(p.numel() for p in module.parameters())
    return BenchModel(
        name="gpt2", describe=f"transformers GPT2LMHeadModel (zoo hf-gpt2 architecture): "
        f"d {GPT_D}, {GPT_LAYERS} layers, {GPT_HEADS} heads, vocab {GPT_VOCAB}, "
        f"{n / 1e6:.1f}M parameters, random weights",
        module=module, forward=lambda m, ids: m(input_ids=ids).logits, jax_apply=jax_gpt2,
        vocab=GPT_VOCAB, batch=4, seq=128, tol=2e-4)
