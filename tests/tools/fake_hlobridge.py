#!/usr/bin/env python3
"""Stand-in for ``hlobridge fmt`` used only to self-test the Python harness.

NOT the default binary: select it explicitly with
``HLOBRIDGE_BIN=tests/tools/fake_hlobridge.py``.

* ``fmt FILE``            -> the file unchanged (``cat``; with
  ``HLOBRIDGE_FAKE_VALIDATE=1`` it first rejects what MLIR rejects), or, with
  ``HLOBRIDGE_FAKE_PRETTY=mlir``, MLIR's own pretty print.
* ``fmt FILE --generic``  -> MLIR's generic print, with every explicit
  location kept and the locations MLIR invented dropped again.
* ``-o OUT`` writes to OUT instead of stdout.
"""

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mlir_canon  # noqa: E402

_MARK = "loc(%s)" % mlir_canon.IMPLICIT_MARKER


def _drop_implicit(asm: str) -> str:
    """Remove parser-invented locations from MLIR's debug-info print."""
    asm = mlir_canon.normalize_implicit_locs(asm)
    aliases = set(re.findall(r"^(#loc\d*) = %s$" % re.escape(_MARK), asm, flags=re.M))
    lines = [ln for ln in asm.split("\n") if not any(ln == f"{a} = {_MARK}" for a in aliases)]
    asm = "\n".join(lines)
    for a in sorted(aliases, key=len, reverse=True):
        asm = re.sub(r" loc\(%s\)(?![0-9])" % re.escape(a), "", asm)
    return asm.replace(" " + _MARK, "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="fake-hlobridge")
    sub = ap.add_subparsers(dest="cmd", required=True)
    fmt = sub.add_parser("fmt")
    fmt.add_argument("file")
    fmt.add_argument("--generic", action="store_true")
    fmt.add_argument("-o", dest="out")
    args = ap.parse_args(argv)
    text = Path(args.file).read_text()
    try:
        if args.generic:
            op = mlir_canon.parse(text)
            out = _drop_implicit(mlir_canon.print_op(op, generic=True, debug_info=True))
        elif mlir_canon.os.environ.get("HLOBRIDGE_FAKE_PRETTY") == "mlir":
            op = mlir_canon.parse(text)
            out = _drop_implicit(mlir_canon.print_op(op, generic=False, debug_info=True))
        else:
            if mlir_canon.os.environ.get("HLOBRIDGE_FAKE_VALIDATE") == "1":
                mlir_canon.parse(text)  # reject what MLIR rejects (slow: imports jax)
            out = text
    except Exception as e:  # noqa: BLE001
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.out:
        Path(args.out).write_text(out)
    else:
        sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
