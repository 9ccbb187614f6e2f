#!/usr/bin/env python3
"""The op sweep (``make sweep``): every entry of torch's OpInfo database
(``op_db``, variants included) x every dtype it supports on CPU among
:data:`DTYPES`, each sample run through ``torch.compile(backend=...,
fullgraph=True, dynamic=False)`` and compared with eager torch, forward
(``fwd``) and, for ops and dtypes with a backward, with autograd on
(``bwd``: outputs and the gradients of a random cotangent). The comparison
and the statuses are ``scripts/op_sweep_harness.py``'s; the expected-failure
file and its check ``scripts/op_sweep_expect.py``'s; the report
(``docs/op_numerics.md``) ``scripts/op_sweep_report.py``'s.

Samples: the first ``--samples`` of ``op.sample_inputs`` (``make_tensor``
under a seed made from op, variant and dtype, so every run, and the subset
``tests/python/test_op_sweep_subset.py``, sees the same inputs).

Sharded and resumable: ``--shard i/n`` takes the ops whose index in op_db is
``i`` mod ``n``; every sample's row is appended to
``<out-dir>/<backend>-<i>of<n>.jsonl`` as soon as it is done, and a restart
skips the rows already there. A watchdog process runs the work in a child
process: a sample that runs past ``--timeout-s`` (a hang in native code that
no signal reaches) or kills the process is recorded as ``timeout`` /
``crash`` and the child restarts after it. The child also restarts every
``--recycle`` cases, which bounds its memory.

    pip install expecttest                          # torch's OpInfo module needs it
    nice -n 19 .venv/bin/python scripts/op_sweep.py --shard 0/8            # one shard, all dtypes
    .venv/bin/python scripts/op_sweep.py --ops sum,cumsum --dtypes float32,int32 --out-dir /tmp/s
    .venv/bin/python scripts/op_sweep.py --report-only --check           # report + expectations
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("PJRT_DEVICE", "CPU")

import op_sweep_expect as expect  # noqa: E402
from op_sweep_harness import FAILURES, Outcome, first_line, run_sample  # noqa: E402,F401

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "op_numerics"

DTYPES = ("float32", "float64", "bfloat16", "float16", "int8", "int16", "int32", "int64",
          "uint8", "bool", "complex64")

_RANDOM = ("dropout", "rand", "bernoulli", "normal", "multinomial", "uniform", "exponential",
           "geometric", "cauchy", "log_normal", "empty", "poisson")
"""Ops whose results are random or uninitialized: not comparable (the
sweep's report counts them as not swept)."""


def comparable(name: str) -> bool:
    return not any(r in name for r in _RANDOM)


def load_op_db() -> list[Any]:
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


def case_seed(op: Any, dtype: str) -> int:
    return zlib.crc32(f"{op.name}.{op.variant_test_name}.{dtype}".encode())


def has_backward(op: Any, dtype: Any) -> bool:
    if not op.supports_autograd or not (dtype.is_floating_point or dtype.is_complex):
        return False
    try:
        return dtype in op.supported_backward_dtypes("cpu")
    except Exception:  # noqa: BLE001
        return True


def samples_of(op: Any, dtype: Any, n: int) -> list[Any]:
    """The first ``n`` OpInfo samples of ``op`` in ``dtype`` (seeded)."""
    import warnings

    import torch

    torch.manual_seed(case_seed(op, str(dtype).replace("torch.", "")))
    picked: list[Any] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in op.sample_inputs("cpu", dtype, requires_grad=has_backward(op, dtype)):
            picked.append(s)
            if len(picked) >= n:
                break
    return picked


def run_op_sample(op: Any, s: Any, k: int, direction: str, backend: str) -> Outcome:
    return run_sample(op.op, (s.input, *s.args), dict(s.kwargs), grad=direction == "bwd",
                      seed=k, backend=backend)


def describe(s: Any) -> str:
    import torch
    import torch.utils._pytree as pytree

    def d(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return f"T{list(v.shape)}"
        return v
    try:
        return str(pytree.tree_map(d, (s.input, s.args, s.kwargs)))[:160]
    except Exception:  # noqa: BLE001
        return "?"


SUBSET_CLASSES = (("bfloat16", "float16", "float64"), ("int32", "int64", "int8", "int16", "uint8"),
                  ("bool",), ("complex64",))
"""The dtype classes of the ``make test`` subset besides float32 (module
docs of ``tests/python/test_op_sweep_subset.py``)."""


def subset_dtypes(idx: int, supported: set[str]) -> list[tuple[str, tuple[str, ...]]]:
    """The subset's (dtype, directions) for the op at op_db index ``idx``:
    float32 forward (backward too for every third op), and one more dtype
    class, rotating with ``idx`` over :data:`SUBSET_CLASSES` (the next
    class the op supports), the dtype rotating within the class."""
    out: list[tuple[str, tuple[str, ...]]] = []
    if "float32" in supported:
        out.append(("float32", ("fwd", "bwd") if idx % 3 == 0 else ("fwd",)))
    for j in range(len(SUBSET_CLASSES)):
        cls = SUBSET_CLASSES[(idx + j) % len(SUBSET_CLASSES)]
        have = [d for d in cls if d in supported]
        if have:
            out.append((have[(idx // len(SUBSET_CLASSES)) % len(have)], ("fwd",)))
            break
    if not out:
        first = [d for d in DTYPES if d in supported]
        out = [(first[0], ("fwd",))] if first else []
    return out


def cases(ops: list[Any], dtypes: list[str], shard: tuple[int, int], wanted: set[str],
          subset: bool = False) -> Iterator[tuple[Any, str, tuple[str, ...]]]:
    """(op, dtype, directions) of the shard (the directions the op and dtype
    have are kept: see :func:`has_backward`)."""
    import torch

    i, n = shard
    for idx, op in enumerate(ops):
        if idx % n != i or not comparable(op.name):
            continue
        if wanted and op.name not in wanted and f"{op.name}.{op.variant_test_name}" not in wanted:
            continue
        supported = {str(d).replace("torch.", "") for d in op.supported_dtypes("cpu")}
        if subset:
            yield from ((op, dt, dirs) for dt, dirs in subset_dtypes(idx, supported))
            continue
        for dt in dtypes:
            if dt in supported:
                yield op, dt, ("fwd", "bwd")


def read_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut short by a kill
    return rows


def _row(backend: str, op: Any, dt: str, k: int, direction: str, res: Outcome, s: float,
         shapes: str = "") -> dict[str, Any]:
    return {"backend": backend, "op": op.name if not isinstance(op, tuple) else op[0],
            "variant": op.variant_test_name if not isinstance(op, tuple) else op[1],
            "dtype": dt, "dir": direction, "sample": k, "status": res.status,
            "detail": res.detail, "err": res.err, "own": res.own, "s": round(s, 2),
            "shapes": shapes}


class _Timeout(Exception):
    pass


def _alarm(_sig: int, _frame: Any) -> None:
    raise _Timeout()


def worker(args: argparse.Namespace, out: Path, cur: Path) -> int:
    """Run the shard's remaining samples; 3 after ``--recycle`` cases."""
    import torch

    import hlobridge  # noqa: F401  (the backend)

    torch.set_num_threads(args.threads)
    done = {(r["op"], r["variant"], r["dtype"], r["dir"], r["sample"]) for r in read_rows(out)}
    ops = load_op_db()
    n_cases = 0
    with out.open("a") as f:
        wanted = set(args.ops.split(",")) - {""}
        for op, dt, want in cases(ops, args.dtypes.split(","), args.shard, wanted, args.subset):
            base = (op.name, op.variant_test_name, dt)
            dirs = ["fwd"] + (["bwd"] if has_backward(op, getattr(torch, dt))
                              and not args.fwd_only and "bwd" in want else [])
            todo = [(k, d) for k in range(args.samples) for d in dirs
                    if (*base, d, k) not in done]
            if not todo:
                continue
            if n_cases >= args.recycle:
                return 3
            n_cases += 1
            t0 = time.time()
            try:
                picked = samples_of(op, getattr(torch, dt), args.samples)
            except Exception as e:  # noqa: BLE001
                r = _row(args.backend, op, dt, 0, "fwd",
                         Outcome("skip", f"samples: {first_line(e)}"), time.time() - t0)
                f.write(json.dumps(r) + "\n")
                f.flush()
                continue
            line = []
            for k, d in todo:
                if k >= len(picked):
                    continue
                cur.write_text(json.dumps({"op": op.name, "variant": op.variant_test_name,
                                           "dtype": dt, "dir": d, "sample": k,
                                           "t": time.time()}))
                signal.signal(signal.SIGALRM, _alarm)
                signal.alarm(args.timeout_s)
                t0 = time.time()
                try:
                    res = run_op_sample(op, picked[k], k, d, args.backend)
                except _Timeout:
                    res = Outcome("timeout", f"over {args.timeout_s}s")
                except Exception as e:  # noqa: BLE001
                    res = Outcome("crash", f"harness: {type(e).__name__}: {first_line(e)}")
                finally:
                    signal.alarm(0)
                f.write(json.dumps(_row(args.backend, op, dt, k, d, res, time.time() - t0,
                                        describe(picked[k]) if res.status != "pass" else ""))
                        + "\n")
                f.flush()
                line.append(f"{d}{k}:{res.status}")
            print(f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''} "
                  f"{dt}: {' '.join(line)}", flush=True)
    cur.unlink(missing_ok=True)
    return 0


def watchdog(args: argparse.Namespace, out: Path, cur: Path) -> int:
    """Run :func:`worker` in a child until the shard is done (module docs)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:], "--worker"]
    restarts = 0
    while True:
        cur.unlink(missing_ok=True)
        p = subprocess.Popen(cmd, start_new_session=True)
        killed = False
        while p.poll() is None:
            time.sleep(2)
            try:
                c = json.loads(cur.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if time.time() - c["t"] > args.timeout_s + 60:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                killed = True
        rc = p.returncode
        if rc == 0:
            return 0
        if rc == 3:
            continue
        try:
            c = json.loads(cur.read_text())
        except (OSError, json.JSONDecodeError):
            print(f"op_sweep: worker exited with {rc} outside a sample", file=sys.stderr)
            return 1
        res = (Outcome("timeout", f"hung past {args.timeout_s + 60}s (killed)") if killed
               else Outcome("crash", f"process died (exit {rc})"))
        with out.open("a") as f:
            f.write(json.dumps(_row(args.backend, (c["op"], c["variant"]), c["dtype"],
                                    c["sample"], c["dir"], res, 0.0)) + "\n")
        restarts += 1
        if restarts > 200:
            print("op_sweep: more than 200 worker restarts; stopping", file=sys.stderr)
            return 1


def all_rows(out_dir: Path, backend: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for p in sorted(out_dir.glob(f"{backend}-*.jsonl")):
        rows += read_rows(p)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="hlobridge", choices=["hlobridge", "inductor"])
    ap.add_argument("--ops", default="", help="comma-separated op names (default: all)")
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--fwd-only", action="store_true")
    ap.add_argument("--shard", default="0/1", help="i/n: ops whose op_db index is i mod n")
    ap.add_argument("--timeout-s", type=int, default=120, help="per sample")
    ap.add_argument("--recycle", type=int, default=300, help="restart the worker every N cases")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--out-dir", default=str(DEFAULT_OUT))
    ap.add_argument("--expected", default=str(expect.DEFAULT_PATH))
    ap.add_argument("--report", default=None,
                    help="the report to rewrite (default: docs/op_numerics.md, only when "
                         "--out-dir is the committed rows' folder: a scratch run's rows must "
                         "not replace the committed report; '' for none)")
    ap.add_argument("--report-only", action="store_true", help="only rewrite --report")
    ap.add_argument("--note", default="", help="a paragraph for the report (what the run covered)")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 on an unlisted failure or a stale entry (hlobridge rows)")
    ap.add_argument("--add-expected", action="store_true",
                    help="add the run's unlisted failures to --expected (then review them)")
    ap.add_argument("--refresh-expected", action="store_true",
                    help="make the --expected entries of the cases in --out-dir's rows say what "
                         "the rows say (passing samples leave, classes follow the statuses)")
    ap.add_argument("--retry-failed", action="store_true",
                    help="drop the shard's wrong/crash/timeout rows (of --ops/--dtypes) first, so they "
                         "run again (after a fix)")
    ap.add_argument("--subset", action="store_true",
                    help="the make-test subset's cases (subset_dtypes); use with --samples 1")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    i, n = (int(x) for x in args.shard.split("/"))
    args.shard = (i, n)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{args.backend}-{i}of{n}.jsonl"
    cur = out.with_suffix(".current")
    if args.worker:
        sys.exit(worker(args, out, cur))
    if args.retry_failed and not args.report_only:
        wanted = set(args.ops.split(",")) - {""}
        dts = set(args.dtypes.split(","))
        keep = [r for r in read_rows(out) if not (
            r["status"] in ("wrong", "crash", "timeout") and r["dtype"] in dts
            and (not wanted or r["op"] in wanted))]
        out.write_text("".join(json.dumps(r) + "\n" for r in keep))
    if not args.report_only:
        rc = watchdog(args, out, cur)
        if rc:
            sys.exit(rc)
    rows = all_rows(out_dir, "hlobridge")
    entries = expect.load(Path(args.expected))
    if args.refresh_expected:
        changed, removed = expect.refresh(rows, Path(args.expected))
        print(f"{changed} cases changed, {removed} removed in {args.expected}")
        entries = expect.load(Path(args.expected))
    if args.add_expected:
        print(f"{expect.merge_new(rows, Path(args.expected))} cases added/widened in "
              f"{args.expected}")
        entries = expect.load(Path(args.expected))
    if args.report is None and out_dir.resolve() == Path(DEFAULT_OUT).resolve():
        args.report = str(ROOT / "docs" / "op_numerics.md")
    if args.report:
        import op_sweep_report

        op_sweep_report.write(rows, all_rows(out_dir, "inductor"), entries, Path(args.report),
                              args.note)
    if args.check:
        problems = expect.check(rows, entries)
        for p in problems:
            print(p)
        print(f"op_sweep: {len(rows)} samples, {len(problems)} problems against {args.expected}")
        sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
