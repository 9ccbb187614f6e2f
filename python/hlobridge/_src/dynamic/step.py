"""``compile_train_step(..., dynamic=True)``: ONE symbolic trace of the whole
training step (forward, backward, optimizer update) serves every batch size
and sequence length (``docs/dynamic_shapes.md``, ``docs/training.md``).

:func:`symbolic_inputs` fakes the step's inputs in one shape environment:
parameters, buffers, optimizer state and hyperparameters static, the chosen
dimensions of the batch tensors symbolic (sizes equal at the first call on
the same axis of two batch tensors share one symbol, as Dynamo's duck
shaping does; sizes 0 and 1 specialised). ``make_fx`` traces the step on them
(:mod:`hlobridge._src.train_step`) and :class:`DynamicStep` holds the result:

- the random ops (dropout) lifted out as inputs drawn in torch per call
  (:mod:`hlobridge._src.dynamo.random_inputs`), their shapes evaluated from
  the call's sizes;
- ONE :class:`~hlobridge._src.dynamic.graph.DynamicGraph` (one
  ``jax.export`` lowering with ``?`` dimensions and shape assertions), refined
  per new shape in Rust and compiled through the compile cache;
- the guards the trace put on the symbols (``Ne(s0, 1)``, a ``view`` that
  needs ``s0*s1 == s2``, the first call's equal sizes), checked by
  :meth:`DynamicStep.admits` for every new concrete signature. Where they do
  not hold, the caller traces again (a second symbolic trace) instead of
  running a program that was traced for other sizes; where that trace fails
  and the sizes left a value range of the first (a sequence longer than a
  position table), :meth:`DynamicStep.violation` gives the
  :class:`~hlobridge.errors.ShapeAssertionError` naming the dimension.

Where the lowering fails because the trace tied sizes to constants by an
equation JAX cannot prove (an image's height x width flattened into a
``Linear``), :func:`pinned_dims` names those sizes and the step is traced
once more with them static.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import sympy
import torch

from hlobridge._src.dynamic.guard import paused_gc
from hlobridge._src.dynamic.symbols import is_symbolic
from hlobridge._src.entry_cache import MISS
from hlobridge._src.errors import ArgumentError, DynamicShapeError, ShapeAssertionError

__all__ = ["DynamicStep", "dynamic_dims", "paused_gc", "pinned_dims", "symbolic_inputs"]

counters = {"traces": 0}
"""Process-wide: symbolic traces of train steps that became a
:class:`DynamicStep` (tests read it; a trace whose lowering failed and was
retaken with some sizes pinned static by :func:`pinned_dims` counts once)."""


def dynamic_dims(dynamic: Any) -> tuple[int, ...] | None:
    """``compile_train_step``'s ``dynamic=`` argument checked: ``None`` for
    static, ``()`` for every dimension of every batch tensor, else the
    dimensions (e.g. ``(0, 1)``: batch and sequence) of every batch tensor
    that has them."""
    if dynamic is False or dynamic is None:
        return None
    if dynamic is True:
        return ()
    if isinstance(dynamic, int) and not isinstance(dynamic, bool):
        dynamic = (dynamic,)
    if isinstance(dynamic, (tuple, list)) and dynamic and all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dynamic):
        return tuple(sorted(set(dynamic)))
    raise ArgumentError(f"compile_train_step: dynamic must be True, False or the batch "
                        f"dimensions that vary (e.g. dynamic=(0, 1)), got {dynamic!r}")


def symbolic_inputs(flat: Sequence[torch.Tensor], n_fixed: int, dims: tuple[int, ...],
                    static: frozenset[tuple[int, int]] = frozenset()) -> list[torch.Tensor]:
    """Fake tensors for ``flat`` in one new shape environment: the first
    ``n_fixed`` (parameters, buffers, optimizer state, hyperparameters)
    static, the batch tensors with the dimensions ``dims`` (``()``: all)
    symbolic, except the ``(input, axis)`` pairs in ``static``."""
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

    mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=False)
    out = []
    first: dict[tuple[int, int], Any] = {}  # (axis, size) -> its symbol
    for i, t in enumerate(flat):
        if not isinstance(t, torch.Tensor):  # None (no optimizer state leaf)
            out.append(t)
            continue
        dyn = [DimDynamic.DYNAMIC if i >= n_fixed and (not dims or a in dims)
               and (i, a) not in static else DimDynamic.STATIC for a in range(t.dim())]
        ctx = StatelessSymbolicContext(dynamic_sizes=dyn)  # type: ignore[arg-type]
        fake = mode.from_tensor(t, source=ConstantSource(f"input{i}"), symbolic_context=ctx)
        for a, d in enumerate(fake.shape):
            if not is_symbolic(d):
                continue
            # Batch tensors' sizes on the same axis that are equal now are
            # one symbol (ids and targets: one batch, one sequence length),
            # checked by a guard; other axes never share one.
            same = first.setdefault((a, int(t.shape[a])), d)
            if same is not d:
                torch._check(d == same)
        out.append(fake)
    return out


def pinned_dims(fakes: Sequence[Any]) -> frozenset[tuple[int, int]]:
    """The ``(input, axis)`` of every symbolic size that a guard of the
    trace ties to others by an equation the shape environment could not
    solve (``Eq(6*s1*s2, 384)``: an image's height and width flattened into
    a Linear): where JAX cannot prove such an equation and the lowering
    fails, those sizes are traced again as static (``dynamic=True`` on
    every dimension of an image batch)."""
    env = next((t.fake_mode.shape_env for t in fakes if hasattr(t, "fake_mode")), None)
    if env is None:
        return frozenset()
    tied: set[sympy.Symbol] = set()
    for g in env.guards:
        # With the sizes pinned so far at their values, is it still an
        # equation (Eq(384*s0, 6*s0*s1*s2) is not, once s1 and s2 are)?
        e = env.simplify(g.expr).subs({s: env.var_to_val[s] for s in tied})
        if isinstance(e, sympy.Eq):
            tied |= e.free_symbols  # type: ignore[arg-type]
    out = set()
    for i, t in enumerate(fakes):
        for a, d in enumerate(t.shape if isinstance(t, torch.Tensor) else ()):
            if is_symbolic(d) and d.node.expr.free_symbols & tied:
                out.add((i, a))
    return frozenset(out)


def _views_for_copies(gm: torch.fx.GraphModule) -> None:
    """Functionalization's ``view_copy``, ``alias_copy``, ``t_copy``... as the
    view ops themselves (``view``, ``alias``, ``t``), which the aten->JAX
    table implements: the graph mutates nothing any more, so a view and its
    copy have the same value."""
    changed = False
    for node in gm.graph.nodes:
        t = node.target
        if node.op != "call_function" or not isinstance(t, torch._ops.OpOverload):
            continue
        packet = t.overloadpacket.__name__
        if not packet.endswith("_copy") or packet == "_to_copy":
            continue
        base = getattr(getattr(torch.ops.aten, packet[:-len("_copy")], None),
                       t._overloadname, None)
        if isinstance(base, torch._ops.OpOverload):
            node.target = base
            changed = True
    if changed:
        gm.recompile()


class DynamicStep:
    """One symbolic trace of a train step, called like a
    :class:`~hlobridge._src.dynamo.program.CompiledGraph` (see the module
    docs)."""

    def __init__(self, gm: torch.fx.GraphModule, label: str, names: list[str],
                 fakes: list[torch.Tensor]) -> None:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        from hlobridge._src.dynamic.graph import DynamicGraph
        from hlobridge._src.dynamo.random_inputs import lift_random_inputs

        self.fakes = fakes
        self.names = names
        self.shape_env = next(t.fake_mode.shape_env for t in fakes  # type: ignore[attr-defined]
                              if hasattr(t, "fake_mode"))
        tensors = [t for t in fakes if isinstance(t, torch.Tensor)]
        _views_for_copies(gm)
        with unset_fake_temporarily():
            self.random_inputs = lift_random_inputs(gm)
        names = [*names, *(r.name for r in self.random_inputs)]
        # make_fx names the step's inputs arg<k>_1: the DynamicGraph names
        # dimensions by them ("batch.0.shape[1]").
        try:
            self.graph = DynamicGraph(gm, label, names)
        except DynamicShapeError as e:
            raise DynamicShapeError(f"{label} (compile_train_step with dynamic=...): {e}; "
                                    f"compile_train_step(..., dynamic=False) traces each "
                                    f"shape instead") from e
        counters["traces"] += 1
        self._guards = self.shape_env.produce_guards_expression(tensors, ignore_static=True)
        self._tensor_pos = [i for i, t in enumerate(fakes) if isinstance(t, torch.Tensor)]
        self._static = [(t.dtype, [None if is_symbolic(d) else int(d)
                                   for d in t.shape]) if isinstance(t, torch.Tensor)
                        else (None, []) for t in fakes]
        # Where each symbol is read at call time: (input, axis).
        self._where: dict[sympy.Symbol, tuple[int, int]] = {}
        for i, t in enumerate(fakes):
            for a, d in enumerate(t.shape if isinstance(t, torch.Tensor) else ()):
                if isinstance(d, torch.SymInt) and isinstance(d.node.expr, sympy.Symbol):
                    self._where.setdefault(d.node.expr, (i, a))

    @property
    def programs(self) -> dict[Any, Any]:
        """Per concrete shape: its refined, compiled program."""
        return self.graph.programs

    @property
    def text(self) -> str:
        """The one shape-polymorphic module."""
        return self.graph.text

    def admits(self, flat: Sequence[torch.Tensor]) -> bool:
        """Whether this trace holds for inputs ``flat``: dtypes, ranks and
        static sizes equal, and the trace's guards on the symbols true."""
        if len(flat) != len(self._static):
            return False
        for t, (dtype, dims) in zip(flat, self._static):
            if dtype is None:
                if t is not None:
                    return False
                continue
            if not isinstance(t, torch.Tensor) or t.dtype != dtype or t.dim() != len(dims) or any(
                    d is not None and d != s for d, s in zip(dims, t.shape)):
                return False
        if self._guards is None:
            return True
        return bool(self.shape_env.evaluate_guards_expression(
            self._guards, [flat[i] for i in self._tensor_pos]))

    def violation(self, flat: Sequence[Any]) -> ShapeAssertionError | None:
        """The error for inputs ``flat`` whose sizes leave a symbol's value
        range (``seq <= 32``: a slice of a 32-row table), naming the
        dimension; ``None`` if none does (or only by being 0 or 1, which
        Dynamo-style specialisation traces apart)."""
        ranges = self.shape_env.var_to_range
        for s, (i, a) in self._where.items():
            t = flat[i] if i < len(flat) else None
            r = ranges.get(s)
            if not isinstance(t, torch.Tensor) or t.dim() <= a or r is None:
                continue
            v = int(t.shape[a])
            lo, hi = r.lower, r.upper
            low_ok = v < 2 or not isinstance(lo, sympy.Integer) or v >= int(lo)
            high_ok = not isinstance(hi, sympy.Integer) or v <= int(hi)
            if low_ok and high_ok:
                continue
            dim = f"{self.names[i]}.shape[{a}]"
            bound = " and ".join([*([f">= {int(lo)}"] if isinstance(lo, sympy.Integer) else []),
                                  *([f"<= {int(hi)}"] if isinstance(hi, sympy.Integer) else [])])
            err = ShapeAssertionError(
                f"{self.graph.label}: {dim} is {v}; the step's trace requires {dim} {bound} "
                f"(a constraint of the model on that size)")
            err.dim = dim
            return err
        return None

    def _draws(self, flat: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        values = {s: int(flat[i].shape[a]) for s, (i, a) in self._where.items()}
        out = []
        for r in self.random_inputs:
            shape = tuple(int(sympy.sympify(d.node.expr).subs(values))
                          if isinstance(d, torch.SymInt) else int(d) for d in r.shape)
            args = (list(shape), *r.args[1:]) if r.kind == "size" else r.args
            out.append(dataclasses.replace(r, shape=shape, args=args).draw())
        return out

    def __call__(self, *flat: torch.Tensor) -> list[Any]:
        if self.random_inputs:
            return self.graph(*flat, *self._draws(flat))
        return self.graph(*flat)

    def try_fast(self, flat: Sequence[torch.Tensor]) -> Any:
        """The last shape's program natively, or ``MISS``."""
        fast = self.graph._fast
        if fast is None or self.random_inputs:
            return MISS
        return fast(*flat)
