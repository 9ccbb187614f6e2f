"""The dynamic StableHLO corpus prepared for shape refinement, and jaxlib's
own refinement as the reference (used by test_refine_jaxlib.py and
benches/refine/refine_time.py).

The corpus (``stablehlo-testdata/dynamic``) was written by jax2tf's
"dimension arguments" convention: ``@main``'s leading ``tensor<i64>``
arguments without ``mhlo.sharding`` carry the values of the dimension
variables, and the data arguments have ``?`` dims. A call picks every
dimension variable and every ``?`` as ``SIZE``; :func:`prepare` turns the
dimension arguments into constants (so the module is refinable from the
data arguments' shapes alone, as ``jax.export`` modules are) and returns
the shapes for :func:`hlobridge._native.refine_shapes`. jaxlib's refinement
needs a static ``@main``: :func:`jaxlib_refine` sets the argument types in
MLIR's IR and refines. :func:`canonical` normalizes a module (jaxlib's
pipeline, then MLIR's canonicalize/cse/symbol-dce): both results go through
it before they are compared.
"""

from __future__ import annotations

import pathlib
import re
from dataclasses import dataclass

CORPUS = pathlib.Path(__file__).resolve().parents[3] / "shared" / "corpus" / "stablehlo-testdata" / "dynamic"
SIZE = 3

_SIG = re.compile(r"func\.func public @main\((.*?)\) -> (.*) \{\n")
_TYPE = r"tensor<(?:[^<>]|<[^<>]*>)*>"
_ARG = re.compile(rf"(%arg\d+): ({_TYPE})( \{{[^}}]*\}})?")


@dataclass
class Case:
    """One prepared module."""

    name: str
    text: str
    """The module with its dimension arguments turned into constants."""
    types: list[str]
    """``@main``'s argument types (with ``?``)."""
    shapes: list[list[int]]
    """The concrete shapes of the call."""
    results: str
    """``@main``'s result type text."""


def dims_of(ty: str) -> list[str]:
    body = ty[len("tensor<"):-1]
    parts = body.split("x")
    out = []
    for p in parts:
        if p == "?" or p.isdigit():
            out.append(p)
        else:
            break
    return out


def element_type(ty: str) -> str:
    body = ty[len("tensor<"):-1]
    return body[sum(len(d) + 1 for d in dims_of(ty)):]


def prepare(path: pathlib.Path) -> Case:
    text = path.read_text()
    m = _SIG.search(text)
    if m is None:
        raise ValueError(f"{path.name}: no public @main")
    consts, keep = [], []
    for name, ty, attr in _ARG.findall(m.group(1)):
        if not attr and ty == "tensor<i64>":
            consts.append(f"    {name} = stablehlo.constant dense<{SIZE}> : tensor<i64>\n")
        else:
            keep.append((name, ty, attr))
    sig = "func.func public @main(" + ", ".join(f"{n}: {t}{a}" for n, t, a in keep) + f") -> {m.group(2)} {{\n"
    prepared = text[:m.start()] + sig + "".join(consts) + text[m.end():]
    types = [t for _, t, _ in keep]
    shapes = [[SIZE if d == "?" else int(d) for d in dims_of(t)] for t in types]
    return Case(path.stem, prepared, types, shapes, m.group(2))


def static_type(ty: str, shape: list[int]) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + element_type(ty) + ">"


def jaxlib_refine(case: Case) -> str:
    """jaxlib's ``refine_polymorphic_shapes`` of the case, as text."""
    return normalize(jaxlib_input(case))


def jaxlib_input(case: Case) -> str:
    """The case as jaxlib's refinement takes it: a static ``@main`` whose
    arguments are converted to the dynamic types at the top of the body
    (what ``jax.export`` does when it calls a module; identity converts are
    dropped by :func:`canonical`)."""
    text = case.text
    m = _SIG.search(text)
    assert m is not None
    params, converts = [], []
    for name, ty, attr in _ARG.findall(m.group(1)):
        params.append((name, ty, attr))
    for (name, ty, attr), shape in zip(params, case.shapes):
        st = static_type(ty, shape)
        converts.append(f"    {name} = stablehlo.convert {name}_static : ({st}) -> {ty}\n")
    sig = "func.func public @main(" + ", ".join(
        f"{n}_static: {static_type(t, s)}{a}" for (n, t, a), s in zip(params, case.shapes)
    ) + f") -> {m.group(2)} {{\n"
    return text[:m.start()] + sig + "".join(converts) + text[m.end():]


_CONTEXT = None


def _context():  # type: ignore[no-untyped-def]
    """One MLIR context for every parse here (creating one costs ~10 ms)."""
    global _CONTEXT
    if _CONTEXT is None:
        from jax._src.interpreters import mlir

        _CONTEXT = mlir.make_ir_context()
    return _CONTEXT


def normalize(module: bytes | str) -> str:
    """jaxlib's refinement pipeline (it inlines calls, refines, folds) run
    on ``module``: applied to jaxlib's input it is the reference; applied to
    a static module it only normalizes it (and verifies its types)."""
    from jax._src.lib import _jax
    from jaxlib.mlir import ir

    data = module.encode() if isinstance(module, str) else module
    out = _jax.mlir.refine_polymorphic_shapes(
        data, enable_shape_assertions=True, validate_static_shapes=True)
    with _context():
        return str(ir.Module.parse(out))


def canonical(text: str) -> str:
    """``text`` after jaxlib's refinement pipeline (:func:`normalize`) and
    MLIR's ``canonicalize, cse, symbol-dce``, printed by MLIR without
    locations: both results go through it before they are compared (the
    pipeline is not idempotent on jaxlib's own output: a second run folds
    splat broadcasts the first left, so it runs on both)."""
    from jaxlib.mlir import ir, passmanager

    with _context():
        m = ir.Module.parse(normalize(text))
        _drop_identity_converts(m.body)
        passmanager.PassManager.parse("builtin.module(canonicalize,cse,symbol-dce)").run(m.operation)
        return _inline_constants(str(m))


_CONST = re.compile(r"^\s*(%[\w#]+) = stablehlo\.constant (.*)$", re.M)


def _inline_constants(text: str) -> str:
    """Constants written into their uses (``%c_3`` → ``const(dense<..> : T)``)
    and their own lines dropped: the canonicalizer hoists constants in the
    order it meets them, which says nothing about the program."""
    names = {name: body for name, body in _CONST.findall(text)}
    text = _CONST.sub("", text)
    if not names:
        return text
    pat = re.compile(r"(?<![\w%])(" + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r")(?![\w])")
    lines = [ln for ln in pat.sub(lambda mm: f"const({names[mm.group(1)]})", text).splitlines() if ln.strip()]
    return "\n".join(lines)


def _drop_identity_converts(block) -> None:  # type: ignore[no-untyped-def]
    for op in list(block.operations):
        for region in op.regions:
            for b in region.blocks:
                _drop_identity_converts(b)
        if op.name == "stablehlo.convert" and op.operands[0].type == op.results[0].type:
            op.results[0].replace_all_uses_with(op.operands[0])
            op.erase()


def cases() -> list[pathlib.Path]:
    return sorted(CORPUS.glob("*.mlir"))
