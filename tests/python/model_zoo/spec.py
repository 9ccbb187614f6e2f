"""What the model zoo knows about one model: how to build a tiny random
instance, make a batch for it, and read its logits.

Every builder is a tiny *random* configuration made in code (no weights, no
network); dropout and stochastic depth are off so that training runs can be
compared with eager torch step by step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["ZooModel", "calibrate_batchnorm", "zoo_loss"]


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo."""

    name: str
    """Short id used in test ids and in docs/models.md (``hf-gpt2``)."""
    library: str
    """``transformers``, ``torchvision`` or ``timm``."""
    config: str
    """The tiny configuration, in words (for docs/models.md)."""
    build: Callable[[], torch.nn.Module]
    """A fresh random instance (seed torch first)."""
    inputs: Callable[[], tuple[torch.Tensor, ...]]
    """A fresh random batch of model inputs (seed torch first)."""
    target: Callable[[tuple[torch.Tensor, ...]], torch.Tensor]
    """Integer class targets for a batch (``cross_entropy`` over the last
    axis of the logits)."""
    logits: Callable[..., torch.Tensor]
    """``logits(model, *inputs)``: runs the model (the module, its
    ``torch.compile`` d form, or the functional stand-in of
    ``compile_train_step``) and returns its logits."""
    lr_scale: float = 1.0
    """Multiplies the training paths' learning rates (SGD 0.01, Adam 1e-3):
    0.1 for BatchNorm convnets, whose float32 training drifts from float64
    within 3 steps at the full rates (eager torch's as much as ours)."""
    heavy: tuple[str, ...] = ()
    """Paths held out of ``make test`` (they run with ``HLOBRIDGE_ZOO=all``);
    ``heavy_reason`` says why, in docs/models.md."""
    heavy_reason: str = ""
    """Why the ``heavy`` paths are held out (a measured time, or an open
    investigation)."""


def zoo_loss(model: ZooModel) -> Callable[..., torch.Tensor]:
    """``loss_fn(m, *inputs, target)``: mean cross-entropy of the logits."""

    def loss_fn(m: Any, *batch: torch.Tensor) -> torch.Tensor:
        *xs, y = batch
        out = model.logits(m, *xs)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    return loss_fn


def calibrate_batchnorm(spec: ZooModel, model: torch.nn.Module) -> None:
    """Give BatchNorm layers the running statistics of real batches (as a
    trained model has), so that eval-mode logits are not vanishingly small
    (fresh statistics, mean 0 and variance 1, shrink activations layer after
    layer, eager torch computes their float32 subnormals very slowly and
    XLA flushes them to zero: a comparison or a timing would test nothing
    else). Used by the zoo tests and the benchmarks."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    saved = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average
    model.train()
    with torch.no_grad():
        for _ in range(2):
            spec.logits(model, *spec.inputs())
    for m, mom in zip(bns, saved):
        m.momentum = mom
