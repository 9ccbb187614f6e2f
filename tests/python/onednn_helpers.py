"""What the oneDNN route tests share (``test_onednn_conv.py``,
``test_onednn_matmul.py``, ``test_onednn_softmax.py``): running a compiled
program on f32 tensors, and the float32-accumulation bound they compare
products with."""

from __future__ import annotations

import torch

from hlobridge import _native


def run_f32(exe: _native.Executable, *arrays: torch.Tensor) -> torch.Tensor:
    """``exe``'s first result on f32 host tensors (made contiguous)."""
    arrays = tuple(a.contiguous() for a in arrays)
    outs, *_ = _native.execute(exe, [a.data_ptr() for a in arrays], [list(a.shape) for a in arrays],
                               [_native.ELEMENT_TYPES["f32"]] * len(arrays), list(arrays))
    return torch.from_dlpack(outs[0])


def check_accumulation(got: torch.Tensor, want: torch.Tensor, k: int, what: str) -> None:
    """``got`` within float32 accumulation of ``k`` terms of the float64
    ``want``: ``2e-6 * sqrt(k)`` relative to its scale (a bf16 or tf32
    down-conversion would be 10-1000 times larger)."""
    err = (got.double() - want).abs().max().item()
    scale = want.abs().max().item()
    assert err <= 2e-6 * k**0.5 * scale, f"{what}: max error {err:.3g} at scale {scale:.3g}"
