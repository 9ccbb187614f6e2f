"""``torch.optim`` optimizers and ``lr_scheduler``s in
:func:`hlobridge.compile_train_step`, gradient clipping and accumulation,
:class:`hlobridge.optim.AdamW`, and the named errors: each against eager
torch with the same optimizer, three steps, on a small MLP.

Inputs and initial weights are fresh random each run (the seed is printed
in failure messages; set HLOBRIDGE_TEST_SEED to replay). Tolerances are
those of ``test_train_step.py`` (float32, XLA vs torch kernels, a few
steps of a small MLP): losses rtol=1e-4/atol=1e-5; parameters and
optimizer state rtol=1e-3/atol=1e-4, Adam-family atol=2e-4 (division by
small second moments amplifies the gradients' summation-order rounding).
Measured here the differences are ~1e-7 (a few float32 ulps).

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_train_torch_optim.py -q
"""

from __future__ import annotations

import copy
import io
import os
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import hlobridge as hb
from hlobridge import optim

SEED = int(os.environ.get("HLOBRIDGE_TEST_SEED", int.from_bytes(os.urandom(4), "little")))
LOSS_TOL = dict(rtol=1e-4, atol=1e-5)
PARAM_TOL = dict(rtol=1e-3, atol=1e-4)
ADAM_TOL = dict(rtol=1e-3, atol=2e-4)


@pytest.fixture(autouse=True)
def seeded() -> None:
    torch.manual_seed(SEED)


def close(a: torch.Tensor, b: torch.Tensor, tol: dict[str, float], what: str = "") -> None:
    torch.testing.assert_close(a.detach(), b.detach(), **tol,
                               msg=lambda m: f"seed={SEED} {what}: {m}")


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 24)
        self.fc2 = torch.nn.Linear(24, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def loss_fn(model: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor
            ) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


def batch(n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, 12), torch.randint(0, 5, (n,))


def eager_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
               y: torch.Tensor, max_grad_norm: float | None = None) -> torch.Tensor:
    """One eager torch training step, the reference for the compiled one;
    returns its loss."""
    opt.zero_grad()
    loss = loss_fn(model, x, y)
    loss.backward()
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    opt.step()
    return loss


def close_params(got: torch.nn.Module, want: torch.nn.Module, tol: dict[str, float],
                 what: str = "") -> None:
    """Every parameter of ``got`` matches ``want``'s, named ``what`` + its name."""
    for (n, p), q in zip(want.named_parameters(), got.parameters()):
        close(q, p, tol, f"{what}{n}")


def groups(model: MLP, per_group: bool) -> Any:
    if not per_group:
        return model.parameters()
    return [{"params": [model.fc1.weight, model.fc2.weight]},
            {"params": [model.fc1.bias, model.fc2.bias], "lr": 3e-3, "weight_decay": 0.0}]


def check_state(opt: torch.optim.Optimizer, ref: torch.optim.Optimizer,
                tol: dict[str, float]) -> None:
    got, want = opt.state_dict(), ref.state_dict()
    assert got["state"].keys() == want["state"].keys()
    for i, st in want["state"].items():
        assert got["state"][i].keys() == st.keys(), (i, got["state"][i].keys(), st.keys())
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                assert got["state"][i][k].dtype == v.dtype, (i, k)
                close(got["state"][i][k], v, tol, f"state[{i}][{k!r}]")
            else:
                assert got["state"][i][k] == v


CASES: list[tuple[str, type[torch.optim.Optimizer], dict[str, Any]]] = [
    ("sgd", torch.optim.SGD, dict(lr=0.1)),
    ("sgd_momentum_dampening_wd", torch.optim.SGD,
     dict(lr=0.1, momentum=0.9, dampening=0.2, weight_decay=1e-2)),
    ("sgd_nesterov_maximize_foreach", torch.optim.SGD,
     dict(lr=0.05, momentum=0.8, nesterov=True, maximize=True, foreach=True)),
    ("adam", torch.optim.Adam, dict(lr=1e-2)),
    ("adam_l2_amsgrad_foreach", torch.optim.Adam,
     dict(lr=1e-2, betas=(0.8, 0.95), weight_decay=1e-2, amsgrad=True, foreach=True)),
    ("adam_maximize_single_tensor", torch.optim.Adam, dict(lr=1e-2, maximize=True,
                                                          foreach=False)),
    ("adamw", torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    ("adamw_amsgrad", torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, amsgrad=True,
                                              eps=1e-6)),
    ("rmsprop", torch.optim.RMSprop, dict(lr=1e-2)),
    ("rmsprop_centered_momentum_wd", torch.optim.RMSprop,
     dict(lr=1e-2, alpha=0.9, centered=True, momentum=0.5, weight_decay=1e-2, foreach=True)),
]


