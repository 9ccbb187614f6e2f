"""Type stubs of the native extension module."""

__version__: str

class BridgeError(Exception):
    """Base class of every hlobridge error."""

class ParseError(BridgeError):
    """Malformed StableHLO/MLIR text; the message names file:line:col."""

class InvalidIrError(BridgeError):
    """Structurally invalid IR for the requested operation."""

class StitchError(BridgeError):
    """A stitch plan is invalid: unknown handle, seam type mismatch, cycle or conflict."""

def format_module(
    text: str, generic: bool = False, debug_info: bool = True, file: str = "<input>"
) -> str:
    """Parse module text and print it back (pretty, or generic form)."""
