"""The import graph of the ``hlobridge`` package: modules never import each
other's private (underscore) names, intra-package imports (top-level and
inside functions) form no cycle, and the shared leaf modules (dtype tables,
signatures, the entry cache, lowering) import none of the ``call_jax`` paths.

Importing ``hlobridge.a.b`` first runs the package ``hlobridge.a``'s
``__init__``, so an import counts as an edge to the module and to each of its
parent packages (except the root ``hlobridge``, whose ``__init__`` imports
only the leaves :data:`ROOT_EAGER`, checked on their own). Internals live in
``hlobridge._src`` and import no public module.

Also: the ``hlobridge::call_jax`` op, imported on its own (as the
``torch.compile`` backend does), runs once ``call_jax`` is imported, and
names the problem with an :class:`~hlobridge.ArgumentError` before that.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
import textwrap

import hlobridge

PKG = pathlib.Path(hlobridge.__file__).parent
SRC = "hlobridge._src"
# Leaf modules that the call_jax paths share; they must not import them back.
SHARED = ("dtypes", "signature", "entry_cache", "lowering", "receipt", "errors", "config")
PATHS = ("jax_bridge", "autograd", "custom_op", "lazy")
# What ``hlobridge/__init__`` imports when it runs (everything else is lazy).
ROOT_EAGER = {"hlobridge._native", SRC, f"{SRC}.config", f"{SRC}.errors"}
# Public modules that ``_src`` may import: the native extension.
NATIVE = "hlobridge._native"


def _modules() -> dict[str, pathlib.Path | None]:
    out: dict[str, pathlib.Path | None] = {NATIVE: None}  # the extension: imports nothing
    for f in PKG.rglob("*.py"):
        parts = f.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def _imports(path: pathlib.Path | None, mods: dict[str, pathlib.Path | None]) -> list[tuple[str, str]]:
    """``(module, imported name)`` for every hlobridge import in ``path``,
    top-level or inside functions; name is ``""`` for a whole module."""
    if path is None:
        return []
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hlobridge"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((sub, "") if sub in mods else (node.module, alias.name))
        elif isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names if a.name.startswith("hlobridge")]
    return found


def _top_level_imports(path: pathlib.Path, mods: dict[str, pathlib.Path | None]) -> set[str]:
    """Modules that ``path`` imports when it runs (module level, not in functions)."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hlobridge"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in mods else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("hlobridge")}
    return out


def _private_attributes(path: pathlib.Path | None, mods: dict[str, pathlib.Path | None]) -> list[str]:
    """``module._name`` accesses through an imported hlobridge module."""
    if path is None:
        return []
    bound: dict[str, str] = {}
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hlobridge"):
            for alias in node.names:
                if f"{node.module}.{alias.name}" in mods:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in mods:
                    bound[alias.asname] = alias.name
    return [f"{bound[n.value.id]}.{n.attr}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in bound
            and n.attr.startswith("_") and not n.attr.endswith("__")]


def _with_parents(module: str) -> set[str]:
    """``module`` and every package above it except the root ``hlobridge``:
    importing ``hlobridge.a.b`` runs ``hlobridge.a`` first. (A module's own
    packages are already running when it runs: :func:`_edges` drops them.)"""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(2, len(parts) + 1)}


def _edges(name: str, imported: list[str]) -> set[str]:
    targets: set[str] = set()
    for m in imported:
        targets |= _with_parents(m)
    return targets - _with_parents(name)


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: {m for m in _edges(name, [m for m, _ in _imports(f, mods)]) if m in mods}
            for name, f in mods.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def test_no_module_imports_another_modules_private_names():
    mods = _modules()
    allowed = {"_native", "_src"}
    bad = [f"{name} imports {m}.{n}" for name, f in mods.items() for m, n in _imports(f, mods)
           if n.startswith("_") and not n.endswith("__") and n not in allowed]
    bad += [f"{name} uses {a}" for name, f in mods.items() for a in _private_attributes(f, mods)]
    assert not bad, "\n".join(bad)


def test_intra_package_imports_have_no_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_cycle_detection_counts_parent_packages():
    """The cycle that package-wide errors in ``dynamo/errors.py`` made
    (program -> partition -> guard -> dynamo.errors, whose parent package
    imports program) is found through the parent edge alone."""
    imports = {
        "hlobridge.dynamo": ["hlobridge.dynamo.program"],
        "hlobridge.dynamo.program": ["hlobridge.dynamo.partition"],
        "hlobridge.dynamo.partition": ["hlobridge.distributed_guard"],
        "hlobridge.distributed_guard": ["hlobridge.dynamo.errors"],
        "hlobridge.dynamo.errors": [],
    }
    graph = {k: _edges(k, v) for k, v in imports.items()}
    assert "hlobridge.dynamo" not in graph["hlobridge.dynamo.program"]  # its own package
    cycle = _cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and len(cycle) == 5, cycle
    assert set(cycle) == set(imports) - {"hlobridge.dynamo.errors"}, cycle
    # without the parent edge (the old test) there is none
    assert _cycle({k: set(v) for k, v in imports.items()}) is None


def test_root_package_imports_only_its_leaves_eagerly():
    """``import hlobridge`` runs only :data:`ROOT_EAGER`, and those import
    nothing else of hlobridge when they run (the root's parent edge is left
    out of the graph because of this)."""
    mods = _modules()
    assert _top_level_imports(mods["hlobridge"], mods) == ROOT_EAGER - {SRC}
    for leaf in ROOT_EAGER - {NATIVE, SRC}:
        assert _top_level_imports(mods[leaf], mods) <= {NATIVE}, leaf
    assert not _imports(mods[SRC], mods)


def test_internals_import_no_public_module():
    """``_src`` imports ``_src``, the native module, and ``hlobridge.errors``
    (a leaf: it re-exports ``_src.errors``), never another public module."""
    mods = _modules()
    allowed = {NATIVE, "hlobridge.errors"}
    bad = [f"{name} imports {m}.{n}".rstrip(".") for name, f in mods.items() if name.startswith(SRC)
           for m, n in _imports(f, mods)
           if not (m.startswith(SRC) or m in allowed or (m == "hlobridge" and n in ("_native", "_src")))]
    assert not bad, "\n".join(bad)


def test_shared_modules_import_no_call_jax_path():
    graph = _graph()
    for leaf in SHARED:
        seen, todo = set(), [f"{SRC}.{leaf}"]
        while todo:
            for w in graph[todo.pop()] - seen:
                seen.add(w)
                todo.append(w)
        assert not seen & {f"{SRC}.{p}" for p in PATHS}, (leaf, sorted(seen))


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=300)


def test_custom_op_runs_through_call_jax_once_imported():
    proc = _run("""
        import sys
        import torch, jax.numpy as jnp
        import torch.utils._pytree as pytree
        import hlobridge
        from hlobridge._src import custom_op
        assert "hlobridge._src.jax_bridge" not in sys.modules
        x = torch.randn(5)
        key = custom_op.register(lambda a: jnp.cos(a) * 2, pytree.tree_flatten(((x,), {}))[1],
                                 (None,))
        try:
            torch.ops.hlobridge.call_jax(key, [x])
        except hlobridge.ArgumentError as e:
            assert "call_jax" in str(e), e
        else:
            raise AssertionError("the op ran without call_jax")
        from hlobridge._src.jax_bridge import call_jax
        (out,) = torch.ops.hlobridge.call_jax(key, [x])
        torch.testing.assert_close(out, torch.cos(x) * 2, rtol=1e-5, atol=1e-6)
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