@pytest.mark.parametrize("per_group", [False, True], ids=["one_group", "param_groups"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_matches_eager_torch_optimizer(case: tuple[str, type[torch.optim.Optimizer],
                                                   dict[str, Any]], per_group: bool) -> None:
    _, cls, kwargs = case
    eager = MLP()
    model = copy.deepcopy(eager)
    opt_e = cls(groups(eager, per_group), **kwargs)
    opt = cls(groups(model, per_group), **kwargs)
    step = hb.compile_train_step(model, loss_fn, opt)
    tol = ADAM_TOL if cls in (torch.optim.Adam, torch.optim.AdamW) else PARAM_TOL
    for i in range(3):
        x, y = batch()
        got = step(x, y)
        want = eager_step(eager, opt_e, x, y)
        close(got, want, LOSS_TOL, f"step {i} loss")
        close_params(model, eager, tol, f"step {i} ")
        check_state(opt, opt_e, tol)
    # SGD's first step creates its momentum buffers: still one program.
    assert len(step.graphs) == 1


def test_cosine_schedule_with_warmup_compiles_once() -> None:
    """An lr_scheduler stepping the optimizer between steps: lr (and
    anything else in param_groups) is a program input, so ten steps with
    ten learning rates, and changed betas/weight decay, are one program."""
    eager = MLP()
    model = copy.deepcopy(eager)
    opts, scheds = [], []
    for m in (eager, model):
        o = torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.05)
        warm = torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=3)
        cos = torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=7)
        opts.append(o)
        scheds.append(torch.optim.lr_scheduler.SequentialLR(o, [warm, cos], milestones=[3]))
    step = hb.compile_train_step(model, loss_fn, opts[1])
    lrs = []
    for i in range(10):
        if i == 6:  # any scalar hyperparameter may change between steps
            for o in opts:
                o.param_groups[0]["betas"] = (0.85, 0.99)
                o.param_groups[0]["weight_decay"] = 0.1
        x, y = batch()
        got = step(x, y)
        opts[0].zero_grad()
        want = loss_fn(eager, x, y)
        want.backward()
        opts[0].step()
        lrs.append(opts[1].param_groups[0]["lr"])
        if i == 0:
            compiles = hb.stats()["compiles"]  # the native runtime's PJRT compiles
        for s in scheds:
            s.step()
        close(got, want, LOSS_TOL, f"step {i} loss")
    close_params(model, eager, ADAM_TOL)
    check_state(opts[1], opts[0], ADAM_TOL)
    assert len(set(lrs)) == 10
    assert len(step.graphs) == 1
    assert hb.stats()["compiles"] == compiles, "a later step compiled again"


def test_lambda_lr_and_reduce_on_plateau_compile_once() -> None:
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    step = hb.compile_train_step(model, loss_fn, opt)
    for _ in range(4):
        step(*batch())
        sched.step()
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    for _ in range(3):
        loss = step(*batch())
        plateau.step(float(loss) + 10.0)  # worse every time: lr halves
    assert len(step.graphs) == 1


