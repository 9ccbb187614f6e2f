#!/usr/bin/env python3
"""Differential numerics sweep of the torch lowering: every op of torch's
OpInfo database run through ``torch.compile(backend="hlobridge")`` and
compared with eager torch.

For each sample (``op.sample_inputs``, the first ``--samples`` per op and
dtype) the op runs three ways on the same inputs: compiled by hlobridge,
eager in the sample's dtype, and eager in float64 (floating inputs upcast,
which is exact). The error of a result is its largest difference from the
float64 one relative to the float64 result's largest finite magnitude. A
sample is *flagged* when

* hlobridge's error exceeds ``FACTOR`` times eager's own error and the
  dtype's floor (``FLOORS``: well above ulp-level reduction-order noise);
* a result's shape, dtype or count differs from eager's;
* a result has NaN/Inf where eager has a finite value, or loses a NaN that
  eager produces;
* an integer/bool result differs from eager's at all (ties broken
  differently, overflow, ...).

The same checks run on the gradients of ``sum(out * w)`` (``w`` random) for
ops that support autograd. A named backend error (``UnsupportedOpError``,
``DataDependentError``, any ``BridgeError``) counts as *unsupported*; an
error of Dynamo/AOTAutograd itself, or of eager torch, as *skipped*.

The harness (:func:`run_sample`) is also what ``tests/python/
test_op_numerics.py`` runs on its curated cases. Run the full sweep (not in
CI; ~1 h on 2 cores; needs ``pip install expecttest`` for torch's OpInfo
module)::

    PJRT_DEVICE=CPU .venv/bin/python scripts/op_sweep.py          # -> docs/op_numerics.md
    PJRT_DEVICE=CPU .venv/bin/python scripts/op_sweep.py --ops sum,cumsum --dtypes float32,int32
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

FACTOR = 30.0
"""hlobridge may be this many times eager's own error before a flag."""

FLOORS = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 2e-2,
          torch.float16: 4e-3, torch.complex64: 1e-5, torch.complex128: 1e-12}
"""Errors below these (relative to the result's largest value) are never
flagged: ulp-level differences of reduction order and of XLA's transcendental
approximations."""

_LOW = (torch.float16, torch.bfloat16, torch.float32)


@dataclass
class Outcome:
    """The verdict on one sample."""

    status: str
    """``pass``, ``flag``, ``unsupported`` (a named hlobridge error),
    ``error`` (the backend failed with another error) or ``skip`` (eager or
    Dynamo refused the sample)."""
    detail: str = ""
    err: float = 0.0
    """hlobridge's largest error (relative to float64) over the results."""
    own: float = 0.0
    """Eager's own error on the result where ``err`` was measured."""


@dataclass
class _Cmp:
    problems: list[str] = field(default_factory=list)
    err: float = 0.0
    own: float = 0.0


