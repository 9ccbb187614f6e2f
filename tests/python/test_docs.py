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


def _run_python(blocks: list[ds.Block], tmp_path: Path) -> str | None:
    """Runs a file's Python blocks (see the module docs); ``None`` when
    they ran and printed what the docs quote, else why not."""
    spec = [{"where": b.where, "setup": b.setup, "source": ds.python_source(b)} for b in blocks]
    (tmp_path / "_blocks.json").write_text(json.dumps(spec))
    (tmp_path / "_runner.py").write_text(_RUNNER)
    outputs = tmp_path / "_outputs.jsonl"
    try:
        r = subprocess.run([sys.executable, "_runner.py", "_blocks.json", str(outputs)], cwd=tmp_path,
                           env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        return f"{blocks[0].path.name}: the snippets did not finish in {TIMEOUT_S} s: {e.stdout!r}"
    failed = [ln.split(" ", 1)[1] for ln in r.stdout.splitlines() if ln.startswith("@@doc-failed ")]
    if r.returncode != 0:
        return (f"snippet {failed[0] if failed else '?'} failed:\n"
                f"{r.stdout[-4000:]}\n{r.stderr[-6000:]}")
    printed = {}
    for ln in outputs.read_text().splitlines():
        rec = json.loads(ln)
        printed[rec["where"]] = rec["stdout"]
    for b in blocks:
        if b.expected_output is not None:
            miss = ds.output_matches(b.expected_output, printed[b.where])
            if miss is not None:
                return (f"{b.where}: the doc quotes the output line {miss!r}; the block printed:\n"
                        f"{printed[b.where]}")
    return None


@pytest.mark.parametrize("blocks", _PY)
def test_python_snippets_of_a_doc_run(blocks: list[ds.Block], tmp_path: Path) -> None:
    why = _run_python(blocks, tmp_path)
    assert why is None, why


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
    if block.expected_output is not None:
        miss = ds.output_matches(block.expected_output, r.stdout)
        assert miss is None, f"{block.where}: the doc quotes the output line {miss!r}; it printed:\n{r.stdout}"


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


def test_wrong_quoted_results_fail(tmp_path: Path) -> None:
    """A ``# -> value`` or an output block that disagrees with what runs
    fails the doc's test; agreeing ones pass."""
    good = "```python\nx = 1 + 1\nx  # -> 2\nprint('x is', x)\n```\n<!-- doc-test: output -->\n```text\nx is ...\n```\n"
    bad_value = good.replace("# -> 2", "# -> 3")
    bad_output = good.replace("x is ...", "x was ...")
    results = []
    for k, md in enumerate([good, bad_value, bad_output]):
        d = tmp_path / str(k)
        d.mkdir()
        (d / "doc.md").write_text(md)
        blocks = [b for b in ds.parse(d / "doc.md") if b.kind == "python"]
        results.append(_run_python(blocks, d))
    assert results[0] is None, results[0]
    assert results[1] is not None and "the doc says -> 3, but it is 2" in results[1], results[1]
    assert results[2] is not None and "x was ..." in results[2], results[2]
