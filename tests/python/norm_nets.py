"""Small networks whose normalizations see data with a mean far above its
spread (raw pixels, unnormalized features): where a one-pass variance
``E[x^2] - E[x]^2`` cancels. Shared by ``test_norm_numerics.py`` and
``test_zoo_accuracy.py``."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class OffsetNormNet(torch.nn.Module):
    """conv -> BatchNorm -> ReLU -> spatial mean -> ``+ offset`` ->
    LayerNorm -> linear (3 input channels, 5 classes). Feed it inputs shifted
    by ``offset`` too, so BatchNorm sees them offset as well."""

    def __init__(self, offset: float) -> None:
        super().__init__()
        self.offset = offset
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.ln = torch.nn.LayerNorm(16)
        self.fc = torch.nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn(self.conv(x)))
        return self.fc(self.ln(h.mean((2, 3)) + self.offset))
