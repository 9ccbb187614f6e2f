"""Type stubs of the native extension module."""

from collections.abc import Sequence
from typing_extensions import CapsuleType
from typing import Any, Final

# The exception classes the native module raises and exposes are those of
# hlobridge.errors (python/src/errors.rs looks them up by name).
from hlobridge.errors import (
    AcceleratorNotInstalledError as AcceleratorNotInstalledError,
    ArgumentError as ArgumentError,
    BridgeError as BridgeError,
    BufferDeletedError as BufferDeletedError,
    CollectiveRewriteError as CollectiveRewriteError,
    CompileError as CompileError,
    DtypeError as DtypeError,
    FileError as FileError,
    ForkError as ForkError,
    InvalidIrError as InvalidIrError,
    OutOfMemoryError as OutOfMemoryError,
    OutputError as OutputError,
    ParseError as ParseError,
    PjrtError as PjrtError,
    PluginError as PluginError,
    PluginLoadError as PluginLoadError,
    PluginNotFoundError as PluginNotFoundError,
    ShapeAssertionError as ShapeAssertionError,
    ShapeRefinementError as ShapeRefinementError,
    StitchError as StitchError,
    TargetError as TargetError,
    UnknownTargetError as UnknownTargetError,
)

__version__: str

ELEMENT_TYPES: Final[dict[str, int]]
"""Every element type's MLIR spelling (``f32``, ``bf16``, ``i1``, ...) → raw PJRT code."""
VIEW_ALIGNMENT: Final[int]
"""Byte alignment an input needs to be used in place (zero-copy view)."""

def format_module(
    text: str, generic: bool = False, debug_info: bool = True, file: str = "<input>"
) -> str:
    """Parse module text and print it back (pretty, or generic form)."""

def refine_shapes(module_text: str, arg_shapes: list[list[int]]) -> str:
    """Specialise the public ``@main`` of a module with dynamic (``?``)
    dimensions to ``arg_shapes`` (one list of dims per argument) and return
    the fully static module text (GIL released). Raises
    ``ShapeAssertionError`` when a shape assertion fails, and
    ``ShapeRefinementError`` or ``ParseError`` otherwise."""

class Runtime:
    """The process-wide PJRT runtime (one client on one plugin)."""

    @property
    def platform(self) -> str:
        """Platform name (``cpu``, ``cuda``, ...)."""
    @property
    def platform_version(self) -> str:
        """Platform version string."""
    @property
    def device_count(self) -> int:
        """Number of addressable devices."""
    @property
    def plugin_path(self) -> str:
        """Path of the loaded plugin."""
    @property
    def discovered_by(self) -> str:
        """How the plugin was found (``entry_point``, ``HLOBRIDGE_PLUGIN``, ...)."""
    @property
    def memory_pool(self) -> dict[str, int | bool]:
        """The plugin memory cache (``HLOBRIDGE_PLUGIN_MEMORY_POOL``):
        ``installed``, ``reused``, ``mapped``, ``unmapped``,
        ``cached_bytes``, ``live_bytes``."""
    def trim_memory(self) -> int:
        """Return the plugin memory cache's kept blocks to the OS; the bytes
        released."""

def runtime() -> Runtime:
    """The process-wide runtime, created on first call (plugin discovery and
    client creation run once, with the GIL released)."""

def _after_fork_in_child() -> None:
    """``os.register_at_fork(after_in_child=...)`` hook (installed at import):
    forget the inherited client's compiled programs without destroying them."""

class Executable:
    """A compiled, loaded program."""

    @property
    def num_outputs(self) -> int:
        """Number of outputs."""
    @property
    def output_dtypes(self) -> list[str]:
        """Output element types (MLIR spellings)."""
    @property
    def output_shapes(self) -> list[list[int]]:
        """Output shapes."""
    @property
    def fingerprint(self) -> str:
        """Content fingerprint of the module text and compile options (hex)."""
    @property
    def compile_time_s(self) -> float:
        """Seconds the PJRT compilation took."""
    @property
    def from_disk_cache(self) -> bool:
        """Loaded from the persistent compile cache instead of compiled."""
    @property
    def host_kernels(self) -> dict[str, int]:
        """Host-kernel calls the host lowering put in, by custom-call target
        (``{"hlobridge_gemm_nn": 2, "hlobridge_conv": 1}``); the same names
        every front end (serve, the CLI, the Rust runtime) reports."""
    @property
    def fusions(self) -> list[tuple[str, str, list[str]]]:
        """Fusions of the optimized program: ``(name, kind, opcodes)`` each."""
    @property
    def platform(self) -> str:
        """Platform the executable runs on."""

