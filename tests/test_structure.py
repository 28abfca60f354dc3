"""Shape rules the code review asks for, checked so they stay true: every workflow step is
a method of at most 60 lines (a longer one is two steps), and a workflow's state exists
from construction."""

from __future__ import annotations

import ast
import re
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


def _self_attributes_assigned(function: ast.AST) -> dict[str, int]:
    """`self.x` assigned anywhere in a function: name -> first line."""
    found: dict[str, int] = {}
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            found.setdefault(node.attr, node.lineno)
    return found


def _is_workflow(cls: ast.ClassDef) -> bool:
    return any("workflow.defn" in ast.unparse(d) for d in cls.decorator_list)


def test_workflow_state_is_created_in_init():
    """Signal, update and query handlers can run before `run` starts (an update sent with
    the start, a query of a workflow whose first task failed): state that `run` or a
    handler creates would be an AttributeError there. So every attribute a workflow
    assigns is first assigned in `__init__` (with `@workflow.init` when it needs the
    input)."""
    late = []
    workflows = 0
    for path in files("workflows"):
        for cls in ast.walk(ast.parse(path.read_text())):
            if not isinstance(cls, ast.ClassDef) or not _is_workflow(cls):
                continue
            workflows += 1
            methods = [n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
            init = next((m for m in methods if m.name == "__init__"), None)
            created = set(_self_attributes_assigned(init)) if init is not None else set()
            for method in methods:
                if method is init:
                    continue
                for name, line in _self_attributes_assigned(method).items():
                    if name not in created:
                        late.append(f"{path.name}:{line} {cls.name}.{method.name} creates {name}")
    assert workflows, "no @workflow.defn class found: the check would be vacuous"
    assert late == []


TICKET_TAG = re.compile(r"(?:\(|\bissues? |\bsee |\"\"\")#\d+\b|, #\d+\)")
NOT_SOURCE = {".git", ".venv", "build", "dist", "node_modules"}


def _source_files() -> list[Path]:
    found = [ROOT / name for name in ("pyproject.toml", "Dockerfile", "docker-compose.yml")]
    for top in sorted(ROOT.iterdir()):
        if top.is_dir() and top.name not in NOT_SOURCE and not top.name.startswith("."):
            found += [p for p in top.rglob("*") if p.suffix in {".py", ".sh", ".toml"}]
    return [p for p in found if p.is_file() and "__pycache__" not in p.parts]


def test_no_ticket_tags_in_code():
    """A comment says why, at the hazard; which ticket brought the code is git's to say
    (and a tag names nothing once the tracker moves)."""
    tagged = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _source_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        if TICKET_TAG.search(line)
    ]
    assert len(_source_files()) > 100, "the source walk found too little: vacuous"
    assert tagged == []
