"""Every hlobridge exception, importable by name (``hlobridge.errors.ForkError``),
including those the native module raises. All derive from :class:`BridgeError`;
each one pickles and unpickles to the same class, message and attributes
(errors raised in worker processes reach the parent). The hierarchy is in
:mod:`hlobridge._src.errors`."""

from __future__ import annotations

from hlobridge._src.errors import *  # noqa: F403
from hlobridge._src.errors import __all__ as __all__  # noqa: F401
