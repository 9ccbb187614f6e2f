"""One path of one real-size model in its own process (``run.py`` starts
three per group: eager, inductor, hlobridge), so that each path's peak RSS
is its own while the timing stays interleaved: the parent asks the workers
in turn to run a batch of calls, and only one worker computes at a time
(the others block reading their pipe).

Protocol: ``argv[1]`` is a JSON job (model, path, variant, optimizer, lr,
threads, save). Replies are JSON lines on a private copy of the original
stdout (the worker's own ``sys.stdout`` goes to stderr, so library prints
cannot corrupt the protocol). First reply: ``ready`` with the build RSS,
the first call's seconds (trace + compile + run; eager: a plain call), the
first two losses (train) and the peak RSS so far, or ``error``. Then
commands, one JSON line each on stdin:

``{"cmd": "run", "n": k}``  -> ``{"s": seconds for k calls}``
``{"cmd": "reset_peak"}``   -> peak RSS reset to the current RSS (``/proc/self/clear_refs``)
``{"cmd": "mem"}``          -> ``{"rss_mib", "peak_mib"}``
``{"cmd": "quit"}``
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _mem() -> dict[str, float]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key = "rss_mib" if line.startswith("VmRSS") else "peak_mib"
                out[key] = int(line.split()[1]) / 1024
    return out


def _error(e: BaseException) -> str:
    inner = getattr(e, "inner_exception", None)
    if isinstance(inner, BaseException):
        e = inner
    return f"{type(e).__name__}: {' '.join(str(e).split())[:400]}"


def _sync(out: Any) -> float:
    """Read one value, so that the call is complete whatever the path."""
    t = out[0] if isinstance(out, tuple) else out
    return float(t.detach().reshape(-1)[0])


def _optimizers(name: str, lr: float, params: Any) -> tuple[Any, Any]:
    """The torch optimizer (eager, inductor) and the hlobridge one, the same
    algorithm: AdamW (weight decay 0.01) or Adam (no weight decay)."""
    import torch

    import hlobridge as hb

    if name == "adamw":
        if not hasattr(hb.optim, "AdamW"):
            raise RuntimeError("hb.optim.AdamW does not exist in this build")
        return (torch.optim.AdamW(params, lr=lr, weight_decay=0.01) if params is not None
                else None, hb.optim.AdamW(lr=lr, weight_decay=0.01))
    return (torch.optim.Adam(params, lr=lr) if params is not None else None,
            hb.optim.Adam(lr=lr))


def _build(job: dict[str, Any]) -> Callable[[], Any]:
    """The timed call for the job (built, not yet called)."""
    import torch

    import models

    torch.set_num_threads(job["threads"])
    spec = models.get(job["model"])
    torch.manual_seed(models.SEED)
    model = spec.build()
    inputs = spec.inputs()
    variant, path = job["variant"], job["path"]
    if path == "infer":
        models.calibrate_batchnorm(spec, model, inputs)
        model.eval()
        if spec.prepare is not None:
            inputs = spec.prepare(model, inputs)
        m: Any = model
        if variant != "eager":
            backend = "hlobridge" if variant == "hlobridge" else "inductor"
            if job.get("own_code"):
                # A code object of its own (Dynamo keys its cache by code
                # object, and a second model of the same class passes the
                # first one's guards): env_ab.py builds one call per setting
                # and each must compile under its own.
                ns: dict[str, Any] = {"model": model}
                exec(f"def call_{job['own_code']}(*a, **k):\n    return model(*a, **k)\n", ns)
                m = torch.compile(ns[f"call_{job['own_code']}"], backend=backend, dynamic=False)
            else:
                m = torch.compile(model, backend=backend, dynamic=False)

        def infer() -> Any:
            with torch.no_grad():
                return spec.logits(m, *inputs)

        return infer
    model.train()
    batch = (*inputs, spec.target(inputs))
    if variant == "hlobridge":
        import hlobridge as hb

        _, hb_opt = _optimizers(job["optimizer"], job["lr"], None)
        step_fn = hb.compile_train_step(model, spec.loss, hb_opt)
        return lambda: step_fn(*batch)
    opt, _ = _optimizers(job["optimizer"], job["lr"], model.parameters())
    loss = functools.partial(spec.loss, model)
    if variant == "inductor":
        loss = torch.compile(loss, dynamic=False)

    def step() -> Any:
        opt.zero_grad(set_to_none=True)
        out = loss(*batch)
        out.backward()
        opt.step()
        return out.detach()

    return step


def main() -> None:
    job = json.loads(sys.argv[1])
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def reply(**kw: Any) -> None:
        proto.write(json.dumps(kw) + "\n")
        proto.flush()

    try:
        import torch

        t0 = time.perf_counter()
        fn = _build(job)
        build_s = time.perf_counter() - t0
        mem_build = _mem()
        firsts: list[float] = []
        t0 = time.perf_counter()
        out = fn()
        firsts.append(_sync(out))
        first_s = time.perf_counter() - t0
        if job.get("save") and job["path"] == "infer":
            torch.save(out.detach().reshape(-1)[:65536].clone(), job["save"])
        out = fn()
        firsts.append(_sync(out))
    except Exception as e:  # noqa: BLE001 - the parent records the named error
        reply(error=_error(e), **_mem())
        return
    reply(ready=True, build_s=build_s, first_s=first_s, firsts=firsts,
          rss_build_mib=mem_build["rss_mib"], **_mem())
    for line in sys.stdin:
        cmd = json.loads(line)
        c = cmd["cmd"]
        if c == "run":
            t0 = time.perf_counter()
            for _ in range(cmd["n"]):
                _sync(fn())
            reply(s=time.perf_counter() - t0)
        elif c == "reset_peak":
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")
                reply(ok=True, **_mem())
            except OSError as e:
                reply(ok=False, error=str(e), **_mem())
        elif c == "mem":
            reply(**_mem())
        elif c == "quit":
            break


if __name__ == "__main__":
    main()
