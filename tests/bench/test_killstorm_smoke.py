"""The kill-storm harness end to end with tiny parameters: its own dev server, chaos LLM
and worker subprocess, three SIGKILLs, then the audit table; and the same on PostgreSQL
with two workers and a database restart. It asserts that the run happened and reported,
not that the targets hold (the full-size run does: docs/benchmarks.md)."""

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


TINY = ["--saves", "12", "--agents", "2", "--dream-every", "2", "--drain-cap", "30", "--seed", "5"]


def _storm(*args: str) -> str:
    run = subprocess.run(
        [sys.executable, str(SCRIPT), *TINY, *args], capture_output=True, text=True, timeout=600
    )
    out = run.stdout
    assert run.returncode in (0, 1), f"rc {run.returncode}\n{out}\n{run.stderr[-3000:]}"
    return out


def _has(out: str, label: str) -> bool:
    return re.search(rf"^{re.escape(label)}\s", out, re.MULTILINE) is not None


@pytest.mark.slow
def test_killstorm_runs_end_to_end_with_tiny_parameters():
    out = _storm("--kills", "3")
    for label in LABELS:
        assert _has(out, label), f"no {label!r} in\n{out}"
    acked = int(re.search(r"^acked saves\s+(\d+)", out, re.MULTILINE).group(1))
    assert acked >= 1
    kills = int(re.search(r"worker: (\d+) SIGKILLs", out).group(1))
    assert kills >= 3
    assert re.search(r"storm0: \d+ live", out) and re.search(r"storm1: \d+ live", out)
    # MemoryClient takes `entry_id` among its typed options: a retry is the same save.
    assert "retries reuse the entry id: yes" in out


@pytest.mark.slow
def test_killstorm_on_postgres_runs_two_workers_and_restarts_the_database(postgres_cluster):
    # postgres_cluster: only for its rule (CI fails without a server, elsewhere it skips);
    # the storm starts a durable server of its own, which it restarts.
    out = _storm("--backend", "postgres", "--kills", "4")
    labels = [
        label.replace("files without a journal record", "rows without a change-feed record")
        for label in LABELS
    ]
    for label in [*labels, "database restarts mid-storm (crash-like)"]:
        assert _has(out, label), f"no {label!r} in\n{out}"
    assert int(re.search(r"^database restarts mid-storm \(crash-like\)\s+(\d+)", out, re.M)[1]) == 1
    assert re.search(r"^agents served by all 2 workers\s+\d of 2", out, re.MULTILINE), out
    per_worker = re.search(r"SIGKILLs per worker: w0 (\d+), w1 (\d+)", out)
    assert per_worker and int(per_worker[1]) + int(per_worker[2]) >= 4
    assert re.search(r"storm0 w0 \d+ / w1 \d+; storm1 w0 \d+ / w1 \d+", out), out
    assert "retries reuse the entry id: yes" in out