def compile(
    text: str, xla_options: dict[str, bool | int | float | str] | None = None
) -> tuple[Executable, bool]:
    """Compile StableHLO module text (GIL released), or return the cached
    executable for identical text and options. On an in-memory miss the
    persistent disk cache is tried before compiling (see
    ``compile_cache_info``). Returns ``(executable, cache_hit)``; ``cache_hit``
    is true for in-memory hits only (``Executable.from_disk_cache`` tells a
    disk hit)."""

def clear_compile_cache() -> int:
    """Drop the in-memory compile cache (its index and the recently used
    programs it keeps alive); returns how many indexed programs were still
    alive (held by callers, who keep them). The persistent (disk) cache is
    left alone."""

def compile_cache_info() -> dict[str, str | bool | int]:
    """The persistent compile cache: ``dir``, ``enabled``, ``entries`` and
    ``bytes`` (on disk now), ``max_bytes``, and this process's ``disk_hits``
    and ``disk_writes``. Configured by ``HLOBRIDGE_CACHE`` (``0`` disables),
    ``HLOBRIDGE_CACHE_DIR`` (default ``$XDG_CACHE_HOME/hlobridge/executables``
    or ``~/.cache/hlobridge/executables``) and ``HLOBRIDGE_CACHE_MAX_BYTES``
    (default 2 GiB, least recently used entries evicted)."""

def execute(
    exe: Executable,
    pointers: Sequence[int],
    shapes: Sequence[Sequence[int]],
    dtypes: Sequence[int],
    owners: Sequence[object],
) -> tuple[list[CapsuleType], list[int], int, int, float]:
    """Run ``exe`` on dense host arrays given by data pointer, shape, element
    type code (``ELEMENT_TYPES``) and owner (kept alive while PJRT uses the
    memory). Aligned inputs are used in place, others copied.

    Returns ``(outputs, output_pointers, views, copies, seconds)``: DLPack
    capsules (consume with ``torch.from_dlpack``), each output's PJRT buffer
    address, how many inputs were viewed / copied, and the run's wall time.
    """

def stats() -> dict[str, int]:
    """Process-wide counters: input_views, input_copies, input_copied_bytes,
    outputs, compiles (real PJRT compiles), cache_hits (in-memory),
    disk_cache_hits (executables loaded from the persistent cache, not
    compiles), executions, host_gemm_calls (matrix products compiled as
    host GEMM kernel calls on the CPU plugin; oneDNN's included),
    host_conv_calls (convolutions compiled as host convolution kernel
    calls), onednn_matmul_calls (of the products, those compiled as calls of
    the plugin's oneDNN matrix product), dot_operand_rewrites (products left
    to XLA whose operands were given unmerged, with their transposes and
    scalar scalings folded: ``HLOBRIDGE_DOT_OPERANDS``), reduce_stages
    (large float reductions run in two stages: ``HLOBRIDGE_REDUCE_STAGES``),
    onednn_weight_gradients (convolution weight gradients the host kernel has
    run on oneDNN since the process started: ``HLOBRIDGE_ONEDNN_LIBRARY``;
    not reset by :func:`reset_stats`), onednn_data_convolutions (grouped
    forward convolutions and strided ones' input gradients the host kernel
    has run on oneDNN; not reset either)."""

def reset_stats() -> None:
    """Reset every counter to zero (the two ``onednn_*`` run-time counts excepted)."""

def record_cache_hit() -> tuple[int, int]:
    """Count a cache hit served outside the native compile cache; returns the
    new totals ``(cache_hits, compiles)``."""

def stitch(
    inputs: list[tuple[str, str, bool]],
    segments: list[tuple[str, str, str, str, list[str], list[str]]],
    outputs: list[str],
    inline: bool = True,
    aliases: list[tuple[int, int]] = ...,
) -> tuple[str, str]:
    """Merge segments ``(name, producer, module_text, entry, input_handles,
    output_handles)`` into one module; returns ``(fused_text, report_json)``.
    ``aliases``: ``(input, output)`` positions of program inputs updated in
    place as outputs (``tf.aliasing_output``; a bad pair raises
    :class:`~hlobridge.errors.StitchError`)."""

