"""docs/design.md is the design the code cites: it lists every invariant, each test it
names exists, and nothing cites a design document the repository does not hold."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"
INVARIANTS = 25


def test_the_design_lists_every_invariant_in_order():
    text = DESIGN.read_text()
    section = text.split("## Invariants", 1)[1].split("\n## ", 1)[0]
    numbers = [int(n) for n in re.findall(r"^(\d+)\. \*\*", section, re.M)]
    assert numbers == list(range(1, INVARIANTS + 1))


def test_every_test_the_design_names_exists():
    named = set(re.findall(r"`(test_\w+)`", DESIGN.read_text()))
    assert named, "the design names no test"
    sources = [p.read_text() for p in (ROOT / "tests").rglob("test_*.py")]
    assert sources
    missing = sorted(
        name for name in named if not any(re.search(rf"def {name}\b", s) for s in sources)
    )
    assert missing == []


def test_nothing_cites_a_design_document_outside_the_repository():
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked
    citing = [
        path
        for path in tracked
        if path.endswith((".py", ".toml", ".sh", ".md"))
        and "DESIGN.md" in (ROOT / path).read_text(errors="replace")
        and path != "tests/docs/test_design_doc.py"
    ]
    assert citing == []
    for path in ("README.md", "docs/development.md"):
        assert "design.md" in (ROOT / path).read_text(), path