def _upcast(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        if t.dtype in _LOW:
            return t.detach().double().requires_grad_(t.requires_grad)
        if t.dtype == torch.complex64:
            return t.detach().to(torch.complex128).requires_grad_(t.requires_grad)
    return t


def _fresh(t: Any) -> Any:
    """A clone (same requires_grad) so that no run sees another's mutations."""
    if isinstance(t, torch.Tensor):
        return t.detach().clone().requires_grad_(t.requires_grad)
    return t


def _rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest difference over the positions where both are finite, relative
    to the reference's largest finite magnitude (absolute where that is 0)."""
    a64 = a.detach().to(torch.complex128 if a.is_complex() or ref.is_complex()
                        else torch.float64)
    r64 = ref.detach().to(a64.dtype)
    ok = torch.isfinite(a64) & torch.isfinite(r64)
    if not bool(ok.any()):
        return 0.0
    scale = float(r64[ok].abs().max()) or 1.0
    return float((a64[ok] - r64[ok]).abs().max()) / scale


def _compare_tensor(got: torch.Tensor, eager: torch.Tensor, ref: torch.Tensor | None,
                    what: str, out: _Cmp) -> None:
    if got.shape != eager.shape or got.dtype != eager.dtype:
        out.problems.append(f"{what}: {tuple(got.shape)} {got.dtype} where eager gives "
                            f"{tuple(eager.shape)} {eager.dtype}")
        return
    if got.numel() == 0:
        return
    if not (eager.is_floating_point() or eager.is_complex()):
        if not torch.equal(got, eager):
            bad = int((got != eager).sum())
            out.problems.append(f"{what}: {bad} of {got.numel()} {got.dtype} values differ "
                                f"from eager")
        return
    g_fin, e_fin = torch.isfinite(got), torch.isfinite(eager)
    if bool((e_fin & ~g_fin).any()):
        n = int((e_fin & ~g_fin).sum())
        out.problems.append(f"{what}: {n} NaN/Inf where eager is finite")
    g_nan, e_nan = torch.isnan(got), torch.isnan(eager)
    if bool((e_nan & ~g_nan).any()):
        n = int((e_nan & ~g_nan).sum())
        out.problems.append(f"{what}: {n} NaN of eager's lost")
    e_inf = torch.isinf(eager)
    if bool((e_inf & ~(torch.isinf(got) & (got == eager))).any()):
        out.problems.append(f"{what}: an Inf of eager's differs")
    if ref is None or ref.shape != got.shape:
        ref_own, err = 0.0, _rel_err(got, eager)
        own = 0.0
    else:
        err, own = _rel_err(got, ref), _rel_err(eager, ref)
        ref_own = own
    floor = FLOORS.get(got.dtype, 1e-5)
    if err > max(FACTOR * ref_own, floor):
        out.problems.append(f"{what}: error {err:.3g} vs float64 where eager's is {own:.3g}")
    if err > out.err:
        out.err, out.own = err, own


def _compare(got: Any, eager: Any, ref: Any, what: str, out: _Cmp) -> None:
    g_leaves, g_spec = pytree.tree_flatten(got)
    e_leaves, e_spec = pytree.tree_flatten(eager)
    r_leaves = pytree.tree_flatten(ref)[0] if ref is not None else [None] * len(e_leaves)
    if g_spec != e_spec or len(r_leaves) != len(e_leaves):
        if g_spec != e_spec:
            out.problems.append(f"{what}: structure {g_spec} where eager gives {e_spec}")
            return
        r_leaves = [None] * len(e_leaves)
    for i, (g, e, r) in enumerate(zip(g_leaves, e_leaves, r_leaves)):
        name = f"{what}[{i}]" if len(e_leaves) > 1 else what
        if isinstance(e, torch.Tensor):
            if not isinstance(g, torch.Tensor):
                out.problems.append(f"{name}: {type(g).__name__} where eager gives a tensor")
                continue
            _compare_tensor(g, e, r if isinstance(r, torch.Tensor) else None, name, out)
        elif g != e and not (isinstance(e, float) and math.isnan(e) and g != g):
            out.problems.append(f"{name}: {g!r} where eager gives {e!r}")


def _is_backend_error(e: BaseException) -> BaseException | None:
    """The hlobridge error inside a (possibly wrapped) compile failure."""
    from hlobridge import BridgeError

    seen = 0
    cur: BaseException | None = e
    while cur is not None and seen < 8:
        if isinstance(cur, BridgeError):
            return cur
        cur = getattr(cur, "inner_exception", None) or cur.__cause__ or cur.__context__
        seen += 1
    return None


def _grads(outs: Any, ins: list[torch.Tensor], ws: list[torch.Tensor]) -> list[Any]:
    leaves = [o for o in pytree.tree_flatten(outs)[0]
              if isinstance(o, torch.Tensor) and o.requires_grad]
    if not leaves:
        return []
    ws = [w.to(o.dtype) for w, o in zip(ws, leaves)]
    return list(torch.autograd.grad(leaves, ins, ws, allow_unused=True))


def run_sample(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None,
               *, grad: bool = False, reference: bool = True, seed: int = 0) -> Outcome:
    """Run ``fn(*args, **kwargs)`` compiled by hlobridge, eagerly, and
    eagerly in float64 (if ``reference``), and compare (module docs). Tensor
    leaves of ``args``/``kwargs`` become inputs of the compiled function;
    with ``grad``, floating ones that require grad get gradients too."""
    from torch._dynamo.exc import BackendCompilerFailed

    kwargs = kwargs or {}
    leaves, spec = pytree.tree_flatten((args, kwargs))
    t_pos = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]

    def call(*ts: torch.Tensor) -> Any:
        vals = list(leaves)
        for i, t in zip(t_pos, ts):
            vals[i] = t
        a, k = pytree.tree_unflatten(vals, spec)
        return fn(*a, **k)

    tensors = [leaves[i] for i in t_pos]
    if grad:
        tensors = [t.detach().requires_grad_(t.requires_grad or (
            t.is_floating_point() and t.dtype != torch.float64 and t.numel() > 0))
            for t in tensors]
    else:
        tensors = [t.detach() for t in tensors]

    def run(f: Callable[..., Any], ts: list[torch.Tensor]) -> tuple[Any, list[Any]]:
        ts = [_fresh(t) for t in ts]
        out = f(*ts)
        if not grad:
            return out, []
        ins = [t for t in ts if t.requires_grad]
        leaves_out = [o for o in pytree.tree_flatten(out)[0]
                      if isinstance(o, torch.Tensor) and o.requires_grad]
        if not ins or not leaves_out:
            return out, []
        gen = torch.Generator().manual_seed(seed + 1)
        ws = [torch.randn(o.shape, generator=gen, dtype=torch.float64) for o in leaves_out]
        g = _grads(out, ins, ws)
        return out, g

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eager, eager_g = run(call, tensors)
    except Exception as e:  # noqa: BLE001  (eager torch refuses the sample)
        return Outcome("skip", f"eager: {type(e).__name__}: {_first_line(e)}")
    ref = ref_g = None
    if reference:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref, ref_g = run(call, [_upcast(t) for t in tensors])
        except Exception:  # noqa: BLE001  (no float64 kernel: compare with eager only)
            ref = ref_g = None
    torch._dynamo.reset()
    compiled = torch.compile(call, backend="hlobridge", dynamic=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, got_g = run(compiled, tensors)
    except Exception as e:  # noqa: BLE001
        inner = _is_backend_error(e)
        if inner is not None:
            return Outcome("unsupported", f"{type(inner).__name__}: {_first_line(inner)}")
        if isinstance(e, BackendCompilerFailed):
            # The backend failed with an error that is not hlobridge's own.
            cause = getattr(e, "inner_exception", None) or e
            return Outcome("error", f"{type(cause).__name__}: {_first_line(cause)}")
        return Outcome("skip", f"compile: {type(e).__name__}: {_first_line(e)}")
    finally:
        torch._dynamo.reset()
    cmp = _Cmp()
    _compare(got, eager, ref, "out", cmp)
    if grad:
        if len(got_g) != len(eager_g):
            cmp.problems.append(f"grad: {len(got_g)} gradients where eager gives {len(eager_g)}")
        else:
            for i, (g, e) in enumerate(zip(got_g, eager_g)):
                r = ref_g[i] if ref_g and i < len(ref_g) else None
                if e is None or g is None:
                    if (e is None) != (g is None):
                        cmp.problems.append(f"grad[{i}]: None mismatch")
                    continue
                _compare_tensor(g, e, r, f"grad[{i}]", cmp)
    if cmp.problems:
        return Outcome("flag", "; ".join(cmp.problems), cmp.err, cmp.own)
    return Outcome("pass", "", cmp.err, cmp.own)


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return (s[0] if s else "")[:200]


# --------------------------------------------------------------------------
# The OpInfo sweep.

_RANDOM = ("dropout", "rand", "bernoulli", "normal", "multinomial", "uniform", "exponential",
           "geometric", "cauchy", "log_normal", "empty", "poisson")
"""Ops whose results are random or uninitialized: not comparable."""


def _comparable(name: str) -> bool:
    return not any(r in name for r in _RANDOM)


class _Timeout(Exception):
    pass


def _alarm(_sig: int, _frame: Any) -> None:
    raise _Timeout()


def sweep_op(op: Any, dtype: torch.dtype, samples: int, timeout_s: int) -> list[dict[str, Any]]:
    """Run the first ``samples`` samples of an OpInfo ``op`` in ``dtype``."""
    rows: list[dict[str, Any]] = []
    grad = bool(op.supports_autograd) and (dtype.is_floating_point or dtype.is_complex)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            it: Iterable[Any] = op.sample_inputs("cpu", dtype, requires_grad=grad)
            picked = []
            for s in it:
                picked.append(s)
                if len(picked) >= samples:
                    break
    except Exception as e:  # noqa: BLE001
        return [{"op": op.name, "variant": op.variant_test_name, "dtype": str(dtype),
                 "sample": -1, "status": "skip", "detail": f"samples: {_first_line(e)}"}]
    for k, s in enumerate(picked):
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(timeout_s)
        t0 = time.time()
        try:
            res = run_sample(op.op, (s.input, *s.args), dict(s.kwargs), grad=grad, seed=k)
        except _Timeout:
            res = Outcome("skip", f"timeout {timeout_s}s")
        except Exception as e:  # noqa: BLE001
            res = Outcome("skip", f"harness: {type(e).__name__}: {_first_line(e)}")
        finally:
            signal.alarm(0)
        rows.append({"op": op.name, "variant": op.variant_test_name, "dtype": str(dtype),
                     "sample": k, "status": res.status, "detail": res.detail, "err": res.err,
                     "own": res.own, "s": round(time.time() - t0, 2),
                     "shapes": _describe(s)})
    return rows


def _describe(s: Any) -> str:
    def d(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return f"T{list(v.shape)}"
        return v
    try:
        return str(pytree.tree_map(d, (s.input, s.args, s.kwargs)))[:160]
    except Exception:  # noqa: BLE001
        return "?"


def _load_op_db() -> list[Any]:
    try:
        import expecttest  # noqa: F401
    except ImportError:
        sys.exit("scripts/op_sweep.py: torch's OpInfo module needs `pip install expecttest`")
    saved = sys.argv
    sys.argv = sys.argv[:1]  # torch's common_utils parses the command line on import
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    finally:
        sys.argv = saved
    return list(op_db)


def write_report(rows: list[dict[str, Any]], path: Path) -> None:
    """Per op and dtype: pass / unsupported (the named error) / flag /
    error, with the largest measured error and eager's own, as a markdown
    table appended under ``## Per-op results`` of ``path`` (the text above
    that heading is kept)."""
    per: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        per.setdefault((r["op"] + ("." + r["variant"] if r["variant"] else ""), r["dtype"]),
                       []).append(r)
    lines = ["## Per-op results", "",
             "Generated by `scripts/op_sweep.py` (status of the worst sample; `err`: "
             "hlobridge's largest error relative to float64, `eager`: eager's own).", "",
             "| op | dtype | samples | status | err | eager | detail |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    order = {"flag": 0, "error": 1, "unsupported": 2, "pass": 3, "skip": 4}
    for (op, dt), rs in sorted(per.items()):
        worst = min(rs, key=lambda r: order.get(r["status"], 9))
        err = max(r.get("err", 0.0) for r in rs)
        own = max(r.get("own", 0.0) for r in rs)
        detail = worst.get("detail", "").replace("|", "/")[:120]
        lines.append(f"| `{op}` | {dt.replace('torch.', '')} | {len(rs)} | {worst['status']} | "
                     f"{err:.1e} | {own:.1e} | {detail} |")
    head = path.read_text().split("## Per-op results")[0] if path.exists() else ""
    path.write_text(head + "\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="", help="comma-separated op names (default: all)")
    ap.add_argument("--dtypes", default="float32,bfloat16,int32")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--timeout-s", type=int, default=120)
    ap.add_argument("--jsonl", default="bench-results/op_sweep.jsonl")
    ap.add_argument("--resume", action="store_true", help="skip (op, dtype) pairs in --jsonl")
    ap.add_argument("--report", default="docs/op_numerics.md",
                    help="markdown file whose per-op section is rewritten from --jsonl")
    ap.add_argument("--report-only", action="store_true", help="only rewrite --report")
    args = ap.parse_args()
    if args.report_only:
        rows = [json.loads(x) for x in Path(args.jsonl).read_text().splitlines() if x]
        write_report(rows, Path(args.report))
        return
    import hlobridge  # noqa: F401  (the backend)

    ops = _load_op_db()
    wanted = {o for o in args.ops.split(",") if o}
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",") if d]
    out = Path(args.jsonl)
    out.parent.mkdir(parents=True, exist_ok=True)
    done: set[tuple[str, str, str]] = set()
    if args.resume and out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["op"], r["variant"], r["dtype"]))
    mode = "a" if args.resume else "w"
    t_start = time.time()
    with out.open(mode) as f:
        for op in ops:
            if wanted and op.name not in wanted:
                continue
            if not _comparable(op.name):
                continue
            for dt in dtypes:
                if (op.name, op.variant_test_name, str(dt)) in done:
                    continue
                if dt not in op.supported_dtypes("cpu"):
                    continue
                # Integer dtypes: a subset of dtypes per op is enough.
                n = args.samples if dt == torch.float32 else max(1, args.samples - 1)
                rows = sweep_op(op, dt, n, args.timeout_s)
                for r in rows:
                    f.write(json.dumps(r) + "\n")
                f.flush()
                bad = [r for r in rows if r["status"] == "flag"]
                print(f"[{time.time() - t_start:7.0f}s] {op.name}.{op.variant_test_name} {dt}: "
                      + ", ".join(r["status"] for r in rows)
                      + ("".join(f"\n    {r['detail']}" for r in bad)), flush=True)
    rows = [json.loads(x) for x in out.read_text().splitlines() if x]
    write_report(rows, Path(args.report))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        traceback.print_exc()
        sys.exit(130)
