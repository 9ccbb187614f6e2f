"""``hb.export(..., dynamic=...)``: capture ONCE symbolically and store ONE
shape-polymorphic StableHLO module in the artifact (format
``hlobridge-artifact/2``, docs/deploy.md "Dynamic artifacts").

``dynamic`` names the dynamic dimensions: ``True`` makes ``batch_dim`` of
every input the symbol ``batch``; a mapping ``{"x": {0: "batch", 1:
"seq"}}`` names each dynamic dim of each input (inputs that name the same
symbol must agree in size at run time).

- A torch model is captured as ``torch.compile(dynamic=...)`` captures it
  (:mod:`hlobridge._src.dynamic`): Dynamo with the named dims marked
  dynamic, AOTAutograd, then ONE ``jax.export`` lowering with ``?`` dims and
  the shape assertions Dynamo's value ranges imply. Each symbol's range
  (Dynamo's: usually ``>= 2``, as it specialises the sizes 0 and 1) is
  recorded in the manifest.
- A JAX function is exported by ``jax.export`` with symbolic shapes (each
  symbol ``>= 1``).

The module is then refined to the example's shapes by the ONE Rust pass
(``_native.refine_shapes``, what ``hlobridge serve`` and the Rust deployer
run) and compiled: an artifact the Rust consumers could not refine is
refused here, and the example outputs (and the row-independence check)
come from that refined program.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from hlobridge import _native
from hlobridge._src.errors import BridgeError, ExportError
from hlobridge._src.export_capture import Captured, recording_backend, run_text_once, same_tensor, tensor_spec

__all__ = ["DynamicCapture", "capture_jax", "capture_torch", "normalize"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

DimSpec = dict[int, dict[int, str]]
"""Per example-input position: ``{dim: symbol name}``."""


@dataclass
class DynamicCapture(Captured):
    """What :func:`hlobridge._src.export.export` needs of a dynamic capture
    (the static capture's fields, plus the symbols)."""

    symbols: list[dict[str, Any]]
    """``{"name", "min", "max"?}`` per symbol."""


def normalize(dynamic: Any, names: list[str], args: Sequence[torch.Tensor],
              batch_dim: int | None, weight_pos: set[int]) -> DimSpec:
    """``dynamic`` (``True`` or ``{input name: {dim: symbol}}``) as dims per
    input position, checked."""
    spec: DimSpec = {}
    if dynamic is True:
        if batch_dim is None:
            raise ExportError("dynamic=True makes the batch dim dynamic: pass batch_dim too "
                              "(or name the dims: dynamic={'x': {0: 'batch'}})")
        for k in range(len(args)):
            if k not in weight_pos:
                spec[k] = {batch_dim: "batch"}
    elif isinstance(dynamic, Mapping):
        for name, dims in dynamic.items():
            if name not in names:
                raise ExportError(f"dynamic: {name!r} is not an input (inputs: {', '.join(names)})")
            k = names.index(name)
            if k in weight_pos:
                raise ExportError(f"dynamic: {name!r} is a weight; weights have static shapes")
            if not isinstance(dims, Mapping) or not dims:
                raise ExportError(f"dynamic[{name!r}] must map dims to symbol names, e.g. "
                                  f"{{0: 'batch'}}")
            spec[k] = {}
            for d, sym in dims.items():
                if not isinstance(d, int) or not 0 <= d < args[k].dim():
                    raise ExportError(f"dynamic[{name!r}]: {d!r} is not a dim of a "
                                      f"{args[k].dim()}-d input")
                if not isinstance(sym, str) or not _NAME.fullmatch(sym):
                    raise ExportError(f"dynamic[{name!r}][{d}]: the symbol name {sym!r} must be "
                                      f"an identifier")
                spec[k][d] = sym
        if batch_dim is not None:
            syms = {spec.get(k, {}).get(batch_dim) for k in range(len(args)) if k not in weight_pos}
            if len(syms) != 1 or None in syms:
                raise ExportError(f"with batch_dim={batch_dim}, dynamic must name dim {batch_dim} "
                                  f"of every input, with one symbol")
    else:
        raise ExportError(f"dynamic must be True or a mapping {{input: {{dim: symbol}}}}, "
                          f"not {dynamic!r}")
    for k, dims in spec.items():
        for d in dims:
            if args[k].shape[d] < 2:
                raise ExportError(f"dynamic: example input {names[k]} has size {args[k].shape[d]} "
                                  f"at dim {d}; give an example of size >= 2 there (the capture "
                                  f"specialises sizes 0 and 1)")
    return spec


def _check_refines(text: str, shapes: list[list[int]]) -> tuple[str, Any]:
    """``text`` refined by the Rust pass to ``shapes`` and compiled."""
    try:
        refined = _native.refine_shapes(text, shapes)
    except BridgeError as e:
        raise ExportError(f"the dynamic module cannot be refined by hlobridge's refinement "
                          f"pass (which every consumer of the artifact runs): "
                          f"{type(e).__name__}: {e}") from None
    exe, _hit = _native.compile(refined)
    return refined, exe


# -- torch -------------------------------------------------------------------------


def _ranges(gm: torch.fx.GraphModule) -> dict[Any, tuple[int, int | None]]:
    """Dynamo's value range of each symbol of ``gm``'s inputs."""
    env = None
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        dims = v.shape if isinstance(v, torch.Tensor) else [v] if isinstance(v, torch.SymInt) else []
        for d in dims:
            if isinstance(d, torch.SymInt):
                env = d.node.shape_env
                break
        if env is not None:
            break
    import sympy

    out: dict[Any, tuple[int, int | None]] = {}
    for s, r in (getattr(env, "var_to_range", {}) or {}).items():
        lo = int(r.lower) if isinstance(r.lower, sympy.Integer) else 1
        hi = int(r.upper) if isinstance(r.upper, sympy.Integer) and int(r.upper) < 2**62 else None
        out[s] = (max(lo, 1), hi)
    return out


def capture_torch(fn: Callable[..., Any], args: Sequence[torch.Tensor], names: list[str],
                  spec: DimSpec) -> DynamicCapture:
    """Capture ``fn`` once with the dims of ``spec`` symbolic (module docs)."""
    import sympy
    import torch._dynamo

    from hlobridge._src.dynamic.symbols import expr_of

    if isinstance(fn, torch.nn.Module) and fn.training:
        raise ExportError("export captures inference: call model.eval() first")
    named: list[tuple[str, torch.Tensor]] = []
    if isinstance(fn, torch.nn.Module):
        named = [*fn.named_parameters(), *fn.named_buffers()]
    xs = [x.clone() for x in args]  # marked dynamic: the caller's tensors stay unmarked
    for k, dims in spec.items():
        for d in dims:
            torch._dynamo.mark_dynamic(xs[k], d)
    record: list[tuple[Any, list[Any]]] = []
    backend = recording_backend(record, dynamic=True)
    compiled = torch.compile(fn, backend=backend, dynamic=None, fullgraph=True)
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    try:
        with torch.no_grad(), torch._dynamo.config.patch(**{limit: 1024}):
            compiled(*xs)
    except BridgeError:
        raise
    except Exception as e:  # Dynamo wraps backend errors; a specialised marked dim raises here
        inner = getattr(e, "inner_exception", None)
        if isinstance(inner, BridgeError):
            raise inner from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ExportError(f"capturing the forward with dynamic dims failed: "
                          f"{type(e).__name__}: {first}") from e
    if len(record) != 1:
        raise ExportError(f"the forward ran {len(record)} compiled graphs; export needs exactly one")
    dg, gargs = record[0]
    mod = dg.module
    placeholders = [n for n in dg.gm.graph.nodes if n.op == "placeholder"]
    # Each marked dim's torch symbol, named as the user named it.
    label: dict[Any, str] = {}
    for k, dims in spec.items():
        for d, sym in dims.items():
            vals = [placeholders[i].meta.get("val") for i, t in enumerate(gargs)
                    if isinstance(t, torch.Tensor) and same_tensor(t, xs[k])]
            if not vals or not isinstance(vals[0], torch.Tensor):
                raise ExportError(f"input {names[k]} is not an input of the captured program")
            e = expr_of(vals[0].shape[d])
            if not isinstance(e, sympy.Symbol):
                raise ExportError(f"input {names[k]} dim {d} ({sym}) was specialised to {e} by "
                                  f"the capture (the model fixes its size)")
            if label.setdefault(e, sym) != sym:
                raise ExportError(f"the model requires {label[e]!r} and {sym!r} to be equal "
                                  f"(input {names[k]} dim {d}): give them one name")
    ranges = _ranges(dg.gm)

    def dims_of(v: Any, strict: str | None) -> list[Any]:
        out: list[Any] = []
        for a, d in enumerate(v.shape):
            e = expr_of(d)
            if isinstance(e, sympy.Integer):
                out.append(int(e))
            elif isinstance(e, sympy.Symbol) and e in label:
                out.append(label[e])
            elif strict is not None:
                raise ExportError(f"{strict} dim {a} has the derived size {e}; name its dims "
                                  f"in dynamic= so that each is a symbol")
            else:
                out.append(str(e.subs({s: sympy.Symbol(n) for s, n in label.items()})))
        return out

    params: list[dict[str, Any]] = []
    weights: list[tuple[str, torch.Tensor]] = []
    used: set[str] = set()
    ins: list[torch.Tensor] = []
    for i in mod.inputs:
        t = gargs[i]
        val = placeholders[i].meta.get("val")
        user = next((k for k, x in enumerate(xs) if same_tensor(t, x)), None)
        if user is not None:
            params.append(tensor_spec(names[user], args[user], False, dims_of(val, f"input {names[user]}")))
            ins.append(args[user].contiguous())
            continue
        if isinstance(val, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in val.shape):
            raise ExportError("a captured tensor that is not an input has a dynamic shape")
        name = next((n for n, p in named if same_tensor(t, p.detach()) and n not in used), None)
        if name is None:
            name = f"_captured{len(weights)}"
        used.add(name)
        params.append(tensor_spec(name, t, True, None))
        weights.append((name, t))
        ins.append(t.contiguous())
    for k, c in enumerate(mod.constants):
        name = f"_const{k}"
        params.append(tensor_spec(name, c, True, None))
        weights.append((name, c))
        ins.append(c)
    for k, o in enumerate(mod.outputs):
        if o is None or o[0] != "prog":
            raise ExportError(f"output {k} of the forward is not computed by the program (an input "
                              f"returned unchanged, a size, or None); export needs computed outputs")
    n_res = 1 + max(o[1] for o in mod.outputs if o is not None)
    out_names: list[str | None] = [None] * n_res
    for k, o in enumerate(mod.outputs):
        if o is not None and out_names[o[1]] is None:
            out_names[o[1]] = f"output_{k}" if len(mod.outputs) > 1 else "output"
    out_node = next(n for n in dg.gm.graph.nodes if n.op == "output")
    out_vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None
                for a in out_node.args[0]]  # type: ignore[union-attr]
    _text, exe = _check_refines(mod.text, [list(t.shape) for t in ins])
    results = run_text_once(exe, ins)
    outputs = []
    for j, r in enumerate(results):
        k = next(k for k, o in enumerate(mod.outputs) if o is not None and o[1] == j)
        v = out_vals[k]
        dims = dims_of(v, None) if isinstance(v, torch.Tensor) else list(r.shape)
        outputs.append(tensor_spec(out_names[j] or f"result_{j}", r, None, dims))
    symbols = []
    for s, n in label.items():
        lo, hi = ranges.get(s, (2, None))
        if any(x["name"] == n for x in symbols):
            continue
        sym: dict[str, Any] = {"name": n, "min": lo}
        if hi is not None:
            sym["max"] = hi
        symbols.append(sym)
    return DynamicCapture(mod.text, params, weights, outputs, results, exe, ins, symbols)


