"""MLIR-as-oracle helpers for the hlobridge verification harness.

Uses the MLIR C++ parser/printer bundled in jaxlib (the same one JAX lowers
with), in a context set up exactly like JAX's own
(``jax._src.interpreters.mlir.make_ir_context``: upstream dialects + sdy, mpmd,
mhlo, chlo, stablehlo/vhlo).

Public API
----------
``mlir_parse_ok(text) -> (bool, str)``
    Does MLIR parse (and verify) this module?
``canonical_generic(text, debug_info) -> str``
    parse -> print pretty -> parse -> print generic (``print_generic_op_form``),
    with locations when ``debug_info``.  Locations that the MLIR parser invents
    for ops/block arguments written without ``loc(...)`` (FileLineColLoc into
    the parsed buffer) are replaced by a fixed marker location
    ``loc("hlobridge.implicit")`` so that two texts of the same IR with
    different layout compare equal, while explicit locations (including an
    explicit ``loc(unknown)``) survive and are compared.
``corpus_modules()`` / ``corpus_bytecode()``
    Text modules under the shared corpus (+ live-generated ones) / bytecode
    files (out of scope for the text check).
``parse_ok_map(paths)``
    Cached (``.cache/mlir_parse_ok.json``, keyed by content sha256) parse
    verdicts, computed with a 2-process pool for misses.
``cached_canonical(text, debug_info)``
    ``canonical_generic`` memoised on disk under ``.cache/canon/``.

Import cost: jax is imported lazily (first call in a process), so the test
driver process can stay jax-free and fan work out to worker processes.
"""

from __future__ import annotations

import concurrent.futures as cf
import gzip
import hashlib
import json
import multiprocessing as mp
import os
import re
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = Path(os.environ.get("HLOBRIDGE_CACHE_DIR", REPO_ROOT / ".cache"))
CORPUS_DIR = Path(os.environ.get("HLOBRIDGE_CORPUS", "/work/shared/corpus"))
LIVE_DIR = CACHE_DIR / "live"

# Name given to the buffer when parsing from a string; every location MLIR
# invents while parsing points into it ("<name>":line:col).
IMPLICIT_SOURCE = "hlobridge.implicit-buffer"
# What those invented locations are normalised to (a NameLoc no real producer
# writes).
IMPLICIT_MARKER = '"hlobridge.implicit"'

# Bump when the canonicalisation recipe changes (invalidates .cache/canon).
CANON_VERSION = "5"

_ctx = None
_ctx_uses = 0
_ctx_bytes = 0
_ir = None
# Recreate the context now and then: MLIR contexts keep every uniqued
# attribute/type (e.g. big dense constants) alive forever.
_CTX_MAX_USES = 400
_CTX_MAX_BYTES = 256 << 20


def _context():
    global _ctx, _ctx_uses, _ctx_bytes, _ir
    if _ctx is None or _ctx_uses >= _CTX_MAX_USES or _ctx_bytes >= _CTX_MAX_BYTES:
        from jax._src.interpreters import mlir as jax_mlir  # noqa: WPS433
        from jax._src.lib.mlir import ir

        _ir = ir
        _ctx = jax_mlir.make_ir_context()
        _ctx_uses = 0
        _ctx_bytes = 0
    return _ctx


def _account(n: int) -> None:
    global _ctx_uses, _ctx_bytes
    _ctx_uses += 1
    _ctx_bytes += n


# ---------------------------------------------------------------- parsing ---

_ONE_TOP_LEVEL = "source must contain a single top-level operation"


def _fresh_context():
    _context()  # imports
    from jax._src.interpreters import mlir as jax_mlir  # noqa: WPS433

    return jax_mlir.make_ir_context()


def parse(text, *, source_name: str = IMPLICIT_SOURCE, fresh_context: bool = False):
    """Parse (and verify) ``text`` (str, or bytes = bytecode) -> builtin.module op.

    Mirrors ``mlir-opt``'s behaviour: a single top-level ``builtin.module`` is
    the module; anything else (several top-level ops, a bare ``func.func``) is
    wrapped in an implicit module.  Raises ``ir.MLIRError`` on failure.

    ``fresh_context``: parse in a new context.  Needed for modules with
    ``dense_resource`` blobs: resource keys are uniqued per context, so a
    second parse of ``blob`` in the same context yields ``blob_1``.
    """
    ctx = _fresh_context() if fresh_context else _context()
    ir = _ir
    _account(len(text))
    with ctx:
        if isinstance(text, (bytes, bytearray)):
            return ir.Module.parse(bytes(text)).operation
        try:
            op = ir.Operation.parse(text, source_name=source_name)
            if op.name == "builtin.module":
                return op
        except ir.MLIRError as e:
            if _ONE_TOP_LEVEL not in str(e):
                raise
        # Implicit top-level module: only Module.parse{,File} do the wrapping.
        # Parse from a file so the invented locations carry a name we know.
        d = Path(tempfile.gettempdir()) / f"hlobridge-implicit-{os.getpid()}"
        d.mkdir(exist_ok=True)
        f = d / IMPLICIT_SOURCE
        f.write_text(text)
        try:
            return ir.Module.parseFile(str(f)).operation
        finally:
            f.unlink()


