"""Device routing: the one table that says, for each torch device type, which
runtime runs hlobridge programs on its tensors and which path ``call_jax``
takes for them.

=========  ==============================  ===============  ==========================
device     runtime (``devices.runtime``)   call_jax path    DeviceProgram runs through
=========  ==============================  ===============  ==========================
``cpu``    hlobridge's CPU plugin          the main path    hlobridge's PJRT client
``cuda``   the CUDA PJRT plugin            ``cuda_call``    hlobridge's PJRT client
``xla``    none (torch_xla's runtime)      ``lazy``         ``tpu_adapter`` (torch_xla)
=========  ==============================  ===============  ==========================

TPUs are reached through torch_xla's runtime: libtpu serves one client per
process, so hlobridge never opens one. Entry points name their handlers as
``"module:function"`` (imported on first use, so the CPU path never imports
torch_xla or the CUDA lowering).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hlobridge import _native
from hlobridge._src.errors import ArgumentError

__all__ = ["ROUTES", "Route", "for_device", "named"]

_TPU_REFUSAL = ("hlobridge does not open a TPU client (libtpu serves one client per process): run the "
                "program through torch_xla's runtime with hlobridge.tpu_adapter.TorchXlaProgram on xla "
                "tensors")


def _open_cpu(**options: Any) -> Any:
    if options:
        raise ArgumentError(f"the cpu runtime takes no options, got {sorted(options)}")
    return _native.runtime()


def _open_cuda(**options: Any) -> Any:
    return _native.cuda_runtime(**options)


@dataclass(frozen=True)
class Route:
    """Where tensors of one torch device type run."""

    device_type: str
    """``torch.device(...).type``."""
    names: tuple[str, ...]
    """Names :func:`hlobridge.devices.runtime` accepts for this runtime."""
    platform: str | None
    """The hlobridge PJRT runtime's platform, or ``None``: torch_xla's runtime."""
    open: Callable[..., Any] | None
    """Opens (or returns) the hlobridge runtime, with its options."""
    call_jax: str | None
    """``"module:function"`` that runs ``call_jax`` on these tensors, called as
    ``(fn, args, kwargs, leaves, treedef, t0)``; ``None``: the main (CPU) path."""
    refusal: str = ""
    """Why :func:`hlobridge.devices.runtime` refuses this name (no hlobridge runtime)."""

    def open_runtime(self, **options: Any) -> Any:
        if self.open is None:
            raise ArgumentError(self.refusal)
        return self.open(**options)

    def call_jax_handler(self) -> Callable[..., Any]:
        assert self.call_jax is not None
        module, func = self.call_jax.split(":")
        handler: Callable[..., Any] = getattr(importlib.import_module(module), func)
        return handler


ROUTES: dict[str, Route] = {r.device_type: r for r in (
    Route("cpu", ("cpu",), "cpu", _open_cpu, None),
    Route("cuda", ("cuda", "gpu"), "cuda", _open_cuda, "hlobridge._src.cuda_call:call_jax_routed"),
    Route("xla", ("tpu", "xla"), None, None, "hlobridge._src.lazy:call_jax_routed", _TPU_REFUSAL),
)}

_BY_NAME = {n: r for r in ROUTES.values() for n in r.names}


def named(name: str) -> Route:
    """The route a runtime name (``"cpu"``, ``"cuda"``/``"gpu"``,
    ``"tpu"``/``"xla"``) names; other names are an :class:`ArgumentError`."""
    route = _BY_NAME.get(name.lower())
    if route is None:
        known = [r.platform for r in ROUTES.values() if r.platform]
        raise ArgumentError(f"unknown runtime {name!r}; expected one of {', '.join(known)} "
                            f"(or tpu through hlobridge.tpu_adapter)")
    return route


def for_device(device_type: str) -> Route | None:
    """The route of a torch device type, or ``None`` (hlobridge does not run
    programs on it)."""
    return ROUTES.get(device_type)
