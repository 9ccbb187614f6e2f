"""One compiled FX graph: lowered piece by piece, stitched into ONE StableHLO
module, compiled once per concrete input signature, run zero-copy.

Building a signature (first call with new input shapes/dtypes/values):

1. :func:`~hlobridge._src.dynamo.partition.partition` splits the graph at
   ``call_jax`` nodes;
2. :func:`~hlobridge._src.dynamo.stitch_partition.stitch_partition` lowers
   each torch piece with the engine (:mod:`hlobridge._src.dynamo.engine`)
   and each JAX piece with ``jax.jit``, and stitches them into one ``@main``
   (the step ``hb.call_torch`` shares);
3. :func:`hlobridge._native.compile` compiles it (content-cached).

Graph inputs (parameters, buffers, activations) are program inputs, handed
to PJRT by pointer (:func:`hlobridge._native.execute`); graph outputs come
back as tensors aliasing PJRT's buffers. An output that is a graph input
itself is returned as that input, without a copy.

Mutated inputs (:meth:`CompiledGraph.alias_mutated_inputs`, inference
graphs): AOTAutograd functionalizes an in-place update of a graph input (a
static KV cache's ``index_copy_``) into an extra output holding the input's
new value, and copies it back into the input after the call. Such an input
is marked ``tf.aliasing_output`` in the program (by the stitcher:
:mod:`hlobridge._src.dynamo.aliasing`) and donated on the hot path,
so XLA updates the tensor's own memory instead of writing a fresh copy of
it; the native call then returns the input itself, whose ``copy_`` onto
itself torch skips (``_native.GraphCall``: only where the result's buffer
really is the input's memory).
"""

from __future__ import annotations

import json
import re
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils.dlpack import from_dlpack

from hlobridge import _native
from hlobridge._src.errors import ArgumentError, CompileBackendError, DtypeError
from hlobridge._src.dynamo.engine import TensorSpec
from hlobridge._src.dynamo.partition import Partition, partition
from hlobridge._src.dynamo.random_inputs import RandomInput, lift_random_inputs
from hlobridge._src.dynamo.stitch_partition import stitch_partition
from hlobridge._src.dtypes import BY_CODE as _BY_CODE, CODES as _CODES, PLAIN as _PLAIN
from hlobridge._src.entry_cache import MISS as _MISS
from hlobridge._src.receipt import Segment, cache_accounting, run_and_record

__all__ = ["StitchedSegment", "Program", "CompiledGraph", "compiled_graphs", "graphs_compiled", "dynamo_input_names",
           "name_inputs"]

_perf = time.perf_counter


@dataclass(frozen=True)
class StitchedSegment(Segment):
    """A segment of a stitched ``torch.compile`` program (receipt entry).
    ``fingerprint`` is the fused program's; the extra fields say how the
    segment was made."""

    engine: str = ""
    """Lowering engine: ``"torch_xla_lazy"`` for torch segments, ``"jax.jit"``
    for JAX ones."""
    graph: str = ""
    """The compiled graph it belongs to (``"forward #0"``, ``"backward #0"``...)."""
    ops: int = 0
    """Ops the segment contributed before inlining and dead-code removal."""
    constants: int = 0
    """Scalar constants the segment reads that torch_xla made parameters:
    each is stitched as a one-constant module that XLA folds into it (not
    listed as a segment of its own)."""


@dataclass
class Program:
    """The executable for one input signature of a graph."""

    exe: _native.Executable
    text: str
    report: dict[str, Any]
    segments: tuple[StitchedSegment, ...]
    inputs: list[int]
    """Graph input position of each program input (before the constants)."""
    constants: list[torch.Tensor]
    shapes: list[tuple[int, ...]]
    codes: list[int]
    outputs: list[tuple[str, int] | None]
    """Per graph output: ``("prog", j)`` (program result j), ``("arg", i)``
    (graph input i) or ``None``."""
    lower_s: float
    compile_s: float
    outcome: str
    segment_texts: list[str] = field(default_factory=list)
    """Each segment's module text, before stitching."""
    slow_calls: int = 0
    """Calls served by the general path."""
    fast: _native.GraphCall | None = None
    """The native hot path of this program (``None`` when its inputs are
    not all plain-dtype tensors): see :meth:`CompiledGraph.__call__`."""
    plan: tuple[list[tuple[str, str, bool]], list[tuple[str, str, str, str, list[str], list[str]]],
                list[str]] | None = None
    """What was stitched: ``(inputs, segments, outputs)`` as passed to
    :func:`hlobridge._native.stitch` (references, no copies), for
    :func:`hlobridge.viz`."""
    aliases: list[tuple[int, int]] = field(default_factory=list)
    """``(k, j)``: program input ``k`` is marked ``tf.aliasing_output = j``
    (a mutated input written in place as result ``j``)."""

    @property
    def calls(self) -> int:
        """How many calls ran this program."""
        return self.slow_calls + (self.fast.calls if self.fast is not None else 0)


