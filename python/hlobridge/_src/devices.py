"""Picking the runtime by the tensors' device, and running a program there
with tensors in and out by DLPack.

* :func:`runtime` names a runtime: ``"cpu"`` (hlobridge's CPU plugin, the
  default everywhere), ``"cuda"`` (the CUDA PJRT plugin, created once per
  process with :func:`cuda_client_options`' options; keyword options and
  ``HLOBRIDGE_CUDA_*`` set its allocator, memory fraction, preallocation and
  visible devices). TPUs are reached through torch_xla's runtime instead
  (:mod:`hlobridge.tpu_adapter`): libtpu serves one client per process.
* :class:`DeviceProgram` runs StableHLO module text (or a
  :class:`~hlobridge._src.stitching.StitchedProgram`) on the runtime of its
  inputs' device: CPU tensors on the CPU runtime, ``cuda:N`` tensors on the
  CUDA runtime, ``xla`` tensors through torch_xla. Inputs go in as DLPack
  capsules (zero-copy views, checked by the native side: device type, device
  id, dtype, density) and outputs come back as tensors on the same device
  aliasing the runtime's buffers.
* ``hb.call_jax`` on CUDA tensors (:mod:`hlobridge._src.cuda_call`) lowers the
  JAX function for the ``cuda`` platform (no host rewrites: those exist for
  the CPU plugin only) and runs it with :class:`DeviceProgram`.

Stream semantics on CUDA. The plugin runs programs on its own streams, and
its clients differ in what they do with an external stream handed to a
buffer view (XLA's StreamExecutor client waits on it, its TFRT GPU client
ignores it, others refuse it), so hlobridge does not rely on it. Before a
run, torch's current stream of the inputs' device is synchronized (the
host waits for the work that produces the inputs); after the run, every
output is waited on before it is handed to torch (``Buffer::to_dlpack``), so
the outputs are complete on every stream and the inputs are no longer read
when their views are released. Work queued on other torch streams is the
caller's to order, as with any torch stream. The cost is one host wait on
each side of a program.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from hlobridge import _native
from hlobridge._src.errors import ArgumentError
from hlobridge._src.routing import for_device, named

__all__ = ["DeviceProgram", "cuda_client_options", "device_of", "run", "runtime"]

def runtime(name: str = "cpu", **options: Any) -> Any:
    """The runtime called ``name``: ``"cpu"`` (:func:`hlobridge.runtime`) or
    ``"cuda"`` (created on first use; ``options`` as in
    :func:`cuda_client_options`). ``"tpu"`` is an :class:`ArgumentError`
    that points to :mod:`hlobridge.tpu_adapter` (:mod:`hlobridge._src.routing`)."""
    return named(name).open_runtime(**options)


def cuda_client_options(**options: Any) -> dict[str, Any]:
    """The ``PJRT_Client_Create`` options the CUDA runtime gets for these
    keyword options on top of ``HLOBRIDGE_CUDA_*`` and hlobridge's defaults
    (``allocator="bfc"``, ``preallocate=False``, ``memory_fraction=0.75``).
    Keys: ``allocator`` (default/platform/bfc/cuda_async),
    ``memory_fraction``, ``preallocate``, ``visible_devices``, ``node_id``,
    ``num_nodes``, ``collective_memory_size``, ``platform_name``,
    ``stage_host_to_device``. Needs no GPU."""
    return dict(_native.cuda_client_options(**options))


def device_of(tensors: Sequence[Any]) -> Any:
    """The one ``torch.device`` all tensor inputs are on (``cpu`` when there
    are none); inputs on different devices are an :class:`ArgumentError`."""
    import torch

    devs = {t.device for t in tensors if isinstance(t, torch.Tensor)}
    if len(devs) > 1:
        raise ArgumentError(f"inputs are on different devices ({', '.join(sorted(map(str, devs)))}); "
                            f"one program runs on one device")
    return devs.pop() if devs else torch.device("cpu")


def _prepare(t: Any, i: int, cuda: bool) -> Any:
    import torch

    if not isinstance(t, torch.Tensor):
        raise ArgumentError(f"input {i} is a {type(t).__name__}, not a tensor")
    if t.requires_grad and torch.is_grad_enabled():
        t = t.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    if cuda and t.numel() and t.data_ptr() % 16:
        # XLA's GPU kernels assume 16-byte aligned parameters: a view needs a
        # fresh (aligned) allocation on the same device.
        t = t.clone()
    return t


class DeviceProgram:
    """A StableHLO module (text or a stitched program) that runs on its
    inputs' device (see the module docs)."""

    def __init__(self, program: Any, segments: Sequence[Any] = ()) -> None:
        text = getattr(program, "text", program)
        if not isinstance(text, str):
            raise ArgumentError(f"DeviceProgram: expected module text or a StitchedProgram, got "
                                f"{type(program).__name__}")
        self.text: str = text
        self.kernels: tuple[Any, ...] = tuple(getattr(program, "kernels", ()))
        self.segments: tuple[Any, ...] = tuple(segments) or tuple(getattr(program, "segments", ()))
        self._program = program
        self._exes: dict[str, Any] = {}
        self._xla: Any = None

    def _check_kernels(self, platform: str) -> None:
        for k in self.kernels:
            if k.backend != "interpret" and k.target != platform:
                from hlobridge._src.pallas import PallasLoweringError

                raise PallasLoweringError(k.name, k.target, f"the program embeds a {k.backend} kernel, "
                                          f"which the {platform} runtime cannot run")

    def executable(self, platform: str) -> tuple[Any, bool]:
        """The compiled program on ``platform``'s runtime and whether it was
        cached."""
        exe = self._exes.get(platform)
        if exe is not None:
            return exe, True
        if platform == "cpu":
            exe, hit = _native.compile(self.text)
        else:
            exe, hit = _native.device_compile(runtime(platform), self.text)
        self._exes[platform] = exe
        return exe, hit

    def __call__(self, *tensors: Any) -> list[Any]:
        """Runs on the inputs' device; returns the outputs there."""
        import torch

        t0 = time.perf_counter()
        dev = device_of(tensors)
        route = for_device(dev.type)
        if route is None:
            raise ArgumentError(f"inputs on {dev}: hlobridge runs programs on cpu and cuda tensors "
                                f"(and xla tensors through torch_xla)")
        if route.platform is None:  # torch_xla's runtime
            if self._xla is None:
                from hlobridge._src.tpu_adapter import TorchXlaProgram

                self._xla = TorchXlaProgram(self._program)
            return self._xla(*tensors)
        platform = route.platform
        self._check_kernels(platform)
        cuda = platform == "cuda"
        ins = [_prepare(t, i, cuda) for i, t in enumerate(tensors)]
        if cuda:
            rt = runtime("cuda")
            ids = list(rt.local_hardware_ids)
            if dev.index is not None and ids and dev.index != ids[0]:
                raise ArgumentError(f"inputs are on {dev}, but the CUDA runtime runs programs on "
                                    f"cuda:{ids[0]}; create it for that GPU with "
                                    f"hlobridge.devices.runtime('cuda', visible_devices=[{dev.index}]) "
                                    f"(or HLOBRIDGE_CUDA_VISIBLE_DEVICES) before its first use")
        exe, hit = self.executable(platform)
        if cuda:
            # Host wait for torch's pending work on the inputs (module docs).
            torch.cuda.current_stream(dev).synchronize()
        from torch.utils.dlpack import from_dlpack

        from hlobridge._src.receipt import compile_accounting, run_and_record

        accounting = compile_accounting("hit", 0.0) if hit else compile_accounting("miss", exe.compile_time_s)
        return run_and_record(exe, ins, platform=platform, segments=self.segments,
                              accounting=accounting, t0=t0, wrap=from_dlpack)


def run(program: Any, *tensors: Any) -> list[Any]:
    """One-shot :class:`DeviceProgram` (compiled programs are cached by
    content on each runtime, so repeating a call does not recompile)."""
    return DeviceProgram(program)(*tensors)
