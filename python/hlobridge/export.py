"""``hb.export``: write a fused program as a deployable artifact directory,
and :func:`load` to read one back (in-process) with its checks.

``hlobridge.export`` is both this module (``hb.export.load``,
``hb.export.ExportError``) and the function (``hb.export(model, x,
path=...)``). The implementation is :mod:`hlobridge._src.export`; the
format itself is defined in Rust (``hlobridge-artifact``, docs/deploy.md).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from hlobridge._src.export import (
    Artifact,
    ArtifactHashError,
    ArtifactVersionError,
    ExportError,
    export,
    load,
    producer_versions,
)

__all__ = ["Artifact", "ArtifactHashError", "ArtifactVersionError", "ExportError", "export", "load",
           "producer_versions"]


class _CallableModule(types.ModuleType):
    """``hlobridge.export`` is both this module and the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> Artifact:
        return export(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
