"""hlobridge: PyTorch and JAX in one compiled StableHLO program.

Errors raised by hlobridge all derive from :class:`BridgeError`.
"""

from hlobridge._native import (
    BridgeError,
    InvalidIrError,
    ParseError,
    StitchError,
    __version__,
    format_module,
)

__all__ = [
    "BridgeError",
    "InvalidIrError",
    "ParseError",
    "StitchError",
    "__version__",
    "format_module",
]
