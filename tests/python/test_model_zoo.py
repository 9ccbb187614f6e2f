"""The model zoo: tiny random Hugging Face, torchvision and timm models
(``tests/python/model_zoo/``) through every hlobridge path, against eager
torch; plus focused regression tests for the failures real models showed.

Paths and checks: ``model_zoo/paths.py`` and ``model_zoo/accuracy.py``
(inference logits rtol=1e-4/atol=1e-4 vs eager float32; every training
step's loss within rtol=1e-4/atol=1e-5 of eager float64's from the same
weights; the weights and float buffers after the steps by the statistical
check of PyTorch's own accuracy checker: within rtol=1e-3/atol=1e-4 (Adam
atol=2e-4) of eager float64, or an RMS difference from float64 of at most
3x-10x eager float32's own and a change in float64's direction; integer
buffers equal). Seeds: every cell builds its model and draws its batches
from ``torch.manual_seed(SEED)`` with ``SEED = 20240917``
(``HLOBRIDGE_TEST_SEED`` overrides it; it is printed in failure messages).

A cell that cannot work is listed in ``EXPECTED_ERRORS`` with the named
error it must raise (it fails if it starts passing, or raises anything
else). Every cell runs by default except those a model marks ``heavy``,
with the reason docs/models.md prints (none today); ``HLOBRIDGE_ZOO=all``
runs those too.
The hybrid rows and ``generate()`` are in ``test_zoo_hybrid.py`` and
``test_zoo_generate.py``. With ``HLOBRIDGE_ZOO_JSON=path`` every cell's
outcome, measured differences and time are merged into that file
(``model_zoo/results.py``); ``scripts/gen_models_table.py`` renders it as
docs/models.md.

Run:  PJRT_DEVICE=CPU .venv/bin/python -m pytest -W error tests/python/test_model_zoo.py -q
"""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import hlobridge as hb
from model_zoo import MODELS, by_name
from model_zoo.paths import PATHS, run_path
from model_zoo.results import SEED, fresh_dynamo, write_results  # noqa: F401 (fixtures)
from model_zoo.results import record_cell

RUN_HEAVY = os.environ.get("HLOBRIDGE_ZOO") == "all"
EXPECTED_ERRORS: dict[tuple[str, str], type[BaseException]] = {}
"""(model, path) -> the named error that cell raises today."""



# Dynamo itself reads ``.grad`` of a non-leaf tensor while tracing T5 and
# BART for training (backend="eager" too), and warns; it also warns when it
# traces through transformers' ``functools.lru_cache``-wrapped FSDP check
# (Wav2Vec2).
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", [m.name for m in MODELS])
def test_zoo_cell(name: str, path: str) -> None:
    spec = by_name(name)
    if path in spec.heavy and not RUN_HEAVY:
        pytest.skip(f"held out ({spec.heavy_reason}): runs with HLOBRIDGE_ZOO=all")
    record_cell(f"{name}/{path}", lambda: run_path(spec, path, SEED),
                EXPECTED_ERRORS.get((name, path)), SEED)


# -- focused regression tests -------------------------------------------------


class ManyBatchNorms(torch.nn.Module):
    """40 BatchNorm layers, so 40 0-d int64 ``num_batches_tracked`` inputs
    (torch_xla merged equal 0-d trace values; with 29 distinct ones
    MobileNetV3's dozens of BatchNorms collided)."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList(torch.nn.Conv2d(4, 4, 1) for _ in range(40))
        self.bns = torch.nn.ModuleList(torch.nn.BatchNorm2d(4) for _ in range(40))
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, bn in zip(self.convs, self.bns):
            x = torch.relu(bn(conv(x))) + x
        return self.head(x.mean((2, 3)))


def _ce(m: Any, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(m(x), y)


def test_train_step_with_many_batchnorms_counts_batches_and_updates_running_var() -> None:
    """Whole-step capture of a net with 40 BatchNorms: every
    ``num_batches_tracked`` is 3 after 3 steps, and ``running_mean``/
    ``running_var`` match eager torch (the unbiased variance: a 2x2 map
    and batch 4 make torch's n/(n-1) factor 16/15)."""
    torch.manual_seed(SEED)
    model = ManyBatchNorms()
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.01)
    step = hb.compile_train_step(model, _ce, hb.optim.SGD(lr=0.01))
    for _ in range(3):
        x, y = torch.randn(4, 4, 2, 2), torch.randint(0, 3, (4,))
        step(x, y)
        ref_opt.zero_grad()
        _ce(ref, x, y).backward()
        ref_opt.step()
    for (name, b), c in zip(model.named_buffers(), ref.buffers()):
        if name.endswith("num_batches_tracked"):
            assert int(b) == 3, name
        torch.testing.assert_close(b, c, rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"seed={SEED} {name}: {m}")


