"""``hb.serve.Client``: call a ``hlobridge serve`` server from Python
(implementation: :mod:`hlobridge._src.serve`; docs/deploy.md)."""

from __future__ import annotations

from hlobridge._src.serve import Client, ServeError, decode_predict, encode_predict

__all__ = ["Client", "ServeError", "decode_predict", "encode_predict"]