def _implicit_loc_re(names):
    alts = "|".join(re.escape(n) for n in names)
    # "name":L:C (parser-invented locations are never ranges).
    return re.compile(r'"(?:%s)":\d+:\d+(?! to)' % alts)


_IMPLICIT_RE = None


def normalize_implicit_locs(asm: str) -> str:
    """Replace parser-invented ``"<buffer>":L:C`` locations with the marker."""
    global _IMPLICIT_RE
    if _IMPLICIT_RE is None:
        tmp = Path(tempfile.gettempdir()) / f"hlobridge-implicit-{os.getpid()}" / IMPLICIT_SOURCE
        _IMPLICIT_RE = _implicit_loc_re([IMPLICIT_SOURCE, str(tmp)])
    return _IMPLICIT_RE.sub(IMPLICIT_MARKER, asm)


def mlir_parse_ok(text) -> tuple[bool, str]:
    """(True, "") if MLIR parses + verifies ``text``, else (False, first error lines)."""
    try:
        parse(text)
        return True, ""
    except Exception as e:  # ir.MLIRError, or a crash-ish ValueError
        msg = str(e).strip().splitlines()
        return False, "\n".join(msg[:4])[:2000]


def print_op(op, *, generic: bool, debug_info: bool, local_scope: bool = False) -> str:
    return op.get_asm(
        enable_debug_info=debug_info,
        print_generic_op_form=generic,
        assume_verified=True,  # parse() already verified
        large_elements_limit=None,
        use_local_scope=local_scope,
    )


def has_resources(text) -> bool:
    if isinstance(text, (bytes, bytearray)):
        return True  # bytecode may carry resources; be safe
    return "{-#" in text


def canonical_generic(text, debug_info: bool = True) -> str:
    """MLIR's canonical generic form of ``text`` (see module docstring).

    parse(text) -> pretty print -> parse -> generic print (local scope: no
    aliases, locations inline).  With
    ``debug_info`` every op/argument location is printed; parser-invented
    locations are normalised to ``loc("hlobridge.implicit")`` after each
    print so they compare equal whatever the layout of the input.
    """
    # Resource blobs ({-# dialect_resources ... #-}): fresh contexts so keys
    # are not renamed, and no local scope (it drops the resource section).
    resources = has_resources(text)
    op = parse(text, fresh_context=resources)
    pretty = print_op(op, generic=False, debug_info=debug_info)
    del op
    if debug_info:
        pretty = normalize_implicit_locs(pretty)
    op2 = parse(pretty, fresh_context=resources)
    # Local scope: no #alias definitions, every location/attribute is printed
    # inline, so a diff shows the actual difference instead of renumbered
    # #locN aliases.
    out = print_op(op2, generic=True, debug_info=debug_info, local_scope=not resources)
    if debug_info:
        out = normalize_implicit_locs(out)
    return out


def mlir_pretty(text, debug_info: bool = False) -> str:
    """MLIR's own pretty print (used by the fake CLI and the bench)."""
    return print_op(parse(text), generic=False, debug_info=debug_info)


# ------------------------------------------------------------------ cache ---


def sha256(data) -> str:
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha256(data).hexdigest()


def _canon_cache_path(text, debug_info: bool) -> Path:
    key = sha256(text)
    tag = f"v{CANON_VERSION}-jl{jaxlib_version()}-d{int(debug_info)}"
    return CACHE_DIR / "canon" / key[:2] / f"{key}-{tag}.mlir.gz"


def cached_canonical(text, debug_info: bool = True) -> str:
    """``canonical_generic`` memoised on disk, keyed by the text's sha256.

    Raises like ``canonical_generic`` when MLIR refuses the text (refusals are
    not cached here; see ``parse_ok_map``).
    """
    p = _canon_cache_path(text, debug_info)
    if p.exists():
        try:
            return gzip.decompress(p.read_bytes()).decode()
        except (OSError, EOFError):
            pass
    out = canonical_generic(text, debug_info)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(gzip.compress(out.encode(), compresslevel=1))
    os.replace(tmp, p)
    return out


def prune_canon_cache() -> int:
    """Delete cached canonical forms made by another recipe / jaxlib version."""
    d = CACHE_DIR / "canon"
    if not d.is_dir():
        return 0
    tag = f"-v{CANON_VERSION}-jl{jaxlib_version()}-"
    n = 0
    for p in d.glob("*/*.mlir.gz"):
        if tag not in p.name:
            p.unlink(missing_ok=True)
            n += 1
    return n


# ----------------------------------------------------------------- corpus ---

