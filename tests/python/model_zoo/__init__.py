"""The model zoo: tiny random Hugging Face, torchvision and timm models
that ``tests/python/test_model_zoo.py`` runs through every hlobridge path
(``torch.compile`` inference and training, ``compile_train_step`` with SGD
and Adam) against eager torch; ``hybrid.py`` adds one model per family with
JAX pieces inside (``jax_pieces.py``), which ``test_zoo_hybrid.py`` runs.
``results.py`` collects the outcomes and ``scripts/gen_models_table.py``
renders them as docs/models.md.
"""

from __future__ import annotations

from model_zoo.hf import MODELS as HF_MODELS
from model_zoo.spec import ZooModel, zoo_loss
from model_zoo.vision import MODELS as VISION_MODELS

__all__ = ["MODELS", "ZooModel", "by_name", "zoo_loss"]

MODELS: list[ZooModel] = [*HF_MODELS, *VISION_MODELS]


def by_name(name: str) -> ZooModel:
    """The zoo model called ``name``."""
    for m in MODELS:
        if m.name == name:
            return m
    raise KeyError(name)
