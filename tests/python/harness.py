"""Round-trip checks of ``hlobridge fmt`` against MLIR (shared by the tests).

For one module FILE that MLIR parses:

(a) ``hlobridge fmt FILE`` and ``hlobridge fmt FILE --generic`` exit 0;
(b) lossless: canonical(FILE) == canonical(pretty) == canonical(generic),
    where canonical = ``mlir_canon.canonical_generic(..., debug_info=True)``;
(c) fixpoint: fmt(pretty) == pretty and fmt --generic(generic) == generic,
    byte for byte.

``check_file`` runs in worker processes (each owns an MLIR context); the
result is a plain dict so it pickles.
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests" / "tools"))

import mlir_canon  # noqa: E402

BIN_TIMEOUT_S = float(os.environ.get("HLOBRIDGE_BIN_TIMEOUT", "120"))


def find_binary() -> Path | None:
    """``$HLOBRIDGE_BIN``, else ``.venv/bin/hlobridge``, else ``target/release/hlobridge``."""
    env = os.environ.get("HLOBRIDGE_BIN")
    if env:
        return Path(env).resolve()
    for cand in (REPO_ROOT / ".venv" / "bin" / "hlobridge", REPO_ROOT / "target" / "release" / "hlobridge"):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    return None


def binary_cmd(binary: Path) -> list[str]:
    # Allow a Python stand-in (tests/tools/fake_hlobridge.py) to run without +x.
    if str(binary).endswith(".py"):
        return [sys.executable, str(binary)]
    return [str(binary)]


def binary_identity(binary: Path) -> str:
    st = binary.stat()
    return f"{binary}:{st.st_size}:{st.st_mtime_ns}"


def run_fmt(cmd: list[str], path: Path, generic: bool) -> tuple[int, str, str]:
    argv = [*cmd, "fmt", str(path)] + (["--generic"] if generic else [])
    try:
        p = subprocess.run(argv, capture_output=True, timeout=BIN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, "", f"timeout after {BIN_TIMEOUT_S}s: {' '.join(argv)}"
    out = p.stdout.decode("utf-8", errors="replace")
    err = p.stderr.decode("utf-8", errors="replace")
    return p.returncode, out, err


def short_diff(a: str, b: str, a_name: str, b_name: str, max_lines: int = 40, width: int = 240) -> str:
    """First differing line + a short unified diff (lines clipped to ``width``)."""
    al, bl = a.splitlines(), b.splitlines()
    first = next((i for i, (x, y) in enumerate(zip(al, bl)) if x != y), min(len(al), len(bl)))
    clip = lambda s: s if len(s) <= width else s[: width - 3] + "..."  # noqa: E731
    la = al[first] if first < len(al) else None
    lb = bl[first] if first < len(bl) else None
    col = 0
    if la is not None and lb is not None:
        col = next((i for i, (x, y) in enumerate(zip(la, lb)) if x != y), min(len(la), len(lb)))
    head = f"first difference at line {first + 1}, column {col + 1}:\n"

    def window(s):  # the differing region of a long line
        if s is None:
            return "<EOF>"
        if len(s) <= width:
            return s
        lo = max(0, col - width // 3)
        return ("..." if lo else "") + s[lo: lo + width] + ("..." if lo + width < len(s) else "")

    head += f"  {a_name}: {window(la)}\n"
    head += f"  {b_name}: {window(lb)}\n"
    diff = list(difflib.unified_diff(al, bl, a_name, b_name, n=1, lineterm=""))
    body = [clip(x) for x in diff[:max_lines]]
    if len(diff) > max_lines:
        body.append(f"... ({len(diff) - max_lines} more diff lines)")
    return head + "\n".join(body)


def _canon_or_error(text: str) -> tuple[str | None, str]:
    try:
        return mlir_canon.canonical_generic(text, debug_info=True), ""
    except Exception as e:  # MLIRError
        return None, "\n".join(str(e).splitlines()[:6])


def check_file(path: str, binary: str) -> dict:
    """Run (a)-(c) on one file; returns {"path", "failures": [str, ...], ...}."""
    cmd = binary_cmd(Path(binary))
    path_p = Path(path)
    fails: list[str] = []
    res = {"path": path, "failures": fails}
    text = path_p.read_text()
    try:
        canon_orig = mlir_canon.cached_canonical(text, debug_info=True)
    except Exception as e:  # noqa: BLE001
        res["mlir_refused"] = str(e)[:2000]
        return res

    rc_p, pretty, err_p = run_fmt(cmd, path_p, generic=False)
    rc_g, generic, err_g = run_fmt(cmd, path_p, generic=True)
    if rc_p != 0:
        fails.append(f"(a) `fmt` exited {rc_p}: {err_p.strip()[-1500:]}")
    if rc_g != 0:
        fails.append(f"(a) `fmt --generic` exited {rc_g}: {err_g.strip()[-1500:]}")

    with tempfile.TemporaryDirectory(prefix="hlobridge-rt-") as td:
        for kind, rc, out, generic_flag in (("pretty", rc_p, pretty, False), ("generic", rc_g, generic, True)):
            if rc != 0:
                continue
            # (b) lossless
            if out == text:
                canon = canon_orig
            else:
                canon, err = _canon_or_error(out)
                if canon is None:
                    fails.append(f"(b) MLIR refuses our {kind} output: {err}")
            if canon is not None and canon != canon_orig:
                fails.append(f"(b) {kind} output is not lossless (MLIR canonical generic forms differ)\n"
                             + short_diff(canon_orig, canon, "canonical(original)", f"canonical({kind})"))
            # (c) fixpoint
            tmp = Path(td) / f"{kind}.mlir"
            tmp.write_text(out)
            rc2, out2, err2 = run_fmt(cmd, tmp, generic=generic_flag)
            if rc2 != 0:
                fails.append(f"(c) `fmt{' --generic' if generic_flag else ''}` of our own {kind} output "
                             f"exited {rc2}: {err2.strip()[-1500:]}")
            elif out2 != out:
                fails.append(f"(c) {kind} output is not a fixpoint: fmt(fmt(x)) != fmt(x)\n"
                             + short_diff(out, out2, "fmt(x)", "fmt(fmt(x))"))
    return res


def check_refused_file(path: str, binary: str) -> dict:
    """For a module MLIR refuses: hlobridge must either reject it, or print
    text that MLIR parses (never turn bad input into different bad output).
    For refusals caused only by dialects jaxlib does not register (quant),
    report whether hlobridge parses it and is a fixpoint."""
    cmd = binary_cmd(Path(binary))
    rc, out, err = run_fmt(cmd, Path(path), generic=False)
    res = {"path": path, "rc": rc, "stderr": err.strip()[-1500:], "failures": []}
    if rc == 0:
        ok, msg = mlir_canon.mlir_parse_ok(out)
        res["output_mlir_ok"] = ok
        with tempfile.TemporaryDirectory(prefix="hlobridge-rf-") as td:
            tmp = Path(td) / "pretty.mlir"
            tmp.write_text(out)
            rc2, out2, err2 = run_fmt(cmd, tmp, generic=False)
            if rc2 != 0:
                res["failures"].append(f"(c) fmt of own output exited {rc2}: {err2.strip()[-800:]}")
            elif out2 != out:
                res["failures"].append("(c) not a fixpoint\n" + short_diff(out, out2, "fmt(x)", "fmt(fmt(x))"))
    return res


def format_failures(results: list[dict], limit: int = 20) -> str:
    bad = [r for r in results if r["failures"]]
    lines = [f"{len(bad)} of {len(results)} files fail:"]
    for r in bad[:limit]:
        lines.append(f"--- {mlir_canon.display_name(Path(r['path']))}")
        for f in r["failures"]:
            lines.append("    " + f.replace("\n", "\n    "))
    if len(bad) > limit:
        lines.append(f"... and {len(bad) - limit} more: "
                     + ", ".join(mlir_canon.display_name(Path(r['path'])) for r in bad[limit:limit + 50]))
    return "\n".join(lines)


class Checker:
    """Session-wide memo of check results, filled in parallel on demand."""

    def __init__(self, binary: Path, workers: int | None = None):
        self.binary = binary
        self.workers = workers or int(os.environ.get("HLOBRIDGE_TEST_WORKERS", min(2, len(os.sched_getaffinity(0)))))
        self._results: dict[str, dict] = {}
        self._pool = None

    def pool(self):
        if self._pool is None:
            self._pool = mlir_canon.worker_pool(self.workers)
        return self._pool

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def results(self, paths, fn=check_file) -> dict[str, dict]:
        key = fn.__name__
        todo = [str(p) for p in paths if (key, str(p)) not in self._results]
        if todo:
            # Big files first so the two workers finish together.
            todo.sort(key=lambda p: -Path(p).stat().st_size)
            futs = {self.pool().submit(fn, p, str(self.binary)): p for p in todo}
            for fut, p in futs.items():
                try:
                    self._results[(key, p)] = fut.result()
                except Exception as e:  # worker crashed (e.g. MLIR abort)
                    self._results[(key, p)] = {"path": p, "failures": [f"harness error: {type(e).__name__}: {e}"]}
        return {str(p): self._results[(key, str(p))] for p in paths}
