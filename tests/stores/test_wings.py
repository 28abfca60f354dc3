"""The store contract stands on no backend: nothing under `stores/contract/` loads a
module of the file backend (`stores.files`) or of the PostgreSQL backend
(`stores.postgres`), checked in a fresh interpreter so this session's imports don't
count (import-linter checks the same statically, pyproject.toml); and each wing loads
none of the other, the shared forgetting included."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

from dreamkeeper.stores import contract

BACKENDS = ("dreamkeeper.stores.files", "dreamkeeper.stores.postgres")


def _loaded_after(modules: list[str]) -> list[str]:
    code = "import json, sys\n" + "".join(f"import {m}\n" for m in modules)
    code += "print(json.dumps(sorted(m for m in sys.modules if m.startswith('dreamkeeper'))))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(out.stdout)


def _backend_modules(loaded: list[str], backend: str) -> list[str]:
    return [m for m in loaded if m == backend or m.startswith(backend + ".")]


def test_nothing_under_the_contract_imports_a_backend():
    modules = [
        info.name for info in pkgutil.walk_packages(contract.__path__, contract.__name__ + ".")
    ]
    assert len(modules) >= 8, modules  # the walk found the contract's modules
    loaded = _loaded_after(modules)
    assert set(modules) <= set(loaded)
    assert [m for backend in BACKENDS for m in _backend_modules(loaded, backend)] == []


def test_the_postgres_wing_loads_no_module_of_the_file_wing():
    loaded = _loaded_after(["dreamkeeper.stores.postgres.backend"])
    assert "dreamkeeper.stores.postgres.forget" in loaded  # its forgetting came with it
    assert _backend_modules(loaded, "dreamkeeper.stores.files") == []


def test_the_file_wing_loads_no_module_of_the_postgres_wing():
    loaded = _loaded_after(["dreamkeeper.stores.files.backend"])
    assert "dreamkeeper.stores.files.forgetting" in loaded
    assert _backend_modules(loaded, "dreamkeeper.stores.postgres") == []
