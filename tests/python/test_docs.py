"""The docs are tested: every runnable Python and shell snippet of README.md
and docs/*.md runs, and the results they quote are checked.

The rules (which blocks run, the ``<!-- doc-test: skip REASON -->``,
``<!-- doc-test: setup ... -->`` and ``<!-- doc-test: output -->`` markers,
``# -> value`` checks) are in :mod:`doc_snippets`; docs/testing.md points
there. One test per Markdown file for its Python blocks (one process, one
namespace, in order) and one per shell block; skipped blocks are reported
as skips with their reason. Each file runs in a fresh temporary directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import doc_snippets as ds

TIMEOUT_S = 300

_RUNNER = r'''
import json, re, sys, traceback, io, contextlib

def _pattern(text):
    parts = re.split(r"\.\.\.|\u2026", text)
    return re.compile(".*?".join(re.escape(p) for p in parts), re.S)

def _doc_check(code, value, want):
    got = repr(value)
    if not _pattern(want).fullmatch(got):
        raise AssertionError(f"{code}: the doc says -> {want}, but it is {got}")
    return value

class _Tee(io.TextIOBase):
    def __init__(self, a, b): self.a, self.b = a, b
    def write(self, s): self.a.write(s); self.b.write(s); return len(s)
    def flush(self): self.a.flush()

blocks = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__", "_doc_check": _doc_check}
for b in blocks:
    buf = io.StringIO()
    print(f"@@doc-block {b['where']}", flush=True)
    try:
        with contextlib.redirect_stdout(_Tee(sys.stdout, buf)):
            if b["setup"]:
                exec(compile(b["setup"], b["where"] + " (doc-test setup)", "exec"), ns)
            exec(compile(b["source"], b["where"], "exec"), ns)
    except BaseException:
        print(f"@@doc-failed {b['where']}", flush=True)
        traceback.print_exc()
        sys.exit(1)
    sys.stdout.flush()
    with open(sys.argv[2], "a") as f:
        f.write(json.dumps({"where": b["where"], "stdout": buf.getvalue()}) + "\n")
'''


def _env() -> dict[str, str]:
    """The snippets' environment: the CPU plugin, and ``hlobridge`` (the
    binary the harness tests: ``$HLOBRIDGE_BIN``, ``.venv/bin``, else
    ``target/release``) and the venv's Python first on ``PATH``."""
    import harness

    dirs = [str(Path(sys.executable).parent)]
    b = harness.find_binary()
    if b is not None and b.name == "hlobridge":
        dirs.insert(0, str(b.parent))
    return dict(os.environ, PJRT_DEVICE="CPU", PYTHONWARNINGS="ignore",
                PATH=os.pathsep.join([*dirs, os.environ.get("PATH", "")]))


def _collect() -> tuple[list[object], list[object]]:
    py, sh = [], []
    for path in ds.doc_files():
        blocks = ds.parse(path)
        rel = str(path.relative_to(ds.ROOT))
        runnable = [b for b in blocks if b.kind == "python" and not b.skip]
        skipped = [b for b in blocks if b.kind is not None and b.skip]
        if runnable:
            py.append(pytest.param(runnable, id=rel))
        for b in blocks:
            if b.kind == "shell" and not b.skip:
                sh.append(pytest.param(b, id=b.where))
        for b in skipped:
            sh.append(pytest.param(b, id=b.where,
                                   marks=pytest.mark.skip(reason=f"{b.where}: {b.skip}")))
    return py, sh


_PY, _SH = _collect()


def _check_output(b: ds.Block, got: str) -> None:
    if b.expected_output is not None:
        miss = ds.output_matches(b.expected_output, got)
        assert miss is None, f"{b.where}: the doc quotes the output line {miss!r}; the block printed:\n{got}"


@pytest.mark.parametrize("blocks", _PY)
def test_python_snippets_of_a_doc_run(blocks: list[ds.Block], tmp_path: Path) -> None:
    spec = [{"where": b.where, "setup": b.setup, "source": ds.python_source(b)} for b in blocks]
    (tmp_path / "_blocks.json").write_text(json.dumps(spec))
    (tmp_path / "_runner.py").write_text(_RUNNER)
    outputs = tmp_path / "_outputs.jsonl"
    try:
        r = subprocess.run([sys.executable, "_runner.py", "_blocks.json", str(outputs)], cwd=tmp_path,
                           env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{blocks[0].path.name}: the snippets did not finish in {TIMEOUT_S} s: {e.stdout!r}")
    failed = [ln.split(" ", 1)[1] for ln in r.stdout.splitlines() if ln.startswith("@@doc-failed ")]
    assert r.returncode == 0, (f"snippet {failed[0] if failed else '?'} failed:\n"
                               f"{r.stdout[-4000:]}\n{r.stderr[-6000:]}")
    printed = {}
    for ln in outputs.read_text().splitlines():
        rec = json.loads(ln)
        printed[rec["where"]] = rec["stdout"]
    for b in blocks:
        _check_output(b, printed[b.where])


def _shell_script(b: ds.Block) -> str:
    lines = b.code.splitlines()
    if b.lang == "console":
        lines = [ln[2:] for ln in lines if ln.startswith("$ ")]
    return b.setup + "\n".join(lines) + "\n"


@pytest.mark.parametrize("block", _SH)
def test_shell_snippet_runs(block: ds.Block, tmp_path: Path) -> None:
    (tmp_path / "_snippet.sh").write_text(_shell_script(block))
    try:
        r = subprocess.run(["bash", "-euo", "pipefail", "_snippet.sh"], cwd=tmp_path, env=_env(),
                           capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.where}: did not finish in {TIMEOUT_S} s")
    assert r.returncode == 0, f"{block.where} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    _check_output(block, r.stdout)


def test_markers_are_well_formed_and_skips_are_rare() -> None:
    """Every doc parses (a skip without a reason or an unknown marker is an
    error), and most runnable blocks run."""
    total = skipped = 0
    for path in ds.doc_files():
        for b in ds.parse(path):
            if b.kind is not None:
                total += 1
                skipped += b.skip is not None
    assert total > 0
    assert skipped <= total // 2, f"{skipped} of {total} runnable blocks are skipped"


def test_extractor_rules(tmp_path: Path) -> None:
    """The extractor on a small document: markers, setup, output, arrows."""
    import textwrap

    md = textwrap.dedent('''\
        <!-- doc-test: setup
        x = 2
        -->
        ```python
        x + 1   # -> 3
        print("hi", x)
        ```
        <!-- doc-test: output -->
        ```text
        hi ...
        ```
        <!-- doc-test: skip needs a TPU -->
        ```bash
        tpu-thing
        ```
        ```toml
        a = 1
        ```
        ''')
    p = tmp_path / "selftest.md"
    p.write_text(md)
    blocks = ds.parse(p)
    py, out, sh, toml = blocks
    assert py.kind == "python" and py.setup == "x = 2\n" and py.expected_output == "hi ...\n"
    assert "_doc_check('x + 1', (x + 1), '3')" in ds.python_source(py)
    assert sh.skip == "needs a TPU" and toml.kind is None and out.kind is None
    assert ds.matches("{'output': tensor(...)}", "{'output': tensor([[1., 2.]])}")
    assert ds.output_matches("hi ...", "x\nhi 2\n") is None
    assert ds.output_matches("bye", "hi 2\n") == "bye"
