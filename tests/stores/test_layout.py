"""The shape of `stores/`, checked so it stays true: no module uses another module's
private names (`obj._x` where `_x` is defined in a class or at the top of another stores
module, or `from … import _x`), and no import circle runs through its modules."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORES = ROOT / "stores"


def _modules() -> dict[Path, ast.Module]:
    found = {path: ast.parse(path.read_text()) for path in sorted(STORES.rglob("*.py"))}
    assert len(found) > 20, f"the glob found only {len(found)} modules under {STORES}"
    return found


def _private_names(tree: ast.Module) -> set[str]:
    """Private names a module defines: functions, classes, module-level names and the
    attributes its classes set on `self`/`cls`."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def private_reaches(modules: dict[Path, ast.Module]) -> list[str]:
    own = {path: _private_names(tree) for path, tree in modules.items()}
    reaches = []
    for path, tree in modules.items():
        elsewhere = set().union(*(names for other, names in own.items() if other != path))
        where = path.relative_to(ROOT)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                name = node.attr
                if not name.startswith("_") or name.startswith("__"):
                    continue
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    continue
                # The module's own class on another instance is its own business.
                if name in elsewhere and name not in own[path]:
                    reaches.append(f"{where}:{node.lineno} .{name}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "dreamkeeper.stores"
            ):
                reaches += [
                    f"{where}:{node.lineno} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                ]
    return reaches


def test_no_stores_module_uses_another_modules_private_names():
    assert private_reaches(_modules()) == []


def test_the_private_name_check_sees_a_reach(tmp_path):
    owner = ast.parse("class Store:\n    def __init__(self):\n        self._pending = {}\n")
    reacher = ast.parse("def encode(store):\n    return store._pending\n")
    found = private_reaches({STORES / "a.py": owner, STORES / "b.py": reacher})
    assert found == ["stores/b.py:2 ._pending"]


CYCLES = """
import sys
sys.path.insert(0, sys.argv[1])
import grimp
graph = grimp.build_graph("dreamkeeper", cache_dir=None)
stores = sorted(m for m in graph.modules if m.startswith("dreamkeeper.stores."))
assert len(stores) > 20, stores
circles = set()
for module in stores:
    for imported in graph.find_modules_directly_imported_by(module):
        if imported.startswith("dreamkeeper.stores.") and imported != module:
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back:
                circles.add(" -> ".join((module, *back)))
print("\\n".join(sorted(circles)))
"""


def test_no_import_circle_among_the_stores_modules(tmp_path):
    # grimp reads the source tree of an importable package; the checkout maps its
    # folders into `dreamkeeper.*` (pyproject's package-dir), so lay them out that way.
    package = tmp_path / "dreamkeeper"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for folder in ("core", "policies", "stores"):
        shutil.copytree(ROOT / folder, package / folder, ignore=shutil.ignore_patterns("*.pyc"))
    run = subprocess.run(
        [sys.executable, "-c", CYCLES, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == ""
