"""A malformed dream run id handed to the undo activity fails it for good at once
(InvalidInput, non-retryable): a bare ValueError was retried until the activity timed
out, with the CLI blocked all that time."""

from __future__ import annotations

import pytest

from dreamkeeper.activities.dream_undo import UndoActivities
from dreamkeeper.core.dream_plan import UndoInput
from dreamkeeper.core.errors import InvalidInput
from tests.activities.conftest import AGENT

MALFORMED = ["..", "", "a/b", "../escape", "x" * 5_000, "run\n1", "-lead", "é"]


@pytest.mark.parametrize("cycle_id", MALFORMED, ids=lambda c: repr(c[:12]))
def test_a_malformed_run_id_fails_the_undo_without_retry(run, registry, tmp_path, cycle_id):
    failure = run.fails(
        UndoActivities(registry).undo_dream, UndoInput(agent_id=AGENT, cycle_id=cycle_id)
    )
    assert failure.type == InvalidInput.failure_type and failure.non_retryable
    assert "invalid dream run id" in failure.message
    assert not (tmp_path / "agents" / AGENT / "dreams").exists()
