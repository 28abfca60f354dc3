"""`dreamkeeper dream undo RUN_ID` refuses a malformed run id before it connects to
anything: exit 2 at once, no workflow started. The data directory is given but no
Temporal server is: before, the CLI went on to start an undo workflow (a traversal-shaped
id was then retried by the activity for minutes; a 5,000-character one broke Temporal's
workflow-id limit and exited 1)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamkeeper.cli.main import main

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,127}")  # what a run id may be
MALFORMED = ["..", "", "a/b", "x" * 5_000, "../../etc", "run 1", "_lead"]


@pytest.fixture(autouse=True)
def _nowhere(monkeypatch):
    # Port 9: nothing listens there, so any attempt to connect would fail with exit 1.
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:9")
    monkeypatch.delenv("DREAMKEEPER_URL", raising=False)


def _undo(tmp_path, run_id: str) -> int:
    return main(["--data", str(tmp_path), "--agent", "a1", "dream", "undo", run_id])


@pytest.mark.parametrize("run_id", MALFORMED, ids=lambda r: repr(r[:12]))
def test_a_malformed_run_id_exits_2_before_connecting(tmp_path, capsys, run_id):
    assert _undo(tmp_path, run_id) == 2
    assert "invalid dream run id" in capsys.readouterr().err
    assert not (tmp_path / "agents" / "a1" / "dreams").exists()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.text(max_size=300).filter(lambda s: not RUN_ID.fullmatch(s) and "\x00" not in s))
def test_any_id_outside_the_run_id_shape_exits_2(tmp_path, capsys, run_id):
    assert _undo(tmp_path, run_id) == 2
    capsys.readouterr()
