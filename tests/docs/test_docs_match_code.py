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


def _documented_defaults() -> dict[str, str]:
    page = (ROOT / "docs" / "configuration.md").read_text()
    rows = re.findall(r"^\| `([A-Z0-9_]+)` \| ([^|]+) \|", page, flags=re.M)
    return {name: cell.strip() for name, cell in rows}


def test_every_documented_default_is_the_codes():
    """The configuration page's default column says what a process gets with the
    variable unset."""
    from pydantic_core import PydanticUndefined

    wrong = []
    for name, cell in _documented_defaults().items():
        field = Environment.model_fields.get(name)
        if field is None or field.default is PydanticUndefined:
            continue
        default = field.default
        if default is None:
            ok = cell.startswith("unset")
        elif not (cell.startswith("`") and cell.endswith("`")):
            continue  # described in words: a computed default
        else:
            text = cell.strip("`")
            if isinstance(default, bool):
                ok = text.lower() == str(default).lower()
            elif isinstance(default, int | float):
                ok = float(text.replace(",", "")) == float(default)
            elif isinstance(default, Path):
                ok = Path(text) == default
            else:
                ok = text == str(default)
        if not ok:
            wrong.append(f"{name}: documented {cell}, the code's {default!r}")
    assert wrong == []
