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

Training paths are judged against the same steps in eager torch in float64,
with eager float32 alongside (``model_zoo/accuracy.py`` says how and why):

- every step's loss: *exactly* (within :data:`LOSS_TOL`) the loss eager
  float64 computes for the same batch from hlobridge's own weights at that
  step (one forward: not chaotic);
- every parameter and float buffer after the steps: the *statistical*
  check (PyTorch's ``same`` with ``fp64_ref``): within :data:`PARAM_TOL`
  (:data:`ADAM_TOL` for Adam) of eager float64 elementwise, or an RMS
  difference from float64 of at most 3x-10x eager float32's own (by size)
  and a change in the same direction as float64's (cosine similarity at
  least 0.99). Float32 training of BatchNorm nets is chaotic (one ReLU mask
  flipped by a last-bit difference moves a whole channel), so one seed's
  elementwise distance says nothing on another CPU;
- integer buffers (BatchNorm's ``num_batches_tracked``): equal.

The losses of the free-running trajectories (hlobridge's, eager
float32's, both against eager float64's) are recorded, not asserted: the
state check judges the trajectory. A failure inside ``torch.compile``
surfaces as the backend's own named error (Dynamo's
``BackendCompilerFailed`` is unwrapped).

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
from model_zoo.accuracy import check_exact, check_statistical
from model_zoo.hybrid import OPTAX_WEIGHT_DECAY, HybridModel, optax_adamw
from model_zoo.spec import ZooModel, calibrate_batchnorm, zoo_loss

__all__ = ["PATHS", "HYBRID_PATHS", "INFER_TOL", "LOSS_TOL", "PARAM_TOL", "ADAM_TOL", "TrainingChecks",
           "run_path", "run_hybrid"]

PATHS = ("compile_infer", "compile_train", "step_sgd", "step_adam")
HYBRID_PATHS = ("compile_infer", "compile_train", "step_optax")
INFER_TOL = dict(rtol=1e-4, atol=1e-4)
LOSS_TOL = dict(rtol=1e-4, atol=1e-5)
PARAM_TOL = dict(rtol=1e-3, atol=1e-4)
ADAM_TOL = dict(rtol=1e-3, atol=2e-4)
SGD_LR = 0.01
ADAM_LR = 1e-3


def _close(a: torch.Tensor, b: torch.Tensor, tol: dict[str, float], what: str) -> float:
    """Assert ``a`` is close to ``b`` elementwise (both as float64; integer
    tensors equal); return the largest absolute difference."""
    return check_exact(a, b, tol, what)


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


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer by name (a hybrid's JAX modules keep the
    names of the torch ones)."""
    return dict([*model.named_parameters(), *model.named_buffers()])


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if not b.dtype.is_floating_point or a.numel() == 0:
        return 0.0
    return float((a.detach().double() - b.detach().double()).abs().max())


class TrainingChecks:
    """The training checks (see the module docstring) and the figures they
    measured: ``loss_err`` and ``loss_err_eager_f32`` (free-running losses
    against eager float64's, recorded), ``loss_err_same_weights`` (the
    asserted loss check), ``param_err``/``param_err_eager_f32`` (largest
    elementwise differences from float64), ``param_rms``/
    ``param_rms_eager_f32`` (RMS over the whole state), and
    ``param_statistical`` (how many tensors needed the statistical
    check)."""

    def __init__(self, spec: ZooModel, e64: torch.nn.Module) -> None:
        self.worst: dict[str, float] = {}
        self._loss_fn = zoo_loss(spec)
        self._template = copy.deepcopy(e64)
        self._start = {k: t.detach().clone() for k, t in _state(e64).items()}

    def _max(self, key: str, v: float) -> None:
        self.worst[key] = max(self.worst.get(key, 0.0), v)

    def loss_reference(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...]
                       ) -> torch.Tensor:
        """The loss eager float64 computes for ``batch`` from ``model``'s
        weights and buffers as they are now (call before hlobridge's step)."""
        m = copy.deepcopy(self._template)
        src = _state(model)
        with torch.no_grad():
            for k, t in _state(m).items():
                t.copy_(src[k].detach())
            return self._loss_fn(m, *_f64(batch)).detach()

    def loss(self, i: int, got: torch.Tensor, same_weights: torch.Tensor, e32: torch.Tensor,
             e64: torch.Tensor) -> None:
        """Step ``i``'s loss: exactly eager float64's from the same weights;
        the free-running losses are recorded."""
        self._max("loss_err_same_weights",
                  check_exact(got, same_weights, LOSS_TOL, f"loss at step {i} (eager float64 "
                              f"from hlobridge's weights at that step)"))
        self._max("loss_err", _diff(got, e64))
        self._max("loss_err_eager_f32", _diff(e32, e64))

    def state(self, model: torch.nn.Module, e32: torch.nn.Module, e64: torch.nn.Module,
              tol: dict[str, float], what: str, parameters_only: bool = False) -> None:
        """Every parameter and buffer after the steps: the statistical check
        (integer buffers equal). Matched by name. ``parameters_only``: the
        buffers are not compared (a run that holds them constant)."""
        ours, f32, f64 = _state(model), _state(e32), _state(e64)
        if parameters_only:
            keep = {n for n, _ in model.named_parameters()}
            ours, f32, f64 = ({k: v for k, v in d.items() if k in keep} for d in (ours, f32, f64))
        assert ours.keys() == f32.keys() == f64.keys(), sorted(ours.keys() ^ f32.keys())
        sq_hb = sq_f32 = 0.0
        n = 0
        statistical = 0
        for name, t in ours.items():
            st = check_statistical(t, f32[name], f64[name], tol, f"{name} {what}",
                                   self._start[name])
            if f64[name].dtype.is_floating_point:
                sq_hb += st.hb_rms ** 2 * t.numel()
                sq_f32 += st.f32_rms ** 2 * t.numel()
                n += t.numel()
            statistical += not st.elementwise
            self._max("param_err", st.hb_max)
            self._max("param_err_eager_f32", _diff(f32[name], f64[name]))
        self.worst["param_rms"] = (sq_hb / max(n, 1)) ** 0.5
        self.worst["param_rms_eager_f32"] = (sq_f32 / max(n, 1)) ** 0.5
        self.worst["param_statistical"] = float(statistical)


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
    errs = TrainingChecks(spec, e64)
    for i, batch in enumerate(_batches(spec, 2)):
        same_weights = errs.loss_reference(model, batch)
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
            losses.append(loss.detach())
        errs.loss(i, losses[0], same_weights, losses[1], losses[2])
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
    errs = TrainingChecks(spec, e64)
    for i, batch in enumerate(_batches(spec, 3)):
        same_weights = errs.loss_reference(model, batch)
        loss = step(*batch)
        if seen is not None:
            seen.note()
        ref_losses = []
        for m, o, b in ((e32, o32, batch), (e64, o64, _f64(batch))):
            o.zero_grad()
            ref_loss = loss_fn(m, *b)
            ref_loss.backward()
            o.step()
            ref_losses.append(ref_loss.detach())
        errs.loss(i, loss, same_weights, *ref_losses)
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