def viz_programs(
    programs: list[tuple[str, list[tuple[str, str, bool]],
                         list[tuple[str, str, str, str, list[str], list[str]]], list[str]]],
    path: str,
    title: str,
) -> tuple[int, int]:
    """Draw stitched programs ``(label, inputs, segments, outputs)`` (as
    passed to :func:`stitch`) into ``path`` with the renderer of
    ``hlobridge viz``: ``.html`` (one section per program), ``.svg`` (built-in
    layout) or ``.dot`` (several programs side by side, nodes prefixed by
    their label). Returns ``(nodes, edges)`` drawn."""

def rewrite_collectives(
    text: str,
    num_devices: int,
    groups: list[list[int]] | None = None,
    first_channel: int | None = None,
) -> tuple[str, str]:
    """Rewrite the collectives of ``text`` into the global-device-id form for
    ``num_devices`` devices, all-reduces over ``groups`` (global device ids;
    default one group of all); returns ``(text, report_json)``. Raises
    :class:`CollectiveRewriteError` for one it cannot rewrite."""

def fast_init(
    tensor_type: type,
    parameter_type: type,
    method_type: type,
    is_grad_enabled: object,
    from_dlpack: object,
    x64_state: object,
    miss: object,
) -> None:
    """Hand the native ``call_jax`` fast path the torch/JAX objects it needs
    (called once by ``hlobridge.jax_bridge``)."""

def fast_call(fn: object, args: tuple[object, ...]) -> object:
    """Serve ``call_jax(fn, *args)`` natively when every argument is a plain,
    dense CPU tensor not tracked by autograd and the signature was
    registered; otherwise return the ``miss`` sentinel given to ``fast_init``."""

def fast_register(
    fn: object,
    x64: bool,
    dtypes: Sequence[object],
    codes: Sequence[int],
    shapes: Sequence[Sequence[int]],
    exe: Executable,
    out_tree: object | None,
    segments: object,
    platform: str,
) -> None:
    """Register a compiled signature of ``fn`` for the fast path
    (``out_tree`` is ``None`` when ``fn`` returns one array)."""

class GraphCall:
    """One compiled ``torch.compile`` graph program, ready to run in one
    native call (``hlobridge.dynamo.CompiledGraph``'s hot path)."""

    def __init__(
        self,
        picks: Sequence[int],
        dtypes: Sequence[object],
        codes: Sequence[int],
        shapes: Sequence[Sequence[int]],
        constants: Sequence[object],
        outputs: Sequence[int | None],
        exe: Executable,
        segments: object,
        platform: str,
        aliases: Sequence[tuple[int, int]] = ...,
    ) -> None:
        """``picks``: graph input position of each program input, with its
        ``dtypes``, ``shapes`` (and ``codes``, constants' included);
        ``constants``: dense tensors appended after them; ``outputs``: per
        graph output, ``j >= 0`` (program result ``j``), ``-1 - i`` (graph
        input ``i``) or ``None``; ``aliases``: ``(k, j)``, program input
        ``k`` marked ``tf.aliasing_output = j`` and donated (written in
        place; the call returns the input for result ``j`` when it was)."""
    @property
    def calls(self) -> int:
        """Calls served."""
    def __call__(self, *args: object) -> object:
        """Run on the graph inputs (``(list,)``, or the inputs themselves) and
        return the outputs as a list, or the ``miss`` sentinel given to
        ``fast_init`` (no side effects) when an input does not fit."""

def fast_forget(owner_id: int) -> int:
    """Drop the fast-path entries of the object with this ``id()``."""

def fast_clear() -> int:
    """Drop every fast-path entry; returns how many there were."""

def record_receipt(raw: tuple[object, ...]) -> None:
    """Store this thread's last receipt (the fields of ``hlobridge.Receipt``)."""

def last_receipt_raw() -> tuple[object, ...] | None:
    """This thread's last receipt fields, or ``None``."""

def compile_for_target(
    target: str, text: str, partitions: int = 1, replicas: int = 1, shardy: bool = False
) -> dict[str, Any]:
    """Compile module text for ``target`` (deviceless for TPU/CUDA; on the CPU
    runtime's client, host-lowered, for ``cpu``); GIL released. Returns the
    report dict used by ``hlobridge.compile_for``."""

def known_targets() -> list[str]:
    """Every known target name (shipped table plus ``HLOBRIDGE_TARGETS``)."""

