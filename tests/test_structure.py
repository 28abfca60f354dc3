"""Shape rules the code review asks for, checked so they stay true: every workflow step is
a method of at most 60 lines (a longer one is two steps)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_STEP_LINES = 60


def files(folder: str, pattern: str = "*.py") -> list[Path]:
    """The files a check reads; none found is a failure, not a pass: a moved or renamed
    folder would otherwise leave its check asserting nothing."""
    found = sorted((ROOT / folder).glob(pattern))
    assert found, f"no {pattern} in {folder}/: the check would be vacuous"
    return found


def test_every_workflow_function_is_at_most_60_lines():
    long = []
    for path in files("workflows"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_STEP_LINES:
                    long.append(f"{path.name}:{node.name} {lines} lines")
    assert long == []


def test_a_glob_that_finds_nothing_fails_the_check():
    with pytest.raises(AssertionError, match="vacuous"):
        files("workflows", "*.no-such-suffix")
