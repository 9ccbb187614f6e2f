"""The op sweep's expected-failure file (``tests/python/op_expected_failures.toml``):
loading it, checking a run against it, and writing entries for new failures.

Each ``[[fail]]`` entry names a *case*, ``op``, ``variant`` (OpInfo's
``variant_test_name``, ``""`` for none), ``dtype`` and ``direction``
(``fwd``: the outputs; ``bwd``: outputs and gradients with autograd on),
with a ``class`` (:data:`CLASSES`), a one-line ``reason`` and ``samples``,
the indices of the OpInfo samples that fail (absent: any).

A run fails (:func:`check`) when a case fails on a sample that no entry
lists, when a listed case gives a wrong number and its class is not one of
the wrong-number classes, when none of its failing samples has a status its
class covers (a case may fail in more than one way: a named error on one
sample, an unnamed one on another), and when a listed case passes on every
listed sample the run covered (the entry is stale: the file stays true both
ways).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLASSES: dict[str, tuple[str, ...]] = {
    "wrong-number": ("wrong",),
    "named-error": ("named",),
    "unsupported-dtype-xla-cpu": ("named", "crash"),
    "eager-nondeterministic": ("wrong",),
    "documented-semantic-difference": ("wrong",),
    "graph-break": ("dynamo",),
    "unnamed-error": ("crash",),
    "timeout": ("timeout",),
}
"""Each class and the sample statuses (``op_sweep_harness.STATUSES``) it
covers. ``graph-break``: Dynamo refuses the op under ``fullgraph=True`` (the
same for every backend). ``unnamed-error``: the backend fails with an error
that is not a named ``BridgeError`` (to be turned into a named one)."""

FAILURES = ("wrong", "named", "dynamo", "crash", "timeout")

DEFAULT_PATH = Path(__file__).resolve().parents[1] / "tests" / "python" / "op_expected_failures.toml"

Key = tuple[str, str, str, str]
"""``(op, variant, dtype, direction)``; dtype without the ``torch.`` prefix."""


@dataclass
class Entry:
    op: str
    variant: str
    dtype: str
    direction: str
    cls: str
    reason: str
    samples: tuple[int, ...] | None

    @property
    def key(self) -> Key:
        return (self.op, self.variant, self.dtype, self.direction)


def load(path: Path = DEFAULT_PATH) -> dict[Key, Entry]:
    if not path.exists():
        return {}
    data = tomllib.loads(path.read_text())
    out: dict[Key, Entry] = {}
    for d in data.get("fail", []):
        cls = d["class"]
        if cls not in CLASSES:
            raise ValueError(f"{path}: unknown class {cls!r} for {d['op']}")
        if d["direction"] not in ("fwd", "bwd"):
            raise ValueError(f"{path}: direction must be fwd or bwd: {d}")
        s = d.get("samples")
        e = Entry(d["op"], d.get("variant", ""), d["dtype"], d["direction"], cls,
                  d.get("reason", ""), tuple(s) if s is not None else None)
        if e.key in out:
            raise ValueError(f"{path}: duplicate entry {e.key}")
        out[e.key] = e
    return out


def row_key(r: dict[str, Any]) -> Key:
    return (r["op"], r["variant"], r["dtype"].replace("torch.", ""), r["dir"])


@dataclass
class Problem:
    key: Key
    kind: str
    """``unlisted``, ``class`` (a status its entry's class does not allow) or
    ``stale`` (listed, passes)."""
    detail: str

    def __str__(self) -> str:
        op, var, dt, d = self.key
        return f"{self.kind}: {op}{'.' + var if var else ''} {dt} {d}: {self.detail}"


def check(rows: Iterable[dict[str, Any]], entries: dict[Key, Entry]) -> list[Problem]:
    """Problems of a run's sample rows against ``entries`` (module docs)."""
    per: dict[Key, list[dict[str, Any]]] = {}
    for r in rows:
        per.setdefault(row_key(r), []).append(r)
    problems: list[Problem] = []
    for key, rs in sorted(per.items()):
        e = entries.get(key)
        failing = [r for r in rs if r["status"] in FAILURES]
        for r in failing:
            if e is None or (e.samples is not None and r["sample"] not in e.samples):
                problems.append(Problem(key, "unlisted", f"sample {r['sample']}: "
                                        f"{r['status']}: {r.get('detail', '')[:160]}"))
            elif r["status"] == "wrong" and "wrong" not in CLASSES[e.cls]:
                problems.append(Problem(key, "class", f"sample {r['sample']}: a wrong number "
                                        f"where the entry says {e.cls}"))
        listed_fail = [r for r in failing if e is not None
                       and (e.samples is None or r["sample"] in e.samples)]
        if e is not None and listed_fail and not any(r["status"] in CLASSES[e.cls]
                                                     for r in listed_fail):
            problems.append(Problem(key, "class", f"{sorted({r['status'] for r in listed_fail})} "
                                    f"where the entry says {e.cls}"))
        if e is not None and not failing:
            covered = [r for r in rs if e.samples is None or r["sample"] in e.samples]
            ran = [r for r in covered if r["status"] != "skip"]
            if ran:
                problems.append(Problem(key, "stale", f"listed as {e.cls}, passes on samples "
                                        f"{sorted(r['sample'] for r in ran)}"))
    return problems


def listed(r: dict[str, Any], entries: dict[Key, Entry]) -> bool:
    """Whether a failing sample row is covered by an entry."""
    e = entries.get(row_key(r))
    return (e is not None and (r["status"] != "wrong" or "wrong" in CLASSES[e.cls])
            and (e.samples is None or r["sample"] in e.samples))


_DEFAULT_CLASS = {"wrong": "wrong-number", "named": "named-error", "dynamo": "graph-break",
                  "crash": "unnamed-error", "timeout": "timeout"}


_ADDR = re.compile(r" at 0x[0-9a-fA-F]+")
_HEX = re.compile(r"0x[0-9a-fA-F]{6,}")
_PATH = re.compile(r"(?:/[^\s\"'/:,<>()]+)+/([^\s\"'/:,<>()]+)")


def normalize(msg: str) -> str:
    """A message with what varies between processes taken out, so that one
    cause groups as one row: object addresses (``<code object f at 0x7f..>``)
    dropped, other long hex numbers shown as ``0x?``, and absolute paths cut
    to their file name (``.../contextlib.py``)."""
    m = _ADDR.sub("", " ".join(msg.split()))
    m = _HEX.sub("0x?", m)
    return _PATH.sub(r".../\1", m)


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def merge_new(rows: Iterable[dict[str, Any]], path: Path = DEFAULT_PATH) -> int:
    """Add entries for the run's unlisted failing cases to ``path`` (class
    from the worst status, reason from its detail) and widen ``samples`` of
    entries whose case now fails on more samples; the number of changed
    cases. Classes other than the default ones are set by hand, with
    evidence."""
    entries = load(path)
    per: dict[Key, list[dict[str, Any]]] = {}
    for r in rows:
        if r["status"] in FAILURES:
            per.setdefault(row_key(r), []).append(r)
    changed = 0
    for key, rs in per.items():
        e = entries.get(key)
        samples = tuple(sorted({r["sample"] for r in rs}))
        if e is None:
            worst = min(rs, key=lambda r: FAILURES.index(r["status"]))
            entries[key] = Entry(*key, _DEFAULT_CLASS[worst["status"]],
                                 normalize(worst.get("detail", ""))[:160], samples)
            changed += 1
        elif e.samples is not None and not set(samples) <= set(e.samples):
            e.samples = tuple(sorted(set(e.samples) | set(samples)))
            changed += 1
    write(entries, path)
    return changed


def refresh(rows: Iterable[dict[str, Any]], path: Path = DEFAULT_PATH) -> tuple[int, int]:
    """Make the entries of the cases ``rows`` ran say what the rows say (after
    a fix): samples that now pass leave the entry (an entry left with no
    samples is removed), failing ones join it, and an entry whose class no
    longer covers any of its failing statuses takes the default class and the
    detail of the worst one (a hand-set class that still covers them stays).
    Samples the rows did not run keep their entry (``--subset`` runs sample
    0 only). (changed, removed) cases."""
    entries = load(path)
    per: dict[Key, list[dict[str, Any]]] = {}
    for r in rows:
        if r["status"] != "skip":
            per.setdefault(row_key(r), []).append(r)
    changed = removed = 0
    for key, rs in per.items():
        e = entries.get(key)
        failing = [r for r in rs if r["status"] in FAILURES]
        ran = {r["sample"] for r in rs}
        if e is None:
            continue  # new failures: merge_new (--add-expected), reviewed by hand
        old = e.samples
        keep = set(old) - ran if old is not None else set()
        samples = tuple(sorted(keep | {r["sample"] for r in failing}))
        if not samples and (old is not None or not failing):
            del entries[key]
            removed += 1
            continue
        statuses = {r["status"] for r in failing}
        cls = e.cls
        if failing and not statuses & set(CLASSES[e.cls]):
            worst = min(failing, key=lambda r: FAILURES.index(r["status"]))
            cls = _DEFAULT_CLASS[worst["status"]]
            e.reason = normalize(worst.get("detail", ""))[:160]
        if cls != e.cls or (old is not None and samples != old):
            e.cls = cls
            e.samples = samples if old is not None else None
            changed += 1
    write(entries, path)
    return changed, removed


_HEADER = """\
# Expected failures of the op sweep (scripts/op_sweep.py, `make sweep`) and of its
# `make test` subset (tests/python/test_op_sweep_subset.py). Data, read by
# scripts/op_sweep_expect.py: one [[fail]] per case (op, OpInfo variant, dtype,
# direction fwd|bwd) with its class, a one-line reason and the failing OpInfo
# sample indices. A run fails on an unlisted failure and on a listed case that
# passes. Classes: wrong-number (to be fixed, made a named error or reclassified
# with evidence), named-error, unsupported-dtype-xla-cpu, eager-nondeterministic,
# documented-semantic-difference, graph-break (Dynamo refuses it for every
# backend), unnamed-error (to become a named error), timeout.
"""


def write(entries: dict[Key, Entry], path: Path = DEFAULT_PATH) -> None:
    out = [_HEADER]
    for key in sorted(entries):
        e = entries[key]
        out.append("[[fail]]")
        out.append(f"op = {_q(e.op)}")
        out.append(f"variant = {_q(e.variant)}")
        out.append(f"dtype = {_q(e.dtype)}")
        out.append(f"direction = {_q(e.direction)}")
        out.append(f"class = {_q(e.cls)}")
        out.append(f"reason = {_q(e.reason)}")
        if e.samples is not None:
            out.append(f"samples = [{', '.join(map(str, e.samples))}]")
        out.append("")
    path.write_text("\n".join(out))
