"""The op sweep's report: rewrites the generated section of
``docs/op_numerics.md`` (from ``## Sweep results`` on; the text above it is
kept) from the sweep's sample rows, ours and inductor's."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import op_sweep_expect as expect
from op_sweep_expect import normalize

MARK = "## Sweep results"
COLS = ("pass", "named", "dynamo", "crash", "wrong", "timeout", "skip")
HEAD = {"pass": "pass", "named": "named error", "dynamo": "graph break", "crash":
        "unnamed error", "wrong": "wrong number", "timeout": "timeout", "skip": "skip"}


def _name(r: dict[str, Any]) -> str:
    return r["op"] + ("." + r["variant"] if r["variant"] else "")


def _totals() -> dict[str, int] | None:
    """Op x dtype cases of op_db per dtype (None without expecttest)."""
    try:
        import torch

        import op_sweep
        ops = op_sweep.load_op_db()
    except (ImportError, SystemExit):
        return None
    out: Counter[str] = Counter()
    for op in ops:
        if not op_sweep.comparable(op.name):
            continue
        sup = op.supported_dtypes("cpu")
        for dt in op_sweep.DTYPES:
            if getattr(torch, dt) in sup:
                out[dt] += 1
    return dict(out)


def _share(c: Counter[str]) -> str:
    ran = sum(c[k] for k in COLS if k != "skip")
    return f"{100 * (c['pass'] + c['named']) / ran:.1f}%" if ran else "-"


def _table(rows: list[dict[str, Any]], ind: list[dict[str, Any]], dt: str,
           entries: dict[expect.Key, expect.Entry], total: int | None) -> list[str]:
    out = [f"### {dt}", "",
           "| backend | dir | op cases | samples | " + " | ".join(HEAD[k] for k in COLS)
           + " | listed | pass or named |",
           "| --- | --- | --- | --- | " + " | ".join("---" for _ in COLS) + " | --- | --- |"]
    for backend, rs in (("hlobridge", rows), ("inductor", ind)):
        for d in ("fwd", "bwd"):
            sel = [r for r in rs if r["dtype"] == dt and r["dir"] == d]
            if not sel:
                continue
            c = Counter(r["status"] for r in sel)
            n_cases = len({(r["op"], r["variant"]) for r in sel})
            listed = (sum(1 for r in sel if r["status"] in expect.FAILURES
                          and expect.listed(r, entries)) if backend == "hlobridge" else "-")
            cases = f"{n_cases}" + (f" of {total}" if total and d == "fwd" else "")
            out.append(f"| {backend} | {d} | {cases} | {len(sel)} | "
                       + " | ".join(str(c[k]) for k in COLS) + f" | {listed} | {_share(c)} |")
    return out + [""]


def _same_cases(rows: list[dict[str, Any]], ind: list[dict[str, Any]]) -> list[str]:
    key = lambda r: (r["op"], r["variant"], r["dtype"], r["dir"], r["sample"])  # noqa: E731
    a = {key(r): r["status"] for r in rows}
    b = {key(r): r["status"] for r in ind}
    both = sorted(set(a) & set(b))
    if not both:
        return ["No sample was run by both backends yet.", ""]
    out = ["On the samples both backends ran (same inputs, same machine, same checks):", "",
           "| dtype | dir | samples | hlobridge pass | hlobridge pass or named | inductor pass "
           "| inductor pass or named |", "| --- | --- | --- | --- | --- | --- | --- |"]
    groups: dict[tuple[str, str], list[Any]] = {}
    for k in both:
        groups.setdefault((k[2], k[3]), []).append(k)
    for (dt, d), ks in sorted(groups.items()):
        ca, cb = Counter(a[k] for k in ks), Counter(b[k] for k in ks)
        ran_a = sum(ca[s] for s in COLS if s != "skip")
        ran_b = sum(cb[s] for s in COLS if s != "skip")
        pct = lambda n, m: f"{100 * n / m:.1f}%" if m else "-"  # noqa: E731
        out.append(f"| {dt} | {d} | {len(ks)} | {pct(ca['pass'], ran_a)} | {_share(ca)} | "
                   f"{pct(cb['pass'], ran_b)} | {_share(cb)} |")
    return out + [""]


def _failures(rows: list[dict[str, Any]], status: str, entries: dict[expect.Key, expect.Entry],
              limit: int = 400) -> list[str]:
    sel = [r for r in rows if r["status"] == status]
    if not sel:
        return ["None.", ""]
    out = ["| op | dtype | dir | sample | listed as | detail |", "| --- | --- | --- | --- | --- | --- |"]
    for r in sorted(sel, key=lambda r: (_name(r), r["dtype"], r["dir"], r["sample"]))[:limit]:
        e = entries.get(expect.row_key(r))
        d = normalize(r.get("detail", "")).replace("|", "/")[:150]
        out.append(f"| `{_name(r)}` | {r['dtype']} | {r['dir']} | {r['sample']} | "
                   f"{e.cls if e else '-'} | {d} |")
    if len(sel) > limit:
        out.append(f"| ... | | | | | {len(sel) - limit} more in the jsonl |")
    return out + [""]


def _grouped(rows: list[dict[str, Any]], status: str, limit: int = 40) -> list[str]:
    msgs: dict[str, set[str]] = {}
    for r in rows:
        if r["status"] == status:
            m = normalize(r.get("detail", ""))[:110].replace("|", "/")
            msgs.setdefault(m, set()).add(_name(r))
    if not msgs:
        return ["None.", ""]
    out = ["| ops | error | examples |", "| --- | --- | --- |"]
    for m, ops in sorted(msgs.items(), key=lambda x: -len(x[1]))[:limit]:
        out.append(f"| {len(ops)} | {m} | {', '.join(sorted(ops)[:4])} |")
    return out + [""]


def _coverage(rows: list[dict[str, Any]], name: str) -> str:
    if not rows:
        return f"{name}: nothing swept yet."
    per: dict[str, set[str]] = {}
    for r in rows:
        per.setdefault(r["dtype"], set()).add(r["dir"])
    return (f"{name}: {len(rows)} samples, "
            + ", ".join(f"{d} ({'+'.join(sorted(v))})" for d, v in sorted(per.items())) + ".")


def write(rows: list[dict[str, Any]], ind: list[dict[str, Any]],
          entries: dict[expect.Key, expect.Entry], path: Path, note: str = "") -> None:
    totals = _totals()
    dts = [d for d in ("float32", "float64", "bfloat16", "float16", "int8", "int16", "int32",
                       "int64", "uint8", "bool", "complex64")
           if any(r["dtype"] == d for r in rows + ind)]
    lines = [MARK, "",
             f"Generated by `scripts/op_sweep.py --report-only` on {time.strftime('%Y-%m-%d')} "
             f"from the sample rows in `docs/op_numerics/*.jsonl` ({len(rows)} hlobridge, "
             f"{len(ind)} inductor). *op cases*: op_db entries x this dtype swept (of all "
             "that support it on CPU, random ops excluded); counts are samples; *listed*: "
             "failing samples covered by `tests/python/op_expected_failures.toml`; *pass or "
             "named*: share of the samples that ran (skips excluded).", "",
             "Covered: " + _coverage(rows, "hlobridge") + " " + _coverage(ind, "inductor"), ""]
    if note:
        lines += [note, ""]
    for dt in dts:
        lines += _table(rows, ind, dt, entries, (totals or {}).get(dt))
    lines += ["### hlobridge and inductor on the same samples", ""] + _same_cases(rows, ind)
    lines += ["### Wrong numbers (hlobridge)", ""] + _failures(rows, "wrong", entries)
    lines += ["### Wrong numbers (inductor)", ""] + _failures(ind, "wrong", {}, 100)
    lines += ["### Unnamed errors (hlobridge), by message", ""] + _grouped(rows, "crash")
    lines += ["### Graph breaks under fullgraph=True (hlobridge), by message", ""] + _grouped(
        rows, "dynamo", 20)
    lines += ["### Named errors (hlobridge), by message", ""] + _grouped(rows, "named")
    head = path.read_text().split(MARK)[0] if path.exists() else "# Op numerics\n\n"
    path.write_text(head.rstrip("\n") + "\n\n" + "\n".join(lines))
