"""The documentation pages name what the code has: every setting, every CLI command."""

from __future__ import annotations

import re
from pathlib import Path

from dreamkeeper.cli.main import build_parser
from dreamkeeper.core.settings import Environment

ROOT = Path(__file__).resolve().parents[2]


def test_every_environment_variable_is_on_the_configuration_page():
    page = (ROOT / "docs" / "configuration.md").read_text()
    missing = [name for name in Environment.model_fields if f"`{name}`" not in page]
    assert missing == []


def test_every_cli_command_is_on_the_operations_page_and_no_other():
    page = (ROOT / "docs" / "operations.md").read_text()
    block = page.split("```", 2)[1]
    listed = set(re.findall(r"^  ([a-z][a-z-]+)", block, flags=re.M))
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    assert listed == set(subparsers.choices)  # type: ignore[attr-defined]


def test_the_readme_stays_short_and_its_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for target in re.findall(r"\]\(((?:docs|examples|bench|scripts)/[^)#]+)", readme):
        assert (ROOT / target).exists(), target
