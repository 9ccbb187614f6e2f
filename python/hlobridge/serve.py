"""``hb.serve.Client``: call a ``hlobridge serve`` server from Python.

``Client(addr).predict(**tensors)`` sends named torch tensors to
``hlobridge.serve.v1.Predictor/Predict`` and returns the named outputs as
torch tensors; ``metadata()`` returns the artifact's manifest and
``health()`` the standard gRPC health status. Transport is ``grpcio``; the
four small messages of ``proto/proto/serve.proto`` (and the health check's)
are encoded here by hand, so no generated stubs or ``protobuf`` package are
needed. A failed call raises :class:`ServeError` with the gRPC status name
in ``code``.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from hlobridge._native import BridgeError

__all__ = ["Client", "ServeError"]

_SERVICE = "/hlobridge.serve.v1.Predictor/"
_HEALTH = "/grpc.health.v1.Health/Check"
_HEALTH_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


class ServeError(BridgeError):
    """A call to a ``hlobridge serve`` server failed; ``code`` is the gRPC
    status name (``INVALID_ARGUMENT``, ``RESOURCE_EXHAUSTED``...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


# -- protobuf wire format (just what serve.proto needs) -----------------------------


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ServeError("INTERNAL", "malformed response")
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """``(field, wire type, value)`` of a message: ints for varints, bytes
    for length-delimited fields."""
    out: list[tuple[int, int, Any]] = []
    i = 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _read_varint(buf, i)
            out.append((num, wt, v))
        elif wt == 2:
            n, i = _read_varint(buf, i)
            out.append((num, wt, buf[i:i + n]))
            i += n
        elif wt in (1, 5):
            i += 8 if wt == 1 else 4
        else:
            raise ServeError("INTERNAL", "malformed response")
    return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _encode_tensor(t: torch.Tensor) -> bytes:
    from hlobridge.dtypes import DTYPES

    entry = DTYPES.get(t.dtype)
    if entry is None:
        raise ServeError("INVALID_ARGUMENT", f"dtype {t.dtype} cannot be sent")
    t = t.detach().cpu().contiguous()
    data = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    shape = b"".join(_varint(d) for d in t.shape)
    return _field(1, entry[0].encode()) + _field(2, shape) + _field(3, data)


def _decode_tensor(buf: bytes) -> torch.Tensor:
    from hlobridge.dtypes import DTYPES

    dtype, shape, data = "", [], b""
    for num, wt, v in _fields(buf):
        if num == 1 and wt == 2:
            dtype = v.decode()
        elif num == 2 and wt == 2:
            j = 0
            while j < len(v):
                d, j = _read_varint(v, j)
                shape.append(_signed(d))
        elif num == 2 and wt == 0:
            shape.append(_signed(v))
        elif num == 3 and wt == 2:
            data = v
    dt = next((t for t, (m, _) in DTYPES.items() if m == dtype), None)
    if dt is None:
        raise ServeError("INTERNAL", f"response has unknown dtype {dtype!r}")
    flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return flat.view(dt).reshape(shape)


def encode_predict(tensors: dict[str, torch.Tensor]) -> bytes:
    """A serialized ``PredictRequest``."""
    return b"".join(_field(1, _field(1, k.encode()) + _field(2, _encode_tensor(v)))
                    for k, v in tensors.items())


def decode_predict(buf: bytes) -> dict[str, torch.Tensor]:
    """The outputs of a serialized ``PredictResponse``."""
    out: dict[str, torch.Tensor] = {}
    for num, wt, entry in _fields(buf):
        if num != 1 or wt != 2:
            continue
        key, val = "", b""
        for n2, w2, v in _fields(entry):
            if n2 == 1 and w2 == 2:
                key = v.decode()
            elif n2 == 2 and w2 == 2:
                val = v
        out[key] = _decode_tensor(val)
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
        for num, wt, v in _fields(self._call(self._meta, b"")):
            if num == 1 and wt == 2:
                return json.loads(v.decode())  # type: ignore[no-any-return]
        raise ServeError("INTERNAL", "metadata response has no manifest")

    def health(self, service: str = "") -> str:
        """``grpc.health.v1`` status: ``SERVING``, ``NOT_SERVING``..."""
        body = _field(1, service.encode()) if service else b""
        for num, wt, v in _fields(self._call(self._health, body)):
            if num == 1 and wt == 0:
                return _HEALTH_STATUS.get(v, str(v))
        return "UNKNOWN"

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

