"""Shape rules the code review asks for, checked so they stay true: every workflow step is
a method of at most 60 lines (a longer one is two steps)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_STEP_LINES = 60


def test_every_workflow_function_is_at_most_60_lines():
    long = []
    for path in sorted((ROOT / "workflows").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_STEP_LINES:
                    long.append(f"{path.name}:{node.name} {lines} lines")
    assert long == []