def accelerators() -> dict[str, str | None]:
    """Paths of libtpu, the CUDA PJRT plugin, the CUDA data dir and the Mosaic
    GPU runtime (or None)."""

def tpu_load_env() -> list[tuple[str, str]]:
    """libtpu's load-time variables and hlobridge's values for them, for a
    worker process's environment."""

# --- device runtimes (python/src/device_runtime.rs) ---------------------------

class DeviceRuntime:
    """A device runtime beside the CPU one (``hlobridge.devices.runtime("cuda")``)."""

    @property
    def platform(self) -> str:
        """Platform name (``cuda``, ...)."""
    @property
    def platform_version(self) -> str:
        """Platform version string."""
    @property
    def device_count(self) -> int:
        """Number of addressable devices."""
    @property
    def local_hardware_ids(self) -> list[int]:
        """Local hardware ids (CUDA ordinals) of the addressable devices."""
    @property
    def plugin_path(self) -> str:
        """Path of the loaded plugin."""

def cuda_client_options(**options: object) -> list[tuple[str, object]]:
    """The ``PJRT_Client_Create`` named values the CUDA runtime would get for
    these options (after ``HLOBRIDGE_CUDA_*``). Needs no GPU."""

def cuda_runtime(**options: object) -> DeviceRuntime:
    """The process-wide CUDA runtime, created on first call. Without the
    plugin: ``PluginNotFoundError``; without a usable GPU: ``PjrtError``;
    other options than the ones it was created with: ``ArgumentError``."""

def device_compile(runtime: DeviceRuntime, text: str) -> tuple[Executable, bool]:
    """Compile module text on a device runtime (no host rewrites), or return
    the cached executable. Returns ``(executable, cache_hit)``."""

def execute_dlpack(
    exe: Executable, capsules: Sequence[CapsuleType]
) -> tuple[list[CapsuleType], int, int, float]:
    """Run ``exe`` on unconsumed ``"dltensor"`` capsules (consumed; checked
    against the executable's client: device type and id, dtype, density).
    Returns ``(outputs, views, copies, seconds)``; outputs are capsules of
    buffers that are ready."""

# --- configuration (python/src/config.rs) --------------------------------------

def config_variables() -> list[tuple[str, str, str, str]]:
    """Every ``HLOBRIDGE_*`` variable: ``(name, default, meaning, read_by)``."""

def check_environment() -> list[str]:
    """One warning per unknown ``HLOBRIDGE_*`` variable set, naming the nearest known one."""

def host_gemm_kernel() -> str:
    """The host GEMM kernel's library in this process: ``gemm``, ``matrixmultiply`` or ``mkl``
    (``HLOBRIDGE_GEMM_KERNEL``; ``mkl`` only once PyTorch's MKL was found and passed its
    self-check, else ``gemm``)."""

# -- hlobridge-artifact (python/src/artifact.rs) --------------------------------

ARTIFACT_FORMAT: Final[str]
ARTIFACT_FORMAT_DYNAMIC: Final[str]

def artifact_bucket(manifest_text: str, rows: int) -> int:
    """The exported batch size a batch of ``rows`` runs on (the rule every
    front end shares); raises ``ArgumentError`` with the reason."""
    ...

def artifact_check_shapes(manifest_text: str, shapes: list[tuple[str, list[int]]]) -> dict[str, int]:
    """Check request input shapes against a dynamic artifact's constraints
    (the check ``hlobridge serve`` makes); returns each symbol's value.
    Raises ``ShapeAssertionError`` with ``.dim`` and ``.constraint``."""
    ...

def artifact_read(
    dir: str, producers: dict[str, str] | None = None
) -> tuple[str, list[tuple[str, str]], list[tuple[str, str, list[int], bytes]]]:
    """Read and verify an artifact once: ``(manifest_text, [(file, text)],
    [(weight, dtype, shape, bytes)])``."""

def artifact_write(
    dir: str,
    manifest_json: str,
    modules: list[tuple[str, str]],
    weights: list[tuple[str, str, list[int], bytes]],
) -> str:
    """Write an artifact; returns the manifest text as written."""

def predict_encode(tensors: list[tuple[str, str, list[int], bytes]]) -> bytes: ...
def predict_decode(buf: bytes) -> list[tuple[str, str, list[int], bytes]]: ...
def health_encode(service: str) -> bytes: ...
def health_decode(buf: bytes) -> int: ...
def metadata_decode(buf: bytes) -> tuple[str, str]: ...
