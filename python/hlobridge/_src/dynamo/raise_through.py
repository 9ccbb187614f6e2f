"""hlobridge errors keep their class through ``torch.compile``.

Dynamo re-wraps what a backend or a trace-time hook raises:
``BackendCompilerFailed`` for the backend, ``InternalTorchDynamoError``
for anything raised while it traces. Only exceptions that are
``torch._dynamo.exc.ShortenTraceback`` pass through both unchanged (torch
2.9: ``OutputGraph.call_user_compiler`` and ``convert_frame._compile``
re-raise them; ``eval_frame`` strips Dynamo's frames).

:func:`through_dynamo` gives an hlobridge error that property without
changing what the user sees: its class becomes a per-class subclass of
``(TheError, ShortenTraceback)`` with the same name, so
``except hb.CapturedTensorError`` catches it, ``type(e).__name__`` and
``str(e)`` are unchanged, and it pickles as ``TheError`` (its
``__reduce__`` names the public class). The instance, its arguments, notes,
attributes and traceback are kept: nothing is copied.

Errors raised inside fake-tensor propagation (a custom op's fake
implementation) are out of reach: Dynamo's ``get_fake_value`` wraps every
``RuntimeError`` there, ``ShortenTraceback`` included, in
``TorchRuntimeError``, whose message starts with ours.
"""

from __future__ import annotations

import threading
from typing import Any

from hlobridge._src.errors import BridgeError

_classes: dict[type, type] = {}
_lock = threading.Lock()


def _reduce(self: BaseException) -> Any:
    """The public class's own reduction with the public class in place of
    this one (and without the frame Dynamo's mixin carries)."""
    sub = type(self)
    public = sub.__mro__[1]

    def swap(x: Any) -> Any:
        if x is sub:
            return public
        if isinstance(x, dict):
            return {k: v for k, v in x.items() if k != "first_useful_frame"}
        if isinstance(x, tuple):
            return tuple(swap(y) for y in x)
        return x

    r = super(sub, self).__reduce__()
    return swap(r) if isinstance(r, tuple) else r


def passes_through_dynamo(fn: Any) -> Any:
    """Decorates a Dynamo backend or trace-time hook: an hlobridge error it
    raises goes through :func:`through_dynamo`."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BridgeError as e:
            raise through_dynamo(e) from e.__cause__

    return wrapper


def _passing_class(cls: type) -> type:
    from torch._dynamo.exc import ShortenTraceback

    with _lock:
        sub = _classes.get(cls)
        if sub is None:
            sub = type(cls.__name__, (cls, ShortenTraceback), {
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "__reduce__": _reduce,
                "__doc__": cls.__doc__,
            })
            _classes[cls] = sub
        return sub


def through_dynamo(err: BaseException) -> BaseException:
    """``err`` itself, made to pass through Dynamo's re-wrapping when it is
    an hlobridge error (other exceptions are returned as they are)."""
    if not isinstance(err, BridgeError):
        return err
    from torch._dynamo.exc import ShortenTraceback

    if isinstance(err, ShortenTraceback):
        return err
    err.__class__ = _passing_class(type(err))
    err.first_useful_frame = None  # type: ignore[attr-defined]
    return err