def test_state_dict_save_load_resumes_like_eager() -> None:
    """Two compiled steps, save model and optimizer state_dicts, load them
    into a fresh model and optimizer (and a fresh compiled step): the next
    step equals eager's from the same saved state."""
    model = MLP()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, amsgrad=True)
    step = hb.compile_train_step(model, loss_fn, opt)
    for _ in range(2):
        step(*batch())
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    saved = buf.getvalue()
    assert opt.state_dict()["state"][0]["step"].item() == 2.0

    def restore() -> tuple[MLP, torch.optim.Optimizer]:
        ck = torch.load(io.BytesIO(saved))
        m = MLP()
        m.load_state_dict(ck["model"])
        o = torch.optim.Adam(m.parameters(), lr=1e-2, amsgrad=True)
        o.load_state_dict(ck["opt"])
        return m, o

    resumed, opt_r = restore()
    eager, opt_e = restore()
    step_r = hb.compile_train_step(resumed, loss_fn, opt_r)
    x, y = batch()
    step_r(x, y)
    eager_step(eager, opt_e, x, y)
    close_params(resumed, eager, ADAM_TOL)
    check_state(opt_r, opt_e, ADAM_TOL)
    assert opt_r.state_dict()["state"][0]["step"].item() == 3.0
    # The original step keeps going from its own optimizer's state too.
    step(x, y)
    assert opt.state_dict()["state"][0]["step"].item() == 3.0


