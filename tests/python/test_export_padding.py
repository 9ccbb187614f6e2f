"""``Artifact.run`` pads a batch size that was not exported to the next
exported one, as ``hlobridge serve`` does: batch 3 on an artifact exported
for [1, 4] runs padded to 4 and returns 3 rows, equal to eager torch on
fresh random inputs (atol 1e-5). Models whose rows the exporter found not
independent are never padded, and sizes past the largest are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import hlobridge as hb
from serve_helpers import Hybrid

ATOL = 1e-5


class _Center(torch.nn.Module):
    """Subtracts the batch mean: each output row depends on every row."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return h - h.mean(dim=0, keepdim=True)


def test_batch_3_on_an_artifact_for_1_and_4_is_padded_and_sliced(tmp_path: Path) -> None:
    torch.manual_seed(int.from_bytes(os.urandom(2), "little"))
    model = Hybrid().eval()
    hb.export(model, torch.randn(4, 16), path=tmp_path / "a", batch_dim=0, batch_sizes=[1, 4])
    art = hb.export.load(tmp_path / "a")
    for b in (2, 3, 1, 4):
        x = torch.randn(b, 16)
        got = art.run(x=x)["output"]
        assert got.shape == (b, 8)
        with torch.no_grad():
            torch.testing.assert_close(got, model(x), atol=ATOL, rtol=0)
    # The padded run used the batch-4 module (one executable per module).
    assert sorted(art._exes) == ["module.b1.mlir", "module.b4.mlir"]
    with pytest.raises(hb.ArgumentError, match=r"1\.\.=4"):
        art.run(x=torch.randn(5, 16))


def test_rows_mixing_artifacts_are_not_padded(tmp_path: Path) -> None:
    torch.manual_seed(5)
    model = _Center().eval()
    art = hb.export(model, torch.randn(2, 6), path=tmp_path / "c", batch_dim=0, batch_sizes=[1, 4])
    assert art.rows_independent is False
    with pytest.raises(hb.ArgumentError, match="not independent"):
        art.run(x=torch.randn(3, 6))
    x = torch.randn(4, 6)
    with torch.no_grad():
        torch.testing.assert_close(art.run(x=x)["output"], model(x), atol=ATOL, rtol=0)