# -- JAX ---------------------------------------------------------------------------


def capture_jax(fn: Callable[..., Any], args: Sequence[torch.Tensor], names: list[str],
                weight_pos: set[int], spec: DimSpec) -> DynamicCapture:
    """``jax.export`` of ``fn`` with the dims of ``spec`` symbolic."""
    import contextlib

    import jax

    from hlobridge._src.dtypes import DTYPES, X64

    scope = jax.export.SymbolicScope()
    sds = []
    for k, x in enumerate(args):
        dims = [spec.get(k, {}).get(d, str(n)) for d, n in enumerate(x.shape)]
        shape = jax.export.symbolic_shape(", ".join(dims), scope=scope) if spec.get(k) else \
            tuple(x.shape)
        sds.append(jax.ShapeDtypeStruct(shape, DTYPES[x.dtype][1]))  # type: ignore[no-untyped-call]
    need_x64 = any(x.dtype in X64 for x in args)
    with jax.enable_x64(True) if need_x64 else contextlib.nullcontext():
        try:
            exported = jax.export.export(jax.jit(fn, keep_unused=True))(*sds)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise ExportError(f"jax.export with symbolic dims failed: {type(e).__name__}: "
                              f"{first}") from e
        text = exported.mlir_module()
    ins = [x.contiguous() for x in args]
    _refined, exe = _check_refines(text, [list(x.shape) for x in ins])
    results = run_text_once(exe, ins)
    params = []
    for k, (n, x) in enumerate(zip(names, args)):
        dims = None if k in weight_pos else [spec.get(k, {}).get(d, int(s))
                                              for d, s in enumerate(x.shape)]
        params.append(tensor_spec(n, x, k in weight_pos, dims))
    weights = [(n, x) for k, (n, x) in enumerate(zip(names, args)) if k in weight_pos]
    outputs = []
    for j, (r, aval) in enumerate(zip(results, exported.out_avals)):
        dims = [d if isinstance(d, int) else str(d) for d in aval.shape]
        outputs.append(tensor_spec(f"output_{j}" if len(results) > 1 else "output", r, None, dims))
    used = sorted({s for dims in spec.values() for s in dims.values()})
    symbols = [{"name": s, "min": 1} for s in used]
    return DynamicCapture(text, params, weights, outputs, results, exe, ins, symbols)
