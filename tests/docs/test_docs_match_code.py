"""The documentation pages name what the code has: every setting, every CLI command."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

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


def _documented_command_lines() -> list[str]:
    """Every `dreamkeeper ...` line in a code block of the README and docs/, as a user
    would type it: comments, redirections and pipes cut, `[optional ...]` parts left
    out, the first of `a|b|c`."""
    lines = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        blocks = page.read_text().split("```")[1::2]
        for block in blocks:
            for line in block.splitlines():
                line = line.strip()
                if not line.startswith("dreamkeeper ") or "COMMAND" in line:
                    continue  # the synopsis, not a command line
                line = re.split(r"\s(?:#|>|\||&&)", line)[0]
                line = re.sub(r"\[[^\]]*\]", "", line)
                line = re.sub(r"(\S+?)\|\S+", r"\1", line)
                lines.append(f"{page.name}: {line.strip()}")
    return lines


@pytest.mark.parametrize("line", _documented_command_lines())
def test_every_documented_command_line_parses(line):
    _, command = line.split(": ", 1)
    build_parser().parse_args(shlex.split(command)[1:])
