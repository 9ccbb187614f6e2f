"""``nn.MultiheadAttention``'s inference fast path through the backend.

At inference (``eval()`` under ``no_grad``, ``batch_first=True``,
self-attention) the module calls ``aten._native_multi_head_attention``,
which torch_xla cannot lower; the backend decomposes it
(``hlobridge/_src/dynamo/attention_decomp.py``). Before that entry every
torchvision ViT failed at inference with ``UnsupportedOpError`` (found by
``make bench-real``). Compared with eager (which runs the fused kernel) on
fresh random inputs: float32 attention, tolerance 2e-5 relative to the
output's scale.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch import nn

import hlobridge  # noqa: F401  (registers the backend)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    scale = want.abs().max().item() + 1e-6
    err = (got - want).abs().max().item()
    assert err <= 2e-5 * scale, f"max error {err:.3g} (scale {scale:.3g})"


class _SelfAttention(nn.Module):
    def __init__(self, need_weights: bool) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(32, 4, batch_first=True)
        self.need_weights = need_weights

    def forward(self, x: torch.Tensor, pad: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        out, w = self.mha(x, x, x, key_padding_mask=pad, need_weights=self.need_weights)
        return (out,) if w is None else (out, w)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_fast_path_attention_matches_eager(need_weights: bool, padded: bool) -> None:
    torch._dynamo.reset()
    torch.manual_seed(7 + 2 * need_weights + padded)
    model = _SelfAttention(need_weights).eval()
    x = torch.randn(3, 10, 32)
    pad = None
    if padded:
        pad = torch.zeros(3, 10, dtype=torch.bool)
        pad[0, 7:] = True
        pad[2, 4:] = True
    compiled = torch.compile(model, backend="hlobridge", dynamic=False, fullgraph=True)
    with torch.no_grad():
        want = model(x, pad)
        got = compiled(x, pad)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        _close(g, w)


def test_torchvision_vit_inference_matches_eager() -> None:
    torchvision = pytest.importorskip("torchvision")
    torch._dynamo.reset()
    torch.manual_seed(3)
    model = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
        num_classes=10).eval()
    # torchvision zero-initializes the classifier head, which would make
    # every logit 0 and the comparison empty: give it random weights.
    torch.nn.init.normal_(model.heads.head.weight, std=0.5)
    torch.nn.init.normal_(model.heads.head.bias, std=0.5)
    x = torch.randn(2, 3, 32, 32)
    compiled = torch.compile(model, backend="hlobridge", dynamic=False)
    with torch.no_grad():
        want = model(x)
        assert want.abs().max().item() > 0.1, "the head must not be zero"
        _close(compiled(x), want)