TEXT_EXTS = (".mlir",)
BYTECODE_EXTS = (".mlirbc",)


def corpus_modules(include_live: bool = True) -> list[Path]:
    """All text modules: shared corpus + live-generated (``.cache/live``)."""
    files = sorted(p for p in CORPUS_DIR.rglob("*.mlir") if p.is_file())
    if include_live and LIVE_DIR.is_dir():
        files += sorted(p for p in LIVE_DIR.rglob("*.mlir") if p.is_file())
    return files


def corpus_bytecode() -> list[Path]:
    """Bytecode artifacts (.mlirbc): MLIR parses them, but they are out of
    scope for the text round-trip check."""
    return sorted(p for p in CORPUS_DIR.rglob("*.mlirbc") if p.is_file())


def family(path: Path) -> str:
    """Coarse grouping for reports: 'stablehlo-testdata/quantized', 'jax', 'live/jax', ..."""
    path = Path(path)
    for root, prefix in ((LIVE_DIR, "live"), (CORPUS_DIR, "")):
        try:
            rel = path.relative_to(root)
        except ValueError:
            continue
        parts = rel.parts[:-1]
        if parts and parts[0] == "stablehlo-testdata" and len(parts) == 1:
            parts = ("stablehlo-testdata", "static")
        return "/".join(p for p in (prefix, *parts) if p) or prefix or "."
    return str(path.parent)


def display_name(path: Path) -> str:
    path = Path(path)
    for root, prefix in ((LIVE_DIR, "live/"), (CORPUS_DIR, "")):
        try:
            return prefix + str(path.relative_to(root))
        except ValueError:
            continue
    return str(path)


_PARSE_OK_FILE = "mlir_parse_ok.json"


def _parse_ok_worker(path: str):
    data = Path(path).read_bytes()
    if not path.endswith(BYTECODE_EXTS):
        try:
            data = data.decode()
        except UnicodeDecodeError as e:
            return path, False, f"not UTF-8: {e}"
    ok, err = mlir_parse_ok(data)
    return path, ok, err


def worker_pool(max_workers: int | None = None) -> cf.ProcessPoolExecutor:
    """Process pool whose workers each own an MLIR context (spawned: the
    parent may already hold threads)."""
    n = max_workers or min(2, os.cpu_count() or 1)
    return cf.ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"))


def parse_ok_map(paths, pool: cf.Executor | None = None) -> dict[str, tuple[bool, str]]:
    """{str(path): (ok, err)} for ``paths``; cached by content hash in
    ``.cache/mlir_parse_ok.json`` (per jaxlib version)."""
    cache_file = CACHE_DIR / _PARSE_OK_FILE
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    ver = f"jl{jaxlib_version_no_import()}"
    table = cache.setdefault(ver, {})
    out, todo, hashes = {}, [], {}
    for p in paths:
        p = str(p)
        h = sha256(Path(p).read_bytes())
        hashes[p] = h
        if h in table:
            out[p] = tuple(table[h])
        else:
            todo.append(p)
    if todo:
        own = pool is None and len(todo) > 8
        ex = worker_pool() if own else pool
        try:
            if ex is None:
                results = map(_parse_ok_worker, todo)
            else:
                results = ex.map(_parse_ok_worker, todo, chunksize=16)
            for p, ok, err in results:
                out[p] = (ok, err)
                table[hashes[p]] = [ok, err]
        finally:
            if own:
                ex.shutdown()
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache))
        os.replace(tmp, cache_file)
    return out


def jaxlib_version_no_import() -> str:
    """jaxlib version without importing jaxlib (reads the dist metadata)."""
    from importlib import metadata

    try:
        return metadata.version("jaxlib")
    except metadata.PackageNotFoundError:  # pragma: no cover
        return "unknown"


def jaxlib_version() -> str:
    return jaxlib_version_no_import()


if __name__ == "__main__":  # quick CLI: summarise which corpus files MLIR parses
    import argparse
    import collections

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="default: whole corpus + live")
    ap.add_argument("--canon", action="store_true", help="print canonical generic form of FILE")
    ap.add_argument("--no-debug-info", action="store_true")
    args = ap.parse_args()
    if args.canon:
        for f in args.files:
            print(canonical_generic(Path(f).read_text(), not args.no_debug_info), end="")
        raise SystemExit(0)
    files = [Path(f) for f in args.files] or corpus_modules() + corpus_bytecode()
    res = parse_ok_map(files)
    by_fam = collections.defaultdict(lambda: [0, 0])
    for p, (ok, err) in res.items():
        by_fam[family(Path(p))][0 if ok else 1] += 1
    for fam, (ok, bad) in sorted(by_fam.items()):
        print(f"{fam:40s} parsed {ok:5d}  refused {bad:5d}")
    for p, (ok, err) in sorted(res.items()):
        if not ok:
            print(f"REFUSED {display_name(Path(p))}: {err.splitlines()[1] if len(err.splitlines()) > 1 else err}")