_registry_lock = threading.Lock()
_graphs: list[weakref.ref[CompiledGraph]] = []
"""Weak references: the registry never keeps a graph (and its programs'
executables, which hold memory mappings of their code) alive."""
_graphs_made = 0
"""How many graphs were compiled so far (the next one's ``seq``)."""


def compiled_graphs(since: int = 0) -> list[CompiledGraph]:
    """The graphs the backend compiled in this process that are still alive,
    oldest first. A graph lives as long as what runs it (Dynamo's cache of
    the compiled frame, a compiled model); after ``torch._dynamo.reset()``
    or once its model is gone it is freed with its programs. ``since``: only
    the graphs whose :attr:`CompiledGraph.seq` is at least that (take
    :func:`graphs_compiled` before a call to get the graphs it compiled)."""
    with _registry_lock:
        live = [g for r in _graphs if (g := r()) is not None]
    return [g for g in live if g.seq >= since]


def graphs_compiled() -> int:
    """How many graphs the backend has compiled in this process so far (the
    :attr:`CompiledGraph.seq` the next one gets)."""
    with _registry_lock:
        return _graphs_made


class CompiledGraph:
    """The callable the backend returns for one FX graph: called with the
    graph's inputs, returns its outputs. Takes the inputs either as
    arguments or boxed (one list: AOTAutograd's convention for forward
    graphs; graph inputs are never lists)."""


    def __init__(self, gm: torch.fx.GraphModule, label: str) -> None:
        # An instance attribute, so that wrappers (functools.wraps copies
        # __dict__) keep telling AOTAutograd that we take boxed inputs.
        self._boxed_call = True
        self.gm = gm
        self.label = label
        # AOTAutograd calls its compilers with its FakeTensorMode active, but
        # the graph's ``get_attr`` constants (tensors a model creates in
        # ``forward``, e.g. Hugging Face's ``torch.tensor([])``) are real:
        # any op on them (``detach``) must run outside fake mode.
        with unset_fake_temporarily():
            self.random_inputs: list[RandomInput] = lift_random_inputs(gm)
            """Random ops cut out of the graph: drawn in torch and appended
            to the inputs on every call (:mod:`hlobridge._src.dynamo.random_inputs`)."""
            self.partition: Partition = partition(gm)
        self.programs: dict[tuple[Any, ...], Program] = {}
        self.input_names: dict[str, str] = {}
        """Placeholder name -> what the user calls that input (``x``,
        ``fc1.weight``), where known (:func:`name_inputs`); for drawings."""
        self.origin: tuple[Any, Any] | None = None
        """``(code, owner)``: the code object Dynamo compiled this graph from
        and a weak reference to the module whose method it is (``None`` for
        a function); ``None`` for a train step's graph. How
        :func:`hlobridge.viz` finds a compiled model's graphs."""
        self.platform = _native.runtime().platform
        self._last: Program | None = None
        """The program of the last call: tried first, natively."""
        self._fast: _native.GraphCall | None = None
        """``self._last.fast`` when the graph draws no random inputs: what
        :meth:`__call__` runs first."""
        self.mutations: list[tuple[int, int]] = []
        """``(output, input)``: graph output ``output`` is the new value of
        graph input ``input`` (:meth:`alias_mutated_inputs`)."""
        global _graphs_made
        with _registry_lock:
            self.seq: int = _graphs_made
            """Order of compilation in this process (0 for the first graph)."""
            _graphs_made += 1
            _graphs[:] = [r for r in _graphs if r() is not None]
            _graphs.append(weakref.ref(self))

    def alias_mutated_inputs(self, mutations: list[tuple[int, int]]) -> None:
        """Declare that graph output ``o`` is the new value of graph input
        ``i`` for each ``(o, i)`` (AOTAutograd's mutated inputs, which it
        copies back after the call): programs built from now on update those
        inputs in place (see the module docs)."""
        self.mutations = list(mutations)

    # -- running --------------------------------------------------------------
    def __call__(self, *args: Any) -> list[torch.Tensor | None]:
        # The hot path: the last call's program, in ONE native call
        # (``_native.GraphCall``: input checks, zero-copy views, execution,
        # output import, receipt), with everything that does not depend on
        # the inputs fixed when the program was built.
        fast = self._fast
        if fast is not None:
            outs = fast(*args)
            if outs is not _MISS:
                return outs  # type: ignore[no-any-return]
        return self._call(args)

    def _call(self, args: tuple[Any, ...]) -> list[torch.Tensor | None]:
        """Every call the hot path does not serve: random inputs drawn, a new
        signature built, non-contiguous inputs copied."""
        t0 = _perf()
        if len(args) == 1 and type(args[0]) is list:
            args = tuple(args[0])
        if self.random_inputs:
            args = (*args, *(r.draw() for r in self.random_inputs))
        outs = self._run_fast(args)
        if outs is not _MISS:
            return outs  # type: ignore[no-any-return]
        key = tuple((a.shape, a.dtype, a.device) if isinstance(a, torch.Tensor) else a
                    for a in args)
        prog = self.programs.get(key)
        built = None
        if prog is None:
            prog = built = self._build(list(args))
            self.programs[key] = prog
            self._register_fast(prog)
        self._last = prog
        self._fast = None if self.random_inputs else prog.fast
        accounting = cache_accounting(built)
        ins: list[torch.Tensor] = []
        copies = 0
        for i in prog.inputs:
            t = args[i]
            if not t.is_contiguous():
                t = t.contiguous()
                copies += 1
            ins.append(t.detach())
        ins.extend(prog.constants)
        results = run_and_record(prog.exe, ins, shapes=prog.shapes, codes=prog.codes,
                                 platform=self.platform, segments=prog.segments,
                                 accounting=accounting, t0=t0, wrap=from_dlpack, copied=copies)
        prog.slow_calls += 1
        outs: list[torch.Tensor | None] = []
        for o in prog.outputs:
            if o is None:
                outs.append(None)
            elif o[0] == "prog":
                outs.append(results[o[1]])
            else:
                outs.append(args[o[1]])
        return outs

    def try_fast(self, args: tuple[Any, ...] | list[Any]) -> Any:
        """Run the last call's program natively if ``args`` fit its
        signature (every program input's dtype, shape, density and device is
        checked); otherwise return the fast path's miss sentinel, without
        side effects. Inputs the program does not read are not checked."""
        if self.random_inputs:
            args = (*args, *(r.draw() for r in self.random_inputs))
        return self._run_fast(args)

    def _run_fast(self, args: tuple[Any, ...] | list[Any]) -> Any:
        last = self._last
        if last is None or last.fast is None:
            return _MISS
        return last.fast(*args)

    def _register_fast(self, prog: Program) -> None:
        """Give ``prog`` its native hot path (when all program inputs are
        tensors of supported, non-complex dtypes): a ``_native.GraphCall``
        holding what each call needs, computed once here."""
        dtypes = [_BY_CODE.get(c) for c in prog.codes]
        if any(d is None or d not in _PLAIN for d in dtypes):
            return
        n = len(prog.inputs)
        outputs = [None if o is None else o[1] if o[0] == "prog" else -1 - o[1]
                   for o in prog.outputs]
        prog.fast = _native.GraphCall(list(prog.inputs), dtypes[:n], prog.codes,
                                      [list(s) for s in prog.shapes[:n]], prog.constants,
                                      outputs, prog.exe, list(prog.segments), self.platform,
                                      prog.aliases)

    # -- building -------------------------------------------------------------
    def _build(self, args: list[Any]) -> Program:
        part = self.partition
        types: dict[str, TensorSpec] = {}
        for name, a in zip(part.placeholders, args):
            if isinstance(a, torch.Tensor):
                if a.device.type != "cpu":
                    raise ArgumentError(f"hlobridge backend: input {name} is on {a.device}; the "
                                        f"hlobridge runtime is the {self.platform} plugin")
                if a.dtype not in _CODES:
                    raise DtypeError(f"hlobridge backend: input {name} has unsupported dtype "
                                     f"{a.dtype}")
                types[name] = (tuple(a.shape), a.dtype)
            elif a is not None and not isinstance(a, (int, float, bool)):
                raise CompileBackendError(f"hlobridge backend: graph input {name} is a "
                                          f"{type(a).__name__}")
        if any(not isinstance(a, torch.Tensor) and a is not None for a in args):
            raise CompileBackendError(
                "hlobridge backend: the graph has symbolic (dynamic) sizes as inputs; compile "
                "with torch.compile(..., dynamic=False) (each new shape then recompiles)")
        sp = stitch_partition(part, types, label=self.label, platform=self.platform,
                              mutations=self.mutations)
        text, segs, engines, consts = sp.text, sp.segs, sp.engines, sp.consts
        used_args, used_consts, outputs = sp.used_args, sp.used_consts, sp.outputs
        exe, hit = _native.compile(text)
        report = json.loads(sp.report_json)
        ops = {s["name"]: s.get("ops", 0) for s in report.get("segments", [])}
        # The receipt lists the computing segments; each scalar constant
        # segment (XLA folds it) is counted on the segment that reads it,
        # and a reshape segment (a 0-d bool input as a vector) is left out.
        scalar = {s[5][0] for s, e in zip(segs, engines) if e == "constant"}
        segments = tuple(
            StitchedSegment(name=s[0], producer=s[1], fingerprint=exe.fingerprint,
                            num_inputs=len(s[4]), num_outputs=len(s[5]), engine=e,
                            graph=self.label, ops=int(ops.get(s[0], 0)),
                            constants=sum(1 for h in s[4] if h in scalar))
            for s, e in zip(segs, engines) if e not in ("constant", "reshape"))
        const_tensors = [consts[n].contiguous() for n in used_consts]
        shapes = [types[part.placeholders[i]][0] for i in used_args]
        shapes += [tuple(c.shape) for c in const_tensors]
        codes = [_CODES[types[part.placeholders[i]][1]] for i in used_args]
        codes += [_CODES[c.dtype] for c in const_tensors]
        return Program(exe=exe, text=text, report=report, segments=segments, inputs=used_args,
                       constants=const_tensors, shapes=shapes, codes=codes, outputs=outputs,
                       lower_s=sp.lower_s, compile_s=0.0 if hit else exe.compile_time_s,
                       outcome="content" if hit else "miss", segment_texts=[s[2] for s in segs],
                       plan=sp.plan, aliases=sp.aliases)


