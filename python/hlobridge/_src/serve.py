"""``hb.serve.Client``: call a ``hlobridge serve`` server from Python.

``Client(addr).predict(**tensors)`` sends named torch tensors to
``hlobridge.serve.v1.Predictor/Predict`` and returns the named outputs as
torch tensors; ``metadata()`` returns the artifact's manifest and
``health()`` the standard gRPC health status. Transport is ``grpcio``; the
messages of ``proto/proto/serve.proto`` (and the health check's) are encoded
by the extension (``_native.predict_encode`` and friends: the one encoder,
in the ``hlobridge-artifact`` crate), so no generated stubs or ``protobuf``
package are needed. A failed call raises :class:`ServeError` with the gRPC
status name in ``code``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from hlobridge import _native
from hlobridge.errors import BridgeError, ServeError

__all__ = ["Client", "ServeError", "decode_predict", "encode_predict"]

_SERVICE = "/hlobridge.serve.v1.Predictor/"
_HEALTH = "/grpc.health.v1.Health/Check"
_HEALTH_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def encode_predict(tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> bytes:
    """A serialized ``PredictRequest`` of named tensors (a mapping, or
    ``(name, tensor)`` pairs, which may repeat a name: the server refuses
    that with ``INVALID_ARGUMENT``)."""
    from hlobridge._src.dtypes import DTYPES

    items = tensors.items() if isinstance(tensors, Mapping) else tensors
    wire = []
    for name, t in items:
        entry = DTYPES.get(t.dtype)
        if entry is None:
            raise ServeError("INVALID_ARGUMENT", f"dtype {t.dtype} cannot be sent")
        t = t.detach().cpu().contiguous()
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        wire.append((name, entry[0], list(t.shape), data))
    return _native.predict_encode(wire)  # type: ignore[no-any-return]


def decode_predict(buf: bytes) -> dict[str, torch.Tensor]:
    """The outputs of a serialized ``PredictResponse``."""
    from hlobridge._src.dtypes import BY_MLIR

    try:
        named = _native.predict_decode(buf)
    except BridgeError as e:
        raise ServeError("INTERNAL", f"malformed response: {e}") from None
    out: dict[str, torch.Tensor] = {}
    for name, dtype, shape, data in named:
        dt = BY_MLIR.get(dtype)
        if dt is None:
            raise ServeError("INTERNAL", f"response has unknown dtype {dtype!r}")
        flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
        try:
            out[name] = flat.view(dt).reshape(shape)
        except RuntimeError:
            raise ServeError("INTERNAL", f"output {name}: data does not match its shape") from None
    return out


class Client:
    """A connection to ``hlobridge serve`` at ``addr`` (``host:port``).

    ``token``: the bearer token (for a server started with
    ``--token-file``); ``timeout``: per-call deadline in seconds."""

    def __init__(self, addr: str, token: str | None = None, timeout: float | None = None) -> None:
        import grpc

        self._grpc = grpc
        self._channel = grpc.insecure_channel(addr, options=[
            ("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)])
        self._timeout = timeout
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        self._predict = self._channel.unary_unary(_SERVICE + "Predict")
        self._meta = self._channel.unary_unary(_SERVICE + "Metadata")
        self._health = self._channel.unary_unary(_HEALTH)

    def _call(self, stub: Any, body: bytes, timeout: float | None = None) -> bytes:
        try:
            return stub(body, timeout=timeout if timeout is not None else self._timeout,  # type: ignore[no-any-return]
                        metadata=self._metadata)
        except self._grpc.RpcError as e:
            raise ServeError(e.code().name, e.details() or "") from None

    def predict(self, **tensors: torch.Tensor) -> dict[str, torch.Tensor]:
        """Run the model on named inputs; returns the named outputs."""
        return decode_predict(self._call(self._predict, encode_predict(tensors)))

    def predict_raw(self, body: bytes, timeout: float | None = None) -> bytes:
        """Send ``body`` as the Predict request bytes as they are (for tests
        and tools); returns the raw response bytes."""
        return self._call(self._predict, body, timeout)

    def metadata(self) -> dict[str, Any]:
        """The served artifact's manifest (``content_hash`` included)."""
        try:
            manifest, _hash = _native.metadata_decode(self._call(self._meta, b""))
        except BridgeError as e:
            if isinstance(e, ServeError):
                raise
            raise ServeError("INTERNAL", f"malformed metadata response: {e}") from None
        if not manifest:
            raise ServeError("INTERNAL", "metadata response has no manifest")
        return json.loads(manifest)  # type: ignore[no-any-return]

    def health(self, service: str = "") -> str:
        """``grpc.health.v1`` status: ``SERVING``, ``NOT_SERVING``..."""
        body = _native.health_encode(service)
        try:
            status = _native.health_decode(self._call(self._health, body))
        except BridgeError as e:
            if isinstance(e, ServeError):
                raise
            raise ServeError("INTERNAL", f"malformed health response: {e}") from None
        return _HEALTH_STATUS.get(status, str(status))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