def test_compile_training_batchnorm_running_var_is_unbiased() -> None:
    """``torch.compile`` training through BatchNorm updates ``running_var``
    with the unbiased batch variance, as eager torch (torch_xla's own
    lowering used the biased one)."""
    torch.manual_seed(SEED)
    model = torch.nn.Sequential(torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.Linear(16, 3))
    ref = copy.deepcopy(model)
    x = torch.randn(4, 4, 2, 2) * 3
    torch.compile(model, backend="hlobridge", dynamic=False)(x).sum().backward()
    ref(x).sum().backward()
    torch.testing.assert_close(model[0].running_var, ref[0].running_var, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model[0].running_mean, ref[0].running_mean, rtol=1e-5,
                               atol=1e-6)


class MakesConstants(torch.nn.Module):
    """Creates tensors in ``forward``, as Hugging Face models do (an empty
    ``torch.tensor([])``, a 0-d window size): under ``no_grad`` they become
    real ``get_attr`` constants of the graph AOTAutograd compiles while its
    FakeTensorMode is active."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        empty = torch.tensor([])
        window = torch.tensor(4096)
        h = self.lin(x)
        return h[:, -int(window) + 1:] * (1 + empty.numel()) + empty.sum()


def test_compile_inference_with_constants_created_in_forward() -> None:
    torch.manual_seed(SEED)
    model = MakesConstants().eval()
    compiled = torch.compile(model, backend="hlobridge", dynamic=False)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(3, 8)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"seed={SEED}: {m}")


class WeightNormConv(torch.nn.Module):
    """A weight-normalized 1-D convolution over the kernel axis (``dim=2``),
    as Wav2Vec2's positional convolution, and one over the output channels
    (``dim=0``)."""

    def __init__(self) -> None:
        super().__init__()
        wn = torch.nn.utils.parametrizations.weight_norm
        self.conv = wn(torch.nn.Conv1d(4, 4, 3, padding=1, groups=2), name="weight", dim=2)
        self.head = wn(torch.nn.Linear(4 * 6, 3), name="weight", dim=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.nn.functional.gelu(self.conv(x)).flatten(1))


@pytest.mark.parametrize("path", ["compile_train", "step_sgd"])
def test_weight_norm_trains_as_eager(path: str) -> None:
    """Weight normalization's backward (no torch_xla lowering, no torch
    decomposition: the backend spells it out) trains as eager torch does:
    losses, gradients of ``original0``/``original1`` and parameters after 2
    steps within rtol=1e-4/atol=1e-5."""
    torch.manual_seed(SEED)
    model = WeightNormConv()
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    if path == "compile_train":
        compiled = torch.compile(model, backend="hlobridge", dynamic=False)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        step = hb.compile_train_step(model, _ce, hb.optim.SGD(lr=0.1, momentum=0.9))
    tol = dict(rtol=1e-4, atol=1e-5)
    for i in range(2):
        x, y = torch.randn(5, 4, 6), torch.randint(0, 3, (5,))
        ref_opt.zero_grad()
        want = _ce(ref, x, y)
        want.backward()
        if path == "compile_train":
            opt.zero_grad()
            got = _ce(compiled, x, y)
            got.backward()
            for (name, p), q in zip(model.named_parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, **tol,
                                           msg=lambda m: f"seed={SEED} grad {name}: {m}")
            opt.step()
        else:
            got = step(x, y)
        ref_opt.step()
        torch.testing.assert_close(got.detach(), want.detach(), **tol,
                                   msg=lambda m: f"seed={SEED} loss {i}: {m}")
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), **tol,
                                   msg=lambda m: f"seed={SEED} {name}: {m}")
