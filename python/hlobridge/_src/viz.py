"""``hb.viz(obj, path)``: draw the stitched program(s) of a ``torch.compile``
model or function, or of a :func:`hlobridge.compile_train_step` step.

What is drawn is what was stitched: each program's segments (boxes coloured
by producer: torch, jax, pallas), the handles between them (typed edges),
and its inputs and outputs. Inputs carry the user's names where they are
known: parameter and buffer names (``fc1.weight``), argument names (``x``),
a train step's ``opt_state.<i>`` / ``hyper.<i>`` / ``batch.<i>``; others keep
their graph placeholder names. The plan is kept on each
:class:`~hlobridge._src.dynamo.program.Program` when it is built; drawing
happens here, in Rust, with the renderer of ``hlobridge viz``
(:func:`hlobridge._native.viz_programs`).

Several programs (graph breaks, forward and backward, several input
signatures) make ONE file: ``.html`` has one section per program, ``.svg``
and ``.dot`` one picture with every program side by side, each node of a
program's segments prefixed by its label (``forward #0: torch0``).
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

from hlobridge import _native
from hlobridge._src.dynamo.program import CompiledGraph, compiled_graphs
from hlobridge._src.errors import ArgumentError, NotCompiledError

__all__ = ["viz"]

_SUFFIXES = (".html", ".htm", ".svg", ".dot", ".gv")


def _codes_of(obj: Any) -> tuple[set[Any], Any, str] | None:
    """The code objects Dynamo compiles for a ``torch.compile``'d module or
    function, the module (``None`` for a function) and a description;
    ``None`` if ``obj`` is neither."""
    import torch

    orig = getattr(obj, "_torchdynamo_orig_callable", None)  # torch.compile(fn)
    if isinstance(obj, torch.nn.Module):
        mod = getattr(obj, "_orig_mod", obj)  # torch.compile(model) or model.compile()
        fwd = getattr(type(mod).forward, "__code__", None)
        return ({fwd} if fwd is not None else set()), mod, type(mod).__name__
    if orig is not None:
        fn = getattr(orig, "__func__", orig)
        code = getattr(fn, "__code__", None)
        owner = getattr(orig, "__self__", None)
        return ({code} if code is not None else set()), owner, getattr(fn, "__qualname__",
                                                                       repr(fn))
    return None


def _belongs(graph: CompiledGraph, codes: set[Any], owner: Any) -> bool:
    """``graph`` was compiled from one of ``codes`` (as a method of
    ``owner``, if a module), or from a function Dynamo resumes one of them
    with after a graph break."""
    if graph.origin is None:
        return False
    origin, ref = graph.origin
    if owner is not None and (ref is None or ref() is not owner):
        return False
    if origin in codes:
        return True
    return any(origin.co_filename == c.co_filename
               and origin.co_name.startswith(f"torch_dynamo_resume_in_{c.co_name}_at_")
               for c in codes)


def _expand(graphs: list[Any]) -> list[CompiledGraph]:
    out: list[CompiledGraph] = []
    for g in graphs:
        out.extend(p for p in (getattr(g, "pieces", None) or [g]) if isinstance(p, CompiledGraph))
    return out


def _graphs(obj: Any) -> tuple[list[CompiledGraph], str]:
    from hlobridge._src.train_step import TrainStep

    if isinstance(obj, TrainStep):
        return _expand(obj.graphs), obj.name
    if isinstance(obj, CompiledGraph):
        return [obj], obj.label
    found = _codes_of(obj)
    if found is None:
        raise ArgumentError(f"hb.viz: expected a torch.compile'd module or function (backend "
                            f"'hlobridge') or a compile_train_step step, got "
                            f"{type(obj).__name__}")
    codes, owner, what = found
    return [g for g in compiled_graphs() if _belongs(g, codes, owner)], what


def _renamed(plan: Any, names: dict[str, str]) -> tuple[list[Any], list[Any], list[str]]:
    """The plan with its input handles renamed to the user's names (a name
    already used by another handle keeps the placeholder's)."""
    inputs, segs, outs = plan
    taken = {h for s in segs for h in (*s[4], *s[5])} | {i[0] for i in inputs}
    rename: dict[str, str] = {}
    for name, _, _ in inputs:
        new = names.get(name)
        if new and new != name and new not in taken:
            rename[name] = new
            taken.add(new)
    inputs = [(rename.get(n, n), ty, d) for n, ty, d in inputs]
    segs = [(s[0], s[1], s[2], s[3], [rename.get(h, h) for h in s[4]], list(s[5])) for s in segs]
    return inputs, segs, [rename.get(h, h) for h in outs]


def viz(obj: Any, path: str | os.PathLike[str]) -> pathlib.Path:
    """Draw the stitched program(s) of ``obj`` into ``path`` and return it.

    ``obj`` is a ``torch.compile(..., backend="hlobridge")`` module or
    function that has been called at least once (its programs are built on
    the first call; :class:`~hlobridge.errors.NotCompiledError` otherwise),
    or a :func:`hlobridge.compile_train_step` step (likewise). The format
    follows the suffix, as for ``hlobridge viz``: ``.html`` (self-contained,
    one section per program), ``.svg`` (hlobridge's own layout) or ``.dot``
    (Graphviz text). Every program goes into the one file (see the module
    docs). A module's drawing holds the graphs compiled for that instance;
    a function's, every graph compiled from its code."""
    out = pathlib.Path(path)
    if out.suffix.lower() not in _SUFFIXES:
        raise ArgumentError(f"hb.viz: {out}: unknown output format (use .svg, .html or .dot)")
    graphs, what = _graphs(obj)
    programs = []
    for g in graphs:
        plans = [p for p in g.programs.values() if p.plan is not None]
        for k, p in enumerate(plans):
            label = g.label if len(plans) == 1 else f"{g.label} [signature {k}]"
            programs.append((label, *_renamed(p.plan, g.input_names)))
    if not programs:
        raise NotCompiledError(f"hb.viz: {what} has no compiled program yet; call it once "
                               f"first (torch.compile and compile_train_step compile on the "
                               f"first call)")
    _native.viz_programs(programs, str(out), f"hlobridge: {what}")
    return out