def test_unused_parameter_keeps_no_state_as_in_torch() -> None:
    """A parameter the loss does not reach gets no gradient: torch skips it
    (no update, no state); so does the compiled step."""
    eager = MLP()
    eager.extra = torch.nn.Parameter(torch.randn(3))
    model = copy.deepcopy(eager)
    opt_e = torch.optim.Adam(eager.parameters(), lr=1e-2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    step = hb.compile_train_step(model, loss_fn, opt)
    for _ in range(2):
        x, y = batch()
        step(x, y)
        eager_step(eager, opt_e, x, y)
    assert model.extra not in opt.state and eager.extra not in opt_e.state
    close(model.extra, eager.extra, dict(rtol=0, atol=0), "extra")
    check_state(opt, opt_e, ADAM_TOL)


def test_frozen_parameters_in_the_optimizer_are_skipped_as_in_torch() -> None:
    """AdamW(model.parameters()) with a frozen layer: torch skips it (no
    gradient), and so does the compiled step."""
    eager = MLP()
    eager.fc1.requires_grad_(False)
    model = copy.deepcopy(eager)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step = hb.compile_train_step(model, loss_fn, opt)
    for i in range(3):
        x, y = batch()
        got = step(x, y)
        want = eager_step(eager, opt_e, x, y)
        close(got, want, LOSS_TOL, f"step {i} loss")
    close_params(model, eager, ADAM_TOL)
    assert model.fc1.weight not in opt.state
    check_state(opt, opt_e, ADAM_TOL)


@pytest.mark.parametrize("max_norm", [0.05, 100.0], ids=["clips", "no_clip"])
def test_max_grad_norm_matches_clip_grad_norm(max_norm: float) -> None:
    eager = MLP()
    model = copy.deepcopy(eager)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.5, momentum=0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    step = hb.compile_train_step(model, loss_fn, opt, max_grad_norm=max_norm)
    for i in range(3):
        x, y = batch()
        got = step(x, y)
        want = eager_step(eager, opt_e, x, y, max_grad_norm=max_norm)
        close(got, want, LOSS_TOL, f"step {i} loss")
    close_params(model, eager, PARAM_TOL)


class BNNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # No bias before BatchNorm: its gradient is zero up to rounding,
        # which Adam would normalize into noise.
        self.fc1 = torch.nn.Linear(12, 24, bias=False)
        self.bn = torch.nn.BatchNorm1d(24)
        self.fc2 = torch.nn.Linear(24, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


@pytest.mark.parametrize("k", [2, 4])
def test_accumulate_matches_eager_micro_batches(k: int) -> None:
    """accumulate=k: one program runs k micro-batches (BatchNorm's running
    statistics updated after each, as eager) and one optimizer step."""
    eager = BNNet()
    model = copy.deepcopy(eager)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step = hb.compile_train_step(model, loss_fn, opt, accumulate=k, max_grad_norm=1.0)
    for i in range(3):
        x, y = batch(16)
        got = step(x, y)
        opt_e.zero_grad()
        losses = []
        for xs, ys in zip(x.chunk(k), y.chunk(k)):
            loss = loss_fn(eager, xs, ys)
            (loss / k).backward()
            losses.append(loss.detach())
        torch.nn.utils.clip_grad_norm_(eager.parameters(), 1.0)
        opt_e.step()
        close(got, torch.stack(losses).mean(), LOSS_TOL, f"step {i} loss")
    close_params(model, eager, ADAM_TOL)
    for (n, b), c in zip(eager.named_buffers(), model.buffers()):
        close(c.float(), b.float(), PARAM_TOL, n)
    with pytest.raises(hb.ArgumentError, match="multiple of"):
        step(*batch(k * 4 + 1))


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_hb_optim_adamw_equals_torch_adamw(wd: float) -> None:
    eager = MLP()
    model = copy.deepcopy(eager)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=1e-2, betas=(0.9, 0.99), weight_decay=wd)
    step = hb.compile_train_step(model, loss_fn, optim.AdamW(lr=1e-2, betas=(0.9, 0.99),
                                                             weight_decay=wd))
    for i in range(3):
        x, y = batch()
        got = step(x, y)
        want = eager_step(eager, opt_e, x, y)
        close(got, want, LOSS_TOL, f"step {i} loss")
        close_params(model, eager, ADAM_TOL, f"step {i} ")
    sd = opt_e.state_dict()["state"]
    for j, (n, _) in enumerate(eager.named_parameters()):
        close(step.state["m"][n], sd[j]["exp_avg"], ADAM_TOL, f"exp_avg {n}")
        close(step.state["v"][n], sd[j]["exp_avg_sq"], ADAM_TOL, f"exp_avg_sq {n}")
    assert float(step.state["step"]) == 3.0


class MyOptimizer(torch.optim.Optimizer):
    def __init__(self, params: Any) -> None:
        super().__init__(params, {"lr": 0.1})

    def step(self, closure: Any = None) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                p.data.add_(p.grad.sign(), alpha=-g["lr"])


class MyAdam(torch.optim.Adam):
    def step(self, closure: Any = None) -> Any:  # a changed update
        return super().step(closure)


@pytest.mark.parametrize("cls", [MyOptimizer, MyAdam, torch.optim.Adagrad])
def test_custom_torch_optimizer_is_refused_by_name(cls: type[torch.optim.Optimizer]) -> None:
    model = MLP()
    with pytest.raises(hb.UnsupportedOptimizerError) as e:
        hb.compile_train_step(model, loss_fn, cls(model.parameters()))
    msg = str(e.value)
    assert cls.__name__ in msg
    for name in ("torch.optim.SGD", "torch.optim.Adam", "torch.optim.AdamW",
                 "torch.optim.RMSprop"):
        assert name in msg
    assert isinstance(e.value, hb.ArgumentError)
    again = pickle.loads(pickle.dumps(e.value))
    assert type(again) is hb.UnsupportedOptimizerError and str(again) == msg


def test_optimizer_over_other_tensors_is_refused() -> None:
    model = MLP()
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=0.1)
    with pytest.raises(hb.ArgumentError, match="not a trainable parameter"):
        hb.compile_train_step(model, loss_fn, opt)


def test_data_dependent_control_flow_is_a_named_error_with_a_hint() -> None:
    model = MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def branching(m: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor
                  ) -> torch.Tensor:
        loss = F.cross_entropy(m(x), y)
        if loss > 1.0:  # Python control flow on a tensor value
            loss = loss * 0.5
        return loss

    step = hb.compile_train_step(model, branching, opt)
    with pytest.raises(hb.DataDependentError, match="torch.where") as e:
        step(*batch())
    assert "depends on tensor values" in str(e.value)

    def item(m: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor
             ) -> torch.Tensor:
        return F.cross_entropy(m(x), y) * float(x.abs().max())

    with pytest.raises(hb.DataDependentError):
        hb.compile_train_step(model, item, opt)(*batch())
    # The process keeps working: a fixed step compiles and runs.
    assert torch.isfinite(hb.compile_train_step(model, loss_fn, opt)(*batch()))
