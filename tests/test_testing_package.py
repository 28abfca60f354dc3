"""`dreamkeeper.testing` is the public fakes only (scripted LLM, scripted embeddings, a
clock), loading nothing beyond `dreamkeeper.core` and no dev extra; the development
harness (tests/harness/) never reaches an installed distribution."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from tests.helpers import build_wheel

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = ("dreamkeeper.core", "dreamkeeper.testing")
DEV_ONLY = ("hypothesis", "pytest", "temporalio")


def _testing_modules() -> list[str]:
    found = sorted((ROOT / "dreamkeeper" / "testing").glob("*.py"))
    assert found, "no module found in dreamkeeper/testing: the check below would be vacuous"
    return [
        "dreamkeeper.testing" if p.stem == "__init__" else f"dreamkeeper.testing.{p.stem}"
        for p in found
    ]


def test_the_shipped_test_doubles_load_only_the_core_and_no_dev_extra():
    modules = _testing_modules()
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules "
        f"if m.startswith('dreamkeeper') or m.split('.')[0] in {DEV_ONLY!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    loaded = json.loads(out.stdout)
    assert "dreamkeeper.testing.scripted_llm" in loaded  # the import did happen
    outside = [
        m
        for m in loaded
        if m != "dreamkeeper" and not any(m == a or m.startswith(a + ".") for a in ALLOWED)
    ]
    assert outside == []


def test_the_package_list_installs_nothing_from_tests():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["packages"], "pyproject.toml lists no package"
    assert [p for p in config["packages"] if p.split(".")[0] != "dreamkeeper"] == []
    assert [d for d in config["package-dir"].values() if d.split("/")[0] == "tests"] == []


def test_the_wheel_holds_no_development_harness(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "build", "*.egg-info"),
    )
    wheel = build_wheel(source, tmp_path / "wheels")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        modules = {n: archive.read(n).decode() for n in names if n.endswith(".py")}
    assert "dreamkeeper/testing/scripted_llm.py" in names  # the fakes do ship
    assert [n for n in names if n.startswith("tests/")] == []
    # No shipped module needs a dev extra at import time.
    dev_import = re.compile(r"^\s*(?:from|import)\s+(hypothesis|pytest)\b", re.M)
    assert sorted(n for n, text in modules.items() if dev_import.search(text)) == []
