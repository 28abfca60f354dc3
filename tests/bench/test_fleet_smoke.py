"""The fleet bench end to end, small: 100 agents of 20 memories (and its probe agents)
written through the bulk path into a durable cluster of its own, 2 `dreamkeeper worker`
processes and `dreamkeeper serve` on a dev server, a few seconds of load over HTTP, the
probes (cold opens, forgets over HTTP and with the CLI), a `/metrics` scrape. It asserts
that the run worked and reported — no failed request, every figure printed, the database
holding what was loaded, sealed — never how fast (the full run's figures are in
docs/scale.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "fleet.py"
ROWS = [
    "context p50/p95/p99 ms",
    "search p50/p95/p99 ms",
    "save p50/p95/p99 ms",
    "search p50/p95 ms, one at a time",
    "context p50/p95/p99 ms, paced (open loop)",
    "search p50/p95/p99 ms, paced (open loop)",
    "paced: requests/s asked; recalls/s answered",
    "recalls/s",
    "saves/s",
    "cold open p50/max ms",
    "forget whole agent, HTTP, max s",
    "forget whole agent, CLI s",
    "serve peak RSS MB",
    "worker-0 peak RSS MB",
    "worker-1 peak RSS MB",
    "database MB",
    "connections serve/w0/w1 (busy)",
    "locks, most",
    "errors",
    "out of shared memory / too many connections",
]
TARGETS = [
    "context p99 at 100 <= 1.5x p99 at 100",
    "search p99 at 100 <= 1.5x p99 at 100",
    "search p50 <= 20 ms at 100 (closed loop)",
    "search p50 <= 20 ms at 100 (paced)",
    ">= 150 recalls/s at 100",
    "whole-agent forget <= 2 s at 100",
    "no error",
    "no lock-table or connection exhaustion",
]


@pytest.fixture
def kept_dir():
    # Under /tmp and open to traverse: as root the cluster runs as `postgres`, which must
    # reach its directory inside (pytest's tmp_path is private to root).
    path = Path(tempfile.mkdtemp(prefix="dk-fleet-smoke-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )


def _table(out: str) -> dict[str, list[str]]:
    rows = {}
    for line in out.splitlines():
        if line.startswith("| ") and not line.startswith("| figure"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.slow
def test_the_fleet_bench_runs_small_and_reports_every_figure(postgres_cluster, kept_dir):
    # postgres_cluster: only for its rule (CI fails without a server, elsewhere it skips);
    # the bench starts a durable cluster of its own under kept_dir.
    args = ["--agents", "100", "--memories", "20", "--seconds", "4", "--warmup", "1"]
    args += ["--sequential-seconds", "2", "--paced-seconds", "3"]
    args += ["--data-dir", str(kept_dir)]
    run = _bench(*args)
    out = run.stdout
    assert run.returncode == 0, f"rc {run.returncode}\n{out}\n{run.stderr[-3000:]}"
    assert "build fleet_100x20: 116 agents written" in out
    assert re.search(
        r"^data check: 116 agents of 116 loaded; fewest memories of an agent \d+ of 20; "
        r"([\d,]+) of \1 entries sealed: holds what was loaded$",
        out,
        re.MULTILINE,
    ), out
    assert re.search(r"^  errors: 0 \(", out, re.MULTILINE), out
    table = _table(out)
    for label in ROWS:
        cells = table.get(label)
        assert cells is not None, f"no row {label!r} in\n{out}"
        assert cells[0] and cells[0] != "-" and "nan" not in cells[0], (label, cells)
    for label in TARGETS:
        assert f"target: {label}" in out, f"no target line {label!r} in\n{out}"
    # The questions are made of the agent's own memories: a recall finds something.
    found = re.search(r"recalls that found a memory: (\d+)%", out)
    assert found and int(found[1]) >= 90, out
    assert re.search(r"^GET /metrics: [\d.]+ s \(status 200\)", out, re.MULTILINE), out
    assert "fleet-serve" in out and "fleet-worker-0" in out and "fleet-worker-1" in out

    # The data is kept: a second run builds nothing.
    again = _bench(*args, "--build-only")
    assert again.returncode == 0, f"{again.stdout}\n{again.stderr[-3000:]}"
    assert "build fleet_100x20: already built" in again.stdout


@pytest.mark.slow
def test_the_fleet_bench_without_sealing_keeps_plaintext_databases_of_its_own(
    postgres_cluster, kept_dir
):
    args = ["--agents", "20", "--memories", "20", "--probes", "4", "--seconds", "2"]
    args += ["--warmup", "1", "--sequential-seconds", "1", "--paced-share", "0"]
    args += ["--data-dir", str(kept_dir)]
    run = _bench(*args, "--no-seal")
    out = run.stdout
    assert run.returncode == 0, f"rc {run.returncode}\n{out}\n{run.stderr[-3000:]}"
    assert "NOT sealed (--no-seal)" in out
    assert "build fleet_20x20_plain: 24 agents written" in out
    assert re.search(
        r"^data check: 24 agents of 24 loaded; .*; 0 of [\d,]+ entries sealed: holds what",
        out,
        re.MULTILINE,
    ), out
    assert not (kept_dir / "plain" / "keyring").exists()
