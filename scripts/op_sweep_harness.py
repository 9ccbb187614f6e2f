"""The differential harness of the op sweep: one sample of an op run
compiled (``torch.compile(backend=..., fullgraph=True, dynamic=False)``),
eagerly, and eagerly in float64, and the verdict.

Used by ``scripts/op_sweep.py`` (the OpInfo sweep), by
``tests/python/test_op_sweep_subset.py`` (its ``make test`` subset) and by
``tests/python/test_op_numerics.py`` (curated and adversarial cases).

A floating/complex result *passes* when it is close to eager's by
``torch.testing.assert_close``'s per-dtype default tolerances (NaN where
eager has NaN), or, failing that, when it is as good as eager's own result
measured against the float64 one: its error (largest difference from the
float64 result, relative to that result's largest finite magnitude) is at
most ``FACTOR`` times eager's own error or below the dtype's floor
(``FLOORS``), with no NaN/Inf where eager is finite and no NaN of eager's
lost. Integer and bool results must equal eager's. Shapes, dtypes and the
result structure must equal eager's. With ``grad``, the same checks run on
the gradients of ``sum(out * w)`` (``w`` a seeded random cotangent).

Statuses (:data:`STATUSES`): ``pass``; ``wrong`` (a number, shape or dtype
differs); ``named`` (a named hlobridge error, ``BridgeError``: an
unsupported op, a torch_xla fallback, a data-dependent shape, ...);
``dynamo`` (Dynamo itself refused the function under ``fullgraph=True``: a
graph break or a tracing error, the same for every backend); ``crash`` (the
backend, or the compiled function, failed with an error that is not a named
one); ``skip`` (eager torch refuses the sample, or there is nothing to
differentiate); ``timeout`` (set by the sweep's watchdog).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

STATUSES = ("pass", "wrong", "named", "dynamo", "crash", "timeout", "skip")
"""Every status a sample can get, worst first (``skip`` is not a failure)."""

FAILURES = ("wrong", "named", "dynamo", "crash", "timeout")

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
    """One of :data:`STATUSES`."""
    detail: str = ""
    err: float = 0.0
    """The compiled function's largest error (relative to float64) over the
    results."""
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


def _close_by_torch_testing(got: torch.Tensor, eager: torch.Tensor) -> bool:
    try:
        torch.testing.assert_close(got.detach(), eager.detach(), equal_nan=True,
                                   check_device=False, check_stride=False)
    except AssertionError:
        return False
    return True


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
    if ref is None or ref.shape != got.shape:
        ref_own, own, err = 0.0, 0.0, _rel_err(got, eager)
    else:
        err, own = _rel_err(got, ref), _rel_err(eager, ref)
        ref_own = own
    if err > out.err:
        out.err, out.own = err, own
    if _close_by_torch_testing(got, eager):
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
    floor = FLOORS.get(got.dtype, 1e-5)
    if err > max(FACTOR * ref_own, floor):
        out.problems.append(f"{what}: error {err:.3g} vs float64 where eager's is {own:.3g}")


def _compare(got: Any, eager: Any, ref: Any, what: str, out: _Cmp) -> None:
    g_leaves, g_spec = pytree.tree_flatten(got)
    e_leaves, e_spec = pytree.tree_flatten(eager)
    r_leaves = pytree.tree_flatten(ref)[0] if ref is not None else [None] * len(e_leaves)
    if g_spec != e_spec:
        out.problems.append(f"{what}: structure {g_spec} where eager gives {e_spec}")
        return
    if len(r_leaves) != len(e_leaves):
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


def classify_error(e: BaseException) -> Outcome:
    """The status of a failed compiled run (module docs)."""
    from torch._dynamo.exc import BackendCompilerFailed, TorchRuntimeError, Unsupported, UserError

    inner = _is_backend_error(e)
    if inner is not None:
        return Outcome("named", f"{type(inner).__name__}: {first_line(inner)}")
    if isinstance(e, BackendCompilerFailed):
        cause = getattr(e, "inner_exception", None) or e
        return Outcome("crash", f"{type(cause).__name__}: {first_line(cause)}")
    if isinstance(e, (Unsupported, UserError, TorchRuntimeError)):
        return Outcome("dynamo", f"{type(e).__name__}: {first_line(e)}")
    return Outcome("crash", f"{type(e).__name__}: {first_line(e)}")


def _grads(outs: Any, ins: list[torch.Tensor], ws: list[torch.Tensor]) -> list[Any]:
    leaves = [o for o in pytree.tree_flatten(outs)[0]
              if isinstance(o, torch.Tensor) and o.requires_grad]
    if not leaves:
        return []
    ws = [w.to(o.dtype) for w, o in zip(ws, leaves)]
    return list(torch.autograd.grad(leaves, ins, ws, allow_unused=True))


def run_sample(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None = None,
               *, grad: bool = False, reference: bool = True, seed: int = 0,
               backend: str = "hlobridge", fullgraph: bool = True) -> Outcome:
    """Run ``fn(*args, **kwargs)`` compiled by ``backend``, eagerly, and
    eagerly in float64 (if ``reference``), and compare (module docs). Tensor
    leaves of ``args``/``kwargs`` become inputs of the compiled function;
    with ``grad``, floating ones that require grad get gradients too (and the
    outputs, computed with autograd on, are compared as well)."""
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
            (t.is_floating_point() or t.is_complex()) and t.dtype != torch.float64
            and t.numel() > 0)) for t in tensors]
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
        ws = [torch.randn(o.shape, generator=gen,
                          dtype=torch.complex128 if o.is_complex() else torch.float64)
              for o in leaves_out]
        g = _grads(out, ins, ws)
        return out, g

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eager, eager_g = run(call, tensors)
    except Exception as e:  # noqa: BLE001  (eager torch refuses the sample)
        return Outcome("skip", f"eager: {type(e).__name__}: {first_line(e)}")
    if grad and not eager_g:
        return Outcome("skip", "nothing to differentiate")
    ref = ref_g = None
    if reference:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref, ref_g = run(call, [_upcast(t) for t in tensors])
        except Exception:  # noqa: BLE001  (no float64 kernel: compare with eager only)
            ref = ref_g = None
    torch._dynamo.reset()
    compiled = torch.compile(call, backend=backend, fullgraph=fullgraph, dynamic=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, got_g = run(compiled, tensors)
    except Exception as e:  # noqa: BLE001
        return classify_error(e)
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
    if not cmp.problems and cmp.err > FLOORS[torch.float64] and _wide(got, got_g):
        # float64 (its own reference): assert_close's rtol 1e-7 passes a
        # float32-accurate lowering. Above the floor, flag unless eager moves
        # as much when its inputs move by one ulp (an ill-conditioned sample;
        # the float64 audit, scripts/op_sweep_f64_audit.py, docs/op_numerics.md).
        sens = _ulp_sensitivity(lambda ts: run(call, ts), tensors, (eager, eager_g))
        if cmp.err > FACTOR * sens:
            cmp.problems.append(f"float64: error {cmp.err:.3g} vs eager, where one ulp "
                                f"of the inputs moves eager by {sens:.3g}")
    if cmp.problems:
        return Outcome("wrong", "; ".join(cmp.problems), cmp.err, cmp.own)
    return Outcome("pass", "", cmp.err, cmp.own)


def _wide(*trees: Any) -> bool:
    """Whether every floating result is float64/complex128."""
    ts = [t for t in pytree.tree_flatten(trees)[0] if isinstance(t, torch.Tensor)
          and (t.is_floating_point() or t.is_complex())]
    return bool(ts) and all(t.dtype in (torch.float64, torch.complex128) for t in ts)


def _ulp_sensitivity(run: Callable[..., Any], tensors: list[torch.Tensor], base: Any,
                     trials: int = 2) -> float:
    """The largest relative change of eager's results (``base``) when each
    float64 input moves by one ulp (seeded random directions)."""
    ref = [t for t in pytree.tree_flatten(base)[0] if isinstance(t, torch.Tensor)]
    worst = 0.0
    for k in range(trials):
        gen = torch.Generator().manual_seed(k)

        def bump(t: torch.Tensor) -> torch.Tensor:
            if t.dtype != torch.float64 or t.numel() == 0:
                return t
            up = torch.randint(0, 2, t.shape, generator=gen).to(t.dtype) * 2 - 1
            return torch.nextafter(t.detach(), up * math.inf).requires_grad_(t.requires_grad)

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                moved = [t for t in pytree.tree_flatten(run([bump(t) for t in tensors]))[0]
                         if isinstance(t, torch.Tensor)]
        except Exception:  # noqa: BLE001
            return 0.0
        worst = max([worst] + [_rel_err(m, r) for m, r in zip(moved, ref) if m.shape == r.shape
                               and (r.is_floating_point() or r.is_complex())])
    return worst


def first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return (s[0] if s else "")[:200]
