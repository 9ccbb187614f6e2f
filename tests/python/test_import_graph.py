"""The import graph of the ``hlobridge`` package: modules never import each
other's private (underscore) names, intra-package imports (top-level and
inside functions) form no cycle, and the shared leaf modules (dtype tables,
signatures, the entry cache, lowering) import none of the ``call_jax`` paths.

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
# Leaf modules that the call_jax paths share; they must not import them back.
SHARED = ("dtypes", "signature", "entry_cache", "lowering", "receipt")
PATHS = ("jax_bridge", "autograd", "custom_op", "lazy")


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = f.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def _imports(path: pathlib.Path, mods: dict[str, pathlib.Path]) -> list[tuple[str, str]]:
    """``(module, imported name)`` for every hlobridge import in ``path``,
    top-level or inside functions; name is ``""`` for a whole module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hlobridge"):
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((sub, "") if sub in mods else (node.module, alias.name))
        elif isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names if a.name.startswith("hlobridge")]
    return found


def _private_attributes(path: pathlib.Path, mods: dict[str, pathlib.Path]) -> list[str]:
    """``module._name`` accesses through an imported hlobridge module."""
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


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: {m for m, _ in _imports(f, mods) if m in mods and m not in (name, "hlobridge")}
            for name, f in mods.items()}


def test_no_module_imports_another_modules_private_names():
    mods = _modules()
    bad = [f"{name} imports {m}.{n}" for name, f in mods.items() for m, n in _imports(f, mods)
           if n.startswith("_") and not n.endswith("__") and not (m == "hlobridge" and n == "_native")]
    bad += [f"{name} uses {a}" for name, f in mods.items() for a in _private_attributes(f, mods)]
    assert not bad, "\n".join(bad)


def test_intra_package_imports_have_no_cycle():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                cycle = stack[stack.index(w):] + [w]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if w not in state:
                visit(w)
        stack.pop()
        state[v] = 2

    for v in sorted(graph):
        if v not in state:
            visit(v)


def test_shared_modules_import_no_call_jax_path():
    graph = _graph()
    for leaf in SHARED:
        seen, todo = set(), [f"hlobridge.{leaf}"]
        while todo:
            for w in graph[todo.pop()] - seen:
                seen.add(w)
                todo.append(w)
        assert not seen & {f"hlobridge.{p}" for p in PATHS}, (leaf, sorted(seen))


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-W", "error", "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=300)


def test_custom_op_runs_through_call_jax_once_imported():
    proc = _run("""
        import sys
        import torch, jax.numpy as jnp
        import torch.utils._pytree as pytree
        import hlobridge
        from hlobridge import custom_op
        assert "hlobridge.jax_bridge" not in sys.modules
        x = torch.randn(5)
        key = custom_op.register(lambda a: jnp.cos(a) * 2, pytree.tree_flatten(((x,), {}))[1],
                                 (None,))
        try:
            torch.ops.hlobridge.call_jax(key, [x])
        except hlobridge.ArgumentError as e:
            assert "call_jax" in str(e), e
        else:
            raise AssertionError("the op ran without call_jax")
        from hlobridge.jax_bridge import call_jax
        (out,) = torch.ops.hlobridge.call_jax(key, [x])
        torch.testing.assert_close(out, torch.cos(x) * 2, rtol=1e-5, atol=1e-6)
        print("ok")
    """)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
