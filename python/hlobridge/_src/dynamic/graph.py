"""The callable the backend returns for a graph with symbolic sizes.

:class:`DynamicGraph` lowers its FX graph ONCE, when the backend compiles
it (:func:`hlobridge._src.dynamic.lower.lower_graph`: one module with ``?``
dimensions and shape assertions). A call with input shapes it has not seen
refines that module to them (:func:`hlobridge._src.dynamic.refine.refine`)
and compiles the result through the content-addressed compile cache
(``hlobridge._native.compile``); no Dynamo retrace and no torch lowering.
Each shape's program gets the same native hot path as a static graph
(``_native.GraphCall``), tried first for the shapes of the last call.

A call whose shapes violate a shape assertion raises
:class:`~hlobridge.errors.ShapeAssertionError` naming the dimension.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
from torch.utils.dlpack import from_dlpack

from hlobridge import _native
from hlobridge._src.dtypes import CODES, PLAIN
from hlobridge._src.dynamic.lower import DynamicModule, lower_graph
from hlobridge._src.dynamic.refine import refine
from hlobridge._src.entry_cache import MISS
from hlobridge._src.errors import ArgumentError, ShapeAssertionError
from hlobridge._src.receipt import cache_accounting, run_and_record

__all__ = ["DynamicGraph", "ShapeProgram", "counters", "dynamic_graphs"]

_perf = time.perf_counter
counters = {"graphs": 0, "refinements": 0, "compiles": 0}
"""Process-wide: dynamic graphs built (one per Dynamo trace), refinements
and XLA compiles (compile-cache misses) they did."""
_registry: list[DynamicGraph] = []
_registry_lock = threading.Lock()


def dynamic_graphs() -> list[DynamicGraph]:
    """Every dynamic graph built in this process, oldest first."""
    with _registry_lock:
        return list(_registry)


@dataclass
class ShapeProgram:
    """The dynamic module specialised to one set of input shapes."""

    exe: _native.Executable
    shapes: list[tuple[int, ...]]
    refine_s: float
    compile_s: float
    outcome: str
    """``"miss"`` (compiled) or ``"content"`` (the cache had it)."""
    fast: Any = None
    slow_calls: int = 0
    run_s: list[float] = field(default_factory=list)


class DynamicGraph:
    """See the module docs. Called like a
    :class:`~hlobridge._src.dynamo.program.CompiledGraph` (inputs as
    arguments or boxed in one list)."""

    def __init__(self, gm: torch.fx.GraphModule, label: str,
                 user_names: list[str] | None = None) -> None:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        from hlobridge._src.dynamo.partition import check_graph

        self._boxed_call = True
        self.gm = gm
        self.label = label
        with unset_fake_temporarily():
            check_graph(gm)
            self.input_names: dict[str, str] = _aot_names(gm, user_names or [])
            self.module: DynamicModule = lower_graph(gm, self.input_names)
        self.platform = _native.runtime().platform
        self.programs: dict[tuple[tuple[int, ...], ...], ShapeProgram] = {}
        self.origin: Any = None
        self._fast: Any = None
        self._lock = threading.Lock()
        m = self.module
        self._codes = [CODES[d] for d in m.dtypes]
        self._plain = all(d in PLAIN for d in m.dtypes) and \
            not any(o is not None and o[0] == "size" for o in m.outputs)
        from hlobridge._src.dynamo.program import StitchedSegment

        n_out = sum(1 for o in m.outputs if o is not None and o[0] == "prog")
        self._segment = StitchedSegment(
            name=f"{label} (dynamic)", producer="torch", fingerprint="", num_inputs=len(m.dtypes),
            num_outputs=n_out, engine="jax.export (symbolic)", graph=label)
        counters["graphs"] += 1
        with _registry_lock:
            _registry.append(self)

    @property
    def text(self) -> str:
        """The shape-polymorphic module."""
        return self.module.text

    # -- running --------------------------------------------------------------
    def __call__(self, *args: Any) -> list[Any]:
        fast = self._fast
        if fast is not None:
            outs = fast(*args)
            if outs is not MISS:
                return outs  # type: ignore[no-any-return]
        return self._call(args)

    def _call(self, args: tuple[Any, ...]) -> list[Any]:
        t0 = _perf()
        if len(args) == 1 and type(args[0]) is list:
            args = tuple(args[0])
        m = self.module
        ins: list[torch.Tensor] = []
        for i in m.inputs:
            a = args[i]
            if not isinstance(a, torch.Tensor):
                raise ArgumentError(f"hlobridge backend: input {i} of {self.label} is a "
                                    f"{type(a).__name__}, not a tensor")
            ins.append(a)
        key = tuple(tuple(t.shape) for t in ins)
        prog = self.programs.get(key)
        built = None
        if prog is None:
            with self._lock:
                prog = self.programs.get(key)
                if prog is None:
                    prog = built = self._build(key)
                    self.programs[key] = prog
        self._fast = prog.fast
        copies = 0
        run_ins = []
        for t in ins:
            if not t.is_contiguous():
                t = t.contiguous()
                copies += 1
            run_ins.append(t.detach())
        run_ins.extend(m.constants)
        acc = cache_accounting(None if built is None else _Built(prog, m.lower_s if
                                                                 len(self.programs) == 1 else 0.0))
        results = run_and_record(prog.exe, run_ins, shapes=prog.shapes, codes=self._codes,
                                 platform=self.platform, segments=[self._segment],
                                 accounting=acc, t0=t0, wrap=from_dlpack, copied=copies)
        prog.slow_calls += 1
        values: dict[sympy.Symbol, int] | None = None
        outs: list[Any] = []
        for o in m.outputs:
            if o is None:
                outs.append(None)
            elif o[0] == "prog":
                outs.append(results[o[1]])
            elif o[0] == "arg":
                outs.append(args[o[1]])
            else:
                if values is None:
                    values = {s: int(ins[k].shape[a]) for s, (k, a) in m.symbols.items()}
                outs.append(int(o[1].subs(values)))
        return outs

    def _build(self, key: tuple[tuple[int, ...], ...]) -> ShapeProgram:
        m = self.module
        shapes = [*key, *(tuple(c.shape) for c in m.constants)]
        t0 = _perf()
        try:
            text = refine(m.text, shapes)
        except ShapeAssertionError as e:
            raise self._name_dim(e, key) from None
        t1 = _perf()
        exe, hit = _native.compile(text)
        t2 = _perf()
        counters["refinements"] += 1
        if not hit:
            counters["compiles"] += 1
        prog = ShapeProgram(exe=exe, shapes=list(shapes), refine_s=t1 - t0,
                            compile_s=t2 - t1, outcome="content" if hit else "miss")
        if self._plain:
            n = len(m.inputs)
            outputs = [None if o is None else o[1] if o[0] == "prog" else -1 - o[1]
                       for o in m.outputs]
            prog.fast = _native.GraphCall(list(m.inputs), m.dtypes[:n], self._codes,
                                          [list(s) for s in shapes[:n]], m.constants, outputs,
                                          exe, [self._segment], self.platform)
        return prog

    def _name_dim(self, e: ShapeAssertionError, key: tuple[tuple[int, ...], ...]
                  ) -> ShapeAssertionError:
        """``e`` with the torch-side name of the dimension it is about."""
        m = self.module
        msg = str(e)
        dim = getattr(e, "dim", None)
        at = _ARG_DIM.search(msg)
        if at is not None and (int(at[1]), int(at[2])) in m.dim_names:
            dim = m.dim_names[(int(at[1]), int(at[2]))]
        else:
            for sym, (k, a) in m.symbols.items():
                if re.search(rf"\b{re.escape(str(sym))}\b", msg):
                    dim = m.dim_names.get((k, a), str(sym))
                    break
        shapes = ", ".join(str(list(s)) for s in key)
        out = ShapeAssertionError(f"{self.label}: inputs of shapes ({shapes}) violate a shape "
                                  f"assertion on {dim or 'an input dimension'}: {msg}")
        out.dim = dim
        return out


_ARG_DIM = re.compile(r"args\[(\d+)\]\.shape\[(\d+)\]")
_AOT_INPUT = re.compile(r"primals_(\d+)|arg(\d+)_1")


def _aot_names(gm: torch.fx.GraphModule, names: list[str]) -> dict[str, str]:
    """Placeholder -> the user's name of that input (AOTAutograd's
    ``primals_<k>`` / ``arg<k>_1`` are Dynamo's inputs k-1 / k)."""
    out = {}
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        m = _AOT_INPUT.fullmatch(n.name)
        if m is None:
            continue
        k = int(m[1]) - 1 if m[1] is not None else int(m[2])
        if 0 <= k < len(names):
            out[n.name] = names[k]
    return out


@dataclass
class _Built:
    prog: ShapeProgram
    lower: float

    @property
    def outcome(self) -> str:
        return self.prog.outcome

    @property
    def lower_s(self) -> float:
        return self.lower

    @property
    def compile_s(self) -> float:
        return self.prog.compile_s + self.prog.refine_s
