"""Every committed history replays on the current workflow code.

The histories under `histories/` were captured by `tests/replay/capture.py` from earlier
versions; a running workflow of any of those versions must be able to continue on this
code. A change that would break them (a new activity call, a reordered step) fails here
and needs a `workflow.patched` guard. A workflow type with no history fails too, so a new
workflow arrives with a captured history.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from dreamkeeper.worker.temporal_worker import WORKFLOWS

HISTORIES = Path(__file__).parent / "histories"
FILES = sorted(HISTORIES.glob("*/*.json"))


def test_every_workflow_type_has_a_committed_history():
    names = {getattr(w, "__temporal_workflow_definition").name for w in WORKFLOWS}
    captured = {path.parent.name for path in FILES}
    assert names - captured == set(), "capture one with: python -m tests.replay.capture"


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
async def test_a_committed_history_replays_on_the_current_code(path: Path):
    document = json.loads(path.read_text())
    history = WorkflowHistory.from_json(document.pop("workflowId"), document)
    replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path}: {result.replay_failure}"
