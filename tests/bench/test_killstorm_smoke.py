"""The kill-storm harness end to end with tiny parameters: its own dev server, chaos LLM
and worker subprocess, three SIGKILLs, then the audit table. It asserts that the run
happened and reported, not that the targets hold (the full-size run does: docs/benchmarks.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "killstorm.py"
LABELS = [
    "acked saves",
    "acked saves with no live copy covering them",
    "duplicate live entries",
    "files without a journal record",
    "ops applied twice",
    "workflows not completed",
    "dream cycles completed per agent",
    "drain time after the last kill",
]


@pytest.mark.slow
def test_killstorm_runs_end_to_end_with_tiny_parameters():
    run = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--saves",
            "12",
            "--agents",
            "2",
            "--kills",
            "3",
            "--dream-every",
            "2",
            "--drain-cap",
            "30",
            "--seed",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = run.stdout
    assert run.returncode in (0, 1), f"rc {run.returncode}\n{out}\n{run.stderr[-3000:]}"
    for label in LABELS:
        assert re.search(rf"^{re.escape(label)}\s", out, re.MULTILINE), f"no {label!r} in\n{out}"
    acked = int(re.search(r"^acked saves\s+(\d+)", out, re.MULTILINE).group(1))
    assert acked >= 1
    kills = int(re.search(r"worker: (\d+) SIGKILLs", out).group(1))
    assert kills >= 3
    assert re.search(r"storm0: \d+ live", out) and re.search(r"storm1: \d+ live", out)
    # MemoryClient takes `entry_id` among its typed options: a retry is the same save.
    assert "retries reuse the entry id: yes" in out
