"""Extracting the runnable snippets of the Markdown docs (README.md and
docs/*.md) for ``test_docs.py``.

Which fenced blocks run:

- ```` ```python ```` / ```` ```py ````: every block of one file runs in order
  in ONE fresh Python process, in one shared namespace (the docs read that
  way: a later block uses what an earlier one defined).
- ```` ```bash ```` / ```` ```sh ```` / ```` ```shell ```` / ```` ```console ````:
  each block runs with ``bash -euo pipefail`` (``$ `` prompts are stripped),
  with ``.venv/bin`` first on ``PATH``.
- Everything else (```` ```text ````, ```` ```toml ````, ```` ```mlir ````, bare
  ```` ``` ````, ...) is shown, not run.

Every file's blocks run in a fresh temporary directory (the current
directory of both kinds), so ``path="artifact"`` and ``model.mlir`` land
there.

Markers: an HTML comment on the line(s) right before a fence (invisible
when the Markdown is rendered):

- ``<!-- doc-test: skip REASON -->``: the block does not run here (TPU/GPU
  hardware, a server, a long benchmark); the reason is required and shown
  as the skip reason.
- ``<!-- doc-test: setup`` ... ``-->``: the lines up to ``-->`` run before
  the block, in its language (hidden preparation such as example inputs:
  what the reader is assumed to have).

Checked results:

- ``EXPR  # -> EXPECTED`` on a Python line that is an expression: the
  value's ``repr`` must match ``EXPECTED`` (``...`` or ``…`` matches any
  text).
- A ```` ```text ```` block right after a runnable block, with the marker
  ``<!-- doc-test: output -->`` before it: that block's printed output must
  contain these lines (``...`` / ``…`` match any text within a line).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PYTHON = {"python", "py", "python3"}
SHELL = {"bash", "sh", "shell", "console"}

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
_MARK = re.compile(r"<!--\s*doc-test:\s*(\w[\w-]*)\s*(.*?)\s*(-->)?\s*$")
_ARROW = re.compile(r"^(?P<code>.*\S)\s*#\s*->\s*(?P<want>.+?)\s*$")


@dataclass
class Block:
    """One fenced block of a Markdown file."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip: str | None = None
    setup: str = ""
    expected_output: str | None = None  # a following ```text block marked as output
    marks: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        rel = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{rel}:{self.line}"

    @property
    def kind(self) -> str | None:
        if self.lang in PYTHON:
            return "python"
        if self.lang in SHELL:
            return "shell"
        return None


def doc_files() -> list[Path]:
    """README.md and every docs/*.md, found when the tests are collected (new
    docs are picked up without a list to maintain)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _marker_before(lines: list[str], i: int) -> tuple[list[tuple[str, str]], int]:
    """The doc-test markers in the comment lines right above line ``i``
    (0-based fence line): ``[(name, argument)]``, in order."""
    marks: list[tuple[str, str]] = []
    j = i - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    # Walk up over consecutive comment blocks.
    while j >= 0 and lines[j].rstrip().endswith("-->"):
        end = j
        while j >= 0 and "<!--" not in lines[j]:
            j -= 1
        if j < 0:
            break
        comment = lines[j:end + 1]
        m = _MARK.match(comment[0].strip())
        if m:
            name, arg = m.group(1), m.group(2)
            if len(comment) > 1:  # multi-line: the body is the argument
                body = comment[1:]
                body[-1] = body[-1].rstrip()[: -len("-->")]
                arg = "\n".join(body).rstrip() + "\n"
            marks.append((name, arg))
        j -= 1
        while j >= 0 and not lines[j].strip():
            j -= 1
    marks.reverse()
    return marks, j


def parse(path: Path) -> list[Block]:
    """Every fenced block of ``path`` with its markers."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            ln = lines[i]
            body.append(ln[len(indent):] if ln.startswith(indent) else ln.lstrip())
            i += 1
        i += 1
        marks, _ = _marker_before(lines, start)
        b = Block(path, start + 1, lang, "\n".join(body) + "\n", marks=[n for n, _ in marks])
        for name, arg in marks:
            if name == "skip":
                if not arg.strip():
                    raise ValueError(f"{b.where}: `doc-test: skip` needs a reason")
                b.skip = arg.strip()
            elif name == "setup":
                b.setup += arg
            elif name == "output":
                pass
            else:
                raise ValueError(f"{b.where}: unknown doc-test marker {name!r}")
        if "output" in b.marks and blocks and blocks[-1].kind is not None:
            blocks[-1].expected_output = b.code
        blocks.append(b)
    return blocks


def _pattern(text: str) -> re.Pattern[str]:
    parts = re.split(r"\.\.\.|…", text)
    return re.compile(".*?".join(re.escape(p) for p in parts), re.S)


def matches(want: str, got: str) -> bool:
    """Whether ``got`` matches ``want`` in full (``...``/``…`` wildcards)."""
    return _pattern(want).fullmatch(got) is not None


def output_matches(want: str, got: str) -> str | None:
    """``None`` when every line of ``want`` matches a line of ``got`` in
    order (wildcards within a line), else the first line that did not."""
    got_lines = got.splitlines()
    k = 0
    for w in want.strip("\n").splitlines():
        p = _pattern(w.strip())
        while k < len(got_lines) and not p.fullmatch(got_lines[k].strip()):
            k += 1
        if k == len(got_lines):
            return w
        k += 1
    return None


def python_source(block: Block) -> str:
    """The block's code with each ``EXPR  # -> EXPECTED`` line turned into a
    check of ``repr(EXPR)`` (``_doc_check`` is defined by the runner)."""
    out: list[str] = []
    for ln in block.code.splitlines():
        m = _ARROW.match(ln)
        if m and not ln.lstrip().startswith("#") and _is_expression(m.group("code").strip()):
            code = m.group("code")
            ind = code[: len(code) - len(code.lstrip())]
            out.append(f"{ind}_doc_check({code.strip()!r}, ({code.strip()}), {m.group('want')!r})")
        else:
            out.append(ln)
    return "\n".join(out) + "\n"


def _is_expression(code: str) -> bool:
    try:
        compile(code, "<doc>", "eval")
    except SyntaxError:
        return False
    return True
