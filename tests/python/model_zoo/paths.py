"""The four hlobridge paths a zoo model is run through, each checked
against eager torch on the same fresh random batches:

- ``compile_infer``: ``torch.compile(model, backend="hlobridge",
  dynamic=False)`` in ``eval()`` under ``no_grad`` vs eager float32; two
  batches (the second reuses the compiled program); logits within
  :data:`INFER_TOL`, and not vanishingly small (BatchNorm statistics are
  first set from real batches).
- ``compile_train``: the compiled module in ``train()``, ``loss.backward()``
  and ``torch.optim.SGD(lr=0.01, momentum=0.9)``, 2 steps (learning rates
  times the model's ``lr_scale``: 0.1 for BatchNorm convnets).
- ``step_sgd``: ``hb.compile_train_step`` with ``hb.optim.SGD(lr=0.01,
  momentum=0.9)`` vs ``torch.optim.SGD``, 3 steps.
- ``step_adam``: the same with ``hb.optim.Adam(lr=1e-3)`` vs
  ``torch.optim.Adam(lr=1e-3)``.

Training paths are compared with the same steps in eager torch in float64
(and eager float32 alongside): every loss within :data:`LOSS_TOL`, every
parameter and buffer after the steps within :data:`PARAM_TOL`
(:data:`ADAM_TOL` for Adam), or, where float32 itself drifts that far (it
does for BatchNorm nets: eager torch's own float32 BatchNorm gradients are
up to 2% off float64 for ResNet-18, and the steps amplify it), no more than
:data:`F32_FACTOR` times eager float32's own largest difference from
float64. Integer buffers (BatchNorm's ``num_batches_tracked``) must be
equal. A failure inside ``torch.compile`` surfaces as the backend's own
named error (Dynamo's ``BackendCompilerFailed`` is unwrapped).

:func:`run_hybrid` runs a hybrid row (``model_zoo/hybrid.py``) through
:data:`HYBRID_PATHS`: ``compile_infer`` and ``compile_train`` as above, and
``step_optax`` (``compile_train_step`` with Optax AdamW through
``hb.optim.JaxOptimizer`` vs ``torch.optim.AdamW``, :data:`ADAM_TOL`); the
references are the eager torch original, copied before the JAX modules are
swapped in.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

import hlobridge as hb
from model_zoo.hybrid import OPTAX_WEIGHT_DECAY, HybridModel, optax_adamw
from model_zoo.spec import ZooModel, calibrate_batchnorm, zoo_loss

__all__ = ["PATHS", "HYBRID_PATHS", "INFER_TOL", "LOSS_TOL", "PARAM_TOL", "ADAM_TOL", "run_path",
           "run_hybrid"]

PATHS = ("compile_infer", "compile_train", "step_sgd", "step_adam")
HYBRID_PATHS = ("compile_infer", "compile_train", "step_optax")
INFER_TOL = dict(rtol=1e-4, atol=1e-4)
LOSS_TOL = dict(rtol=1e-4, atol=1e-5)
PARAM_TOL = dict(rtol=1e-3, atol=1e-4)
ADAM_TOL = dict(rtol=1e-3, atol=2e-4)
F32_FACTOR = 10.0
SGD_LR = 0.01
ADAM_LR = 1e-3


def _close(a: torch.Tensor, b: torch.Tensor, tol: dict[str, float], what: str) -> float:
    """Assert ``a`` is close to ``b`` (exactly equal for integer tensors);
    return the largest absolute difference."""
    a, b = a.detach(), b.detach().to(a.dtype)
    if not b.dtype.is_floating_point:
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=lambda m: f"{what}: {m}")
        return 0.0
    torch.testing.assert_close(a, b, **tol, msg=lambda m: f"{what}: {m}")
    return float((a.float() - b.float()).abs().max()) if a.numel() else 0.0


@contextmanager
def _unwrapped() -> Iterator[None]:
    """Re-raise Dynamo's ``BackendCompilerFailed`` as the backend's error."""
    try:
        yield
    except torch._dynamo.exc.BackendCompilerFailed as e:  # type: ignore[attr-defined]
        inner = getattr(e, "inner_exception", None)
        if isinstance(inner, BaseException):
            raise inner from e
        raise


def _reference(model: torch.nn.Module) -> torch.nn.Module:
    return copy.deepcopy(model).double()


def _f64(batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(t.double() if t.is_floating_point() else t for t in batch)


class _Errors:
    """Worst differences from the float64 reference, of hlobridge and of
    eager float32 (see :func:`_check3`)."""

    def __init__(self) -> None:
        self.worst: dict[str, float] = {}

    def check(self, kind: str, got: torch.Tensor, e32: torch.Tensor, e64: torch.Tensor,
              tol: dict[str, float], what: str, f32_err: float | None = None) -> None:
        hb_err, own = _check3(got, e32, e64, tol, what, f32_err)
        for key, v in ((f"{kind}_err", hb_err), (f"{kind}_err_eager_f32", own)):
            self.worst[key] = max(self.worst.get(key, 0.0), v)

    def state(self, model: torch.nn.Module, e32: torch.nn.Module, e64: torch.nn.Module,
              tol: dict[str, float], what: str) -> None:
        """Every parameter and buffer; the float32 allowance is eager
        float32's largest difference over the whole model state (rounding
        made in one layer shows up in all the others). Matched by name (a
        hybrid's JAX modules keep the names of the torch ones)."""
        ours = dict([*model.named_parameters(), *model.named_buffers()])
        f32 = dict([*e32.named_parameters(), *e32.named_buffers()])
        f64 = dict([*e64.named_parameters(), *e64.named_buffers()])
        assert ours.keys() == f32.keys() == f64.keys(), sorted(ours.keys() ^ f32.keys())
        scale = max((_max_diff(f32[k], f64[k]) for k in f32), default=0.0)
        for name, t in ours.items():
            self.check("param", t, f32[name], f64[name], tol, f"{name} {what}", scale)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if not b.dtype.is_floating_point or a.numel() == 0:
        return 0.0
    return float((a.detach().double() - b.detach()).abs().max())


def _check3(got: torch.Tensor, e32: torch.Tensor, e64: torch.Tensor, tol: dict[str, float],
            what: str, f32_err: float | None = None) -> tuple[float, float]:
    """Check hlobridge's float32 value ``got`` against eager torch in float64
    (``e64``): within ``tol`` elementwise, or, where float32 itself is that
    far off (the same steps in eager float32, ``e32``, are: ``f32_err``,
    default this tensor's difference), no more than :data:`F32_FACTOR`
    times that. Integer tensors must be equal. Returns hlobridge's and eager
    float32's largest differences."""
    got, e64 = got.detach(), e64.detach()
    if not e64.dtype.is_floating_point:
        torch.testing.assert_close(got, e64, rtol=0, atol=0, msg=lambda m: f"{what}: {m}")
        return 0.0, 0.0
    own = _max_diff(e32, e64)
    allowance = own if f32_err is None else f32_err
    hb_err = _max_diff(got, e64)
    if torch.allclose(got.double(), e64, **tol) or hb_err <= F32_FACTOR * allowance:
        return hb_err, own
    raise AssertionError(f"{what}: hlobridge differs from eager float64 by {hb_err:.3g} "
                         f"(tolerance rtol={tol['rtol']}, atol={tol['atol']}); eager float32 "
                         f"differs by {allowance:.3g}")


def _batches(spec: ZooModel, n: int) -> list[tuple[torch.Tensor, ...]]:
    out = []
    for _ in range(n):
        xs = spec.inputs()
        out.append((*xs, spec.target(xs)))
    return out


Prepare = Callable[[torch.nn.Module], None]
"""Applied to the model hlobridge runs after the eager references are
copied from it (the hybrid rows swap JAX modules in here)."""


class _Segments:
    """Names of the segments of every program hlobridge ran (from the
    receipts), to prove that a hybrid's JAX pieces were inside."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def note(self) -> None:
        r = hb.last_receipt()
        if r is not None:
            self.names.update(f"{s.producer}:{s.name}" for s in r.segments)


def _compile_infer(spec: ZooModel, model: torch.nn.Module, prepare: Prepare | None = None,
                   seen: _Segments | None = None) -> dict[str, float]:
    calibrate_batchnorm(spec, model)
    model.eval()
    ref = copy.deepcopy(model)
    if prepare is not None:
        prepare(model)
    compiled = torch.compile(model, backend="hlobridge", dynamic=False)
    worst, scale = 0.0, 0.0
    with torch.no_grad(), _unwrapped():
        for i in range(2):
            xs = spec.inputs()
            expected = spec.logits(ref, *xs)
            got = spec.logits(compiled, *xs)
            if seen is not None:
                seen.note()
            worst = max(worst, _close(got, expected, INFER_TOL, f"logits, batch {i}"))
            scale = max(scale, float(expected.abs().max()))
    assert scale > 1e-3, f"degenerate check: the logits are all below {scale:.3g}"
    return {"logits_err": worst, "logits_max_abs": scale}


def _compile_train(spec: ZooModel, model: torch.nn.Module, prepare: Prepare | None = None,
                   seen: _Segments | None = None) -> dict[str, float]:
    model.train()
    e32, e64 = copy.deepcopy(model), _reference(model)
    if prepare is not None:
        prepare(model)
    loss_fn = zoo_loss(spec)
    compiled = torch.compile(model, backend="hlobridge", dynamic=False)
    opts = [torch.optim.SGD(m.parameters(), lr=SGD_LR * spec.lr_scale, momentum=0.9)
            for m in (model, e32, e64)]
    errs = _Errors()
    for i, batch in enumerate(_batches(spec, 2)):
        losses = []
        for m, opt, b in zip((compiled, e32, e64), opts, (batch, batch, _f64(batch))):
            with _unwrapped():
                loss = loss_fn(m, *b)
                if m is compiled and seen is not None:
                    seen.note()
                loss.backward()
                if m is compiled and seen is not None:
                    seen.note()
            opt.step()
            opt.zero_grad()
            losses.append(loss)
        errs.check("loss", *losses, LOSS_TOL, f"loss at step {i}")
    errs.state(model, e32, e64, PARAM_TOL, "after 2 steps")
    return errs.worst


def _step(spec: ZooModel, model: torch.nn.Module, opt: Any,
          make_ref_opt: Callable[..., torch.optim.Optimizer], tol: dict[str, float],
          prepare: Prepare | None = None, seen: _Segments | None = None) -> dict[str, float]:
    model.train()
    e32, e64 = copy.deepcopy(model), _reference(model)
    if prepare is not None:
        prepare(model)
    loss_fn = zoo_loss(spec)
    o32, o64 = make_ref_opt(e32.parameters()), make_ref_opt(e64.parameters())
    step = hb.compile_train_step(model, loss_fn, opt)
    errs = _Errors()
    for i, batch in enumerate(_batches(spec, 3)):
        loss = step(*batch)
        if seen is not None:
            seen.note()
        ref_losses = []
        for m, o, b in ((e32, o32, batch), (e64, o64, _f64(batch))):
            o.zero_grad()
            ref_loss = loss_fn(m, *b)
            ref_loss.backward()
            o.step()
            ref_losses.append(ref_loss)
        errs.check("loss", loss, *ref_losses, LOSS_TOL, f"loss at step {i}")
    errs.state(model, e32, e64, tol, "after 3 steps")
    return errs.worst


def run_path(spec: ZooModel, path: str, seed: int) -> dict[str, float]:
    """Build ``spec`` from ``seed`` and run it through ``path`` against eager
    torch; returns the measured worst differences. Raises AssertionError on
    a mismatch, or the named error of the path that cannot run it."""
    torch._dynamo.reset()
    torch.manual_seed(seed)
    model = spec.build()
    if path == "compile_infer":
        return _compile_infer(spec, model)
    if path == "compile_train":
        return _compile_train(spec, model)
    sgd_lr, adam_lr = SGD_LR * spec.lr_scale, ADAM_LR * spec.lr_scale
    if path == "step_sgd":
        return _step(spec, model, hb.optim.SGD(lr=sgd_lr, momentum=0.9),
                     lambda ps: torch.optim.SGD(ps, lr=sgd_lr, momentum=0.9), PARAM_TOL)
    if path == "step_adam":
        return _step(spec, model, hb.optim.Adam(lr=adam_lr),
                     lambda ps: torch.optim.Adam(ps, lr=adam_lr), ADAM_TOL)
    raise ValueError(f"unknown path {path!r}")


def run_hybrid(hybrid: HybridModel, path: str, seed: int) -> dict[str, float]:
    """Build the hybrid's base model from ``seed``, swap its JAX pieces in,
    and run it through ``path`` (``compile_infer``, ``compile_train`` or
    ``step_optax``) against the eager torch original. Also checks that every
    JAX function of the hybrid is a segment of a program hlobridge ran."""
    torch._dynamo.reset()
    torch.manual_seed(seed)
    spec = hybrid.base
    model = spec.build()
    swapped: list[int] = []
    seen = _Segments()

    def prepare(m: torch.nn.Module) -> None:
        swapped.append(hybrid.apply(m))

    if path == "compile_infer":
        metrics = _compile_infer(spec, model, prepare, seen)
    elif path == "compile_train":
        metrics = _compile_train(spec, model, prepare, seen)
    elif path == "step_optax":
        lr = ADAM_LR * spec.lr_scale
        metrics = _step(spec, model, optax_adamw(lr),
                        lambda ps: torch.optim.AdamW(ps, lr=lr, weight_decay=OPTAX_WEIGHT_DECAY),
                        ADAM_TOL, prepare, seen)
    else:
        raise ValueError(f"unknown hybrid path {path!r}")
    assert swapped and swapped[0] > 0, f"{hybrid.name}: no module was swapped"
    names = " ".join(sorted(seen.names))
    missing = [f for f in hybrid.jax_fns if f not in names]
    assert not missing, f"{hybrid.name}: {missing} ran in no hlobridge program: {names}"
    if path == "step_optax":
        assert "optax_adamw" in names, f"the Optax update is no segment: {names}"
    return {**metrics, "jax_modules": float(swapped[0])}