_SOURCE_KEY = re.compile(r"\[['\"]?([^'\"\]]+)['\"]?\]|\.(\w+)")


def _source_name(source: str) -> str | None:
    """``L['self']._modules['fc1']._parameters['weight']`` -> ``fc1.weight``,
    ``L['x']`` -> ``x``; ``None`` for a source of another shape."""
    keys = [a or b for a, b in _SOURCE_KEY.findall(source)]
    if not keys or not source.startswith(("L[", "G[")):
        return None
    attr = {"_modules", "_parameters", "_buffers"}
    if any(k in attr for k in keys):
        keys = keys[1:]  # the module itself (``self``)
    keys = [k for k in keys if k not in attr]
    return ".".join(keys) if keys else None


def dynamo_input_names(gm: torch.fx.GraphModule) -> tuple[list[str], tuple[Any, Any] | None]:
    """The user's name of each input of a Dynamo graph (parameter FQNs,
    argument names; the placeholder name where Dynamo says nothing) and
    its origin (:attr:`CompiledGraph.origin`; ``None`` if unknown). Cheap:
    read once per graph at compile time."""
    names = []
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        ga = n.meta.get("grapharg")
        src = getattr(ga, "source", None)
        try:
            name = _source_name(src.name()) if src is not None else None
        except Exception:  # a source kind without a plain name
            name = None
        names.append(name or n.name)
    origin = None
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
        code = getattr(tx, "f_code", None)
        owner = (getattr(tx, "f_locals", None) or {}).get("self")
        if code is not None:
            origin = (code, weakref.ref(owner) if isinstance(owner, torch.nn.Module) else None)
    except Exception:  # not inside Dynamo's tracing (or a torch without it)
        origin = None
    return names, origin


_AOT_INPUT = re.compile(r"primals_(\d+)|arg(\d+)_1")


def name_inputs(graph: Any, names: list[str], origin: Any = None, aot: bool = True) -> None:
    """Tell ``graph`` (a :class:`CompiledGraph`, or a split graph's pieces)
    what its inputs are called: with ``aot``, AOTAutograd's ``primals_<k>``
    / ``arg<k>_1`` placeholders are the Dynamo graph's inputs k-1 / k;
    without, the placeholders are ``names`` in order (a train step)."""
    for g in getattr(graph, "pieces", None) or [graph]:
        if not isinstance(g, CompiledGraph):
            continue
        g.origin = origin
        for i, p in enumerate(g.partition.placeholders):
            k = None
            if not aot:
                k = i
            elif (m := _AOT_INPUT.fullmatch(p)) is not None:
                k = int(m[1]) - 1 if m[1] is not None else int(m[2])
            if k is not None and 0 <= k < len(names):
                g.input_names[p] = names[k]
