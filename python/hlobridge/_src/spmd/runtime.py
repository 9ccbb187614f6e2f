"""``initialize()``: start JAX's multi-process runtime from torchrun's
environment, so that ``torchrun --nproc-per-node N script.py`` runs
hlobridge programs SPMD over every process's devices.

torchrun sets ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE`` and
``LOCAL_RANK``. ``MASTER_PORT`` belongs to torch's own TCP store, so JAX's
coordinator (run by rank 0) listens on another port: ``MASTER_PORT + 1``
unless ``coordinator_port`` or ``HLOBRIDGE_COORDINATOR_PORT`` says otherwise.
On CPU each process gets ``local_devices`` devices
(``jax_num_cpu_devices``; default ``HLOBRIDGE_LOCAL_DEVICES``, else 1);
cross-process collectives go through gloo (JAX's default CPU collectives).
With ``platform="gpu"`` each process drives the GPU ``LOCAL_RANK``; with
``"tpu"`` JAX finds the host's chips itself (both untested here: this
machine has no accelerator).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from hlobridge._src import config
from hlobridge._src.errors import DistributedInitError

__all__ = ["DistributedInfo", "initialize", "is_initialized", "process_info", "shutdown"]

_STATE: dict[str, Any] = {}


@dataclass(frozen=True)
class DistributedInfo:
    """Where this process stands in JAX's distributed runtime."""

    process_id: int
    num_processes: int
    local_rank: int
    coordinator: str
    """``host:port`` of JAX's coordinator."""
    local_devices: int
    global_devices: int
    platform: str


def _env_int(env: dict[str, str], name: str, given: int | None) -> int:
    if given is not None:
        return int(given)
    raw = config.get(name, env) if name.startswith(config.PREFIX) else env.get(name)
    if raw is None:
        raise DistributedInitError(
            f"hlobridge.distributed.initialize: {name} is not set; run under torchrun "
            f"(torchrun --nproc-per-node N script.py) or pass it as an argument")
    try:
        return int(raw)
    except ValueError:
        raise DistributedInitError(f"hlobridge.distributed.initialize: {name}={raw!r} is not an "
                                   f"integer") from None


def initialize(*, coordinator_address: str | None = None, coordinator_port: int | None = None,
               num_processes: int | None = None, process_id: int | None = None,
               local_devices: int | None = None, platform: str = "cpu",
               timeout_s: int = 120) -> DistributedInfo:
    """Start ``jax.distributed`` for this process from torchrun's
    environment (arguments override it) and return where it stands. Calling
    it again with the same settings returns the same info; different
    settings raise :class:`DistributedInitError`, as does an environment
    without torchrun's variables, a port out of range, or a JAX backend that
    already started (JAX must not have run anything before this call)."""
    env = dict(os.environ)
    nproc = _env_int(env, "WORLD_SIZE", num_processes)
    rank = _env_int(env, "RANK", process_id)
    local_rank = int(env.get("LOCAL_RANK", "0"))
    if not 0 <= rank < nproc:
        raise DistributedInitError(f"hlobridge.distributed.initialize: RANK={rank} is not in "
                                   f"[0, WORLD_SIZE={nproc})")
    if coordinator_address is None:
        host = env.get("MASTER_ADDR", "127.0.0.1")
        if coordinator_port is None and config.get("HLOBRIDGE_COORDINATOR_PORT", env):
            coordinator_port = _env_int(env, "HLOBRIDGE_COORDINATOR_PORT", None)
        if coordinator_port is None:
            coordinator_port = _env_int(env, "MASTER_PORT", None) + 1
        if not 0 < coordinator_port < 65536:
            raise DistributedInitError(
                f"hlobridge.distributed.initialize: coordinator port {coordinator_port} is out of "
                f"range (MASTER_PORT + 1 by default; set HLOBRIDGE_COORDINATOR_PORT)")
        coordinator_address = f"{host}:{coordinator_port}"
    if local_devices is None:
        local_devices = _env_int(env, "HLOBRIDGE_LOCAL_DEVICES", None)
    if local_devices < 1:
        raise DistributedInitError(f"hlobridge.distributed.initialize: local_devices="
                                   f"{local_devices} must be at least 1")
    key = (coordinator_address, nproc, rank, local_devices, platform)
    if _STATE.get("key") == key:
        info: DistributedInfo = _STATE["info"]
        return info
    if _STATE:
        raise DistributedInitError(
            f"hlobridge.distributed.initialize: already initialized with {_STATE['key']}, "
            f"now asked for {key}")
    import jax

    from hlobridge._src.spmd.jax_private import backends_started

    if backends_started():
        raise DistributedInitError(
            "hlobridge.distributed.initialize: JAX's backend already started in this process "
            "(something ran a JAX computation or listed devices first); call initialize() before "
            "any JAX work, e.g. at the top of the script")
    ids = None
    if platform == "cpu":
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", local_devices)
    elif platform in ("gpu", "cuda"):
        ids = [local_rank]  # one GPU per process, torchrun's usual layout
    # tpu: the process owns its host's chips; JAX finds them.
    try:
        jax.distributed.initialize(coordinator_address, nproc, rank, local_device_ids=ids,
                                   initialization_timeout=timeout_s)
    except Exception as e:  # JAX raises RuntimeError / XlaRuntimeError
        raise DistributedInitError(f"hlobridge.distributed.initialize: jax.distributed failed "
                                   f"({coordinator_address}, {nproc} processes, rank {rank}): "
                                   f"{e}") from e
    info = DistributedInfo(process_id=jax.process_index(), num_processes=jax.process_count(),
                           local_rank=local_rank, coordinator=coordinator_address,
                           local_devices=jax.local_device_count(),
                           global_devices=jax.device_count(), platform=platform)
    _STATE.update(key=key, info=info)
    return info


def is_initialized() -> bool:
    """True after a successful :func:`initialize` in this process."""
    return bool(_STATE)


def process_info() -> DistributedInfo:
    """The info :func:`initialize` returned."""
    if not _STATE:
        raise DistributedInitError("hlobridge.distributed: initialize() has not been called")
    info: DistributedInfo = _STATE["info"]
    return info


def shutdown() -> None:
    """Shut JAX's distributed runtime down (all processes should call it)."""
    if _STATE:
        import jax

        jax.distributed.shutdown()
        _STATE.clear()
