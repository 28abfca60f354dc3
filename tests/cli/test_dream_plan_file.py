"""`dreamkeeper dream --apply PLAN` reads only a dream plan: anything else is bad
input (exit 2), never a partial plan."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamkeeper.cli.dream import format_plan, read_plan
from dreamkeeper.core.dream_plan import DreamPlan, PlannedMerge
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.stores.files.memory_store import FileMemoryStore


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300))
def test_garbage_is_refused_as_bad_input(tmp_path, data):
    path = tmp_path / "plan.json"
    path.write_bytes(data)
    try:
        plan = read_plan(str(path))
    except InvalidInput:
        return
    assert isinstance(plan, DreamPlan)  # only a valid plan gets through


def test_deep_nesting_is_refused_not_a_crash(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("[" * 100_000)
    with pytest.raises(InvalidInput):
        read_plan(str(path))


def test_a_plan_round_trips_and_prints_its_diff(tmp_path):
    store = FileMemoryStore(tmp_path, "p")
    a = store.create("Trish likes tea.").id
    plan = DreamPlan(
        agent_id="p",
        as_of=datetime(2026, 1, 1, tzinfo=UTC),
        merges=[PlannedMerge(new_id="c" * 12, sources=[a], revisions={a: 1}, content="Tea.")],
    )
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    assert read_plan(str(path)) == plan
    text = format_plan(plan, store)
    assert f"  - {a} r1: Trish likes tea." in text and "  + Tea." in text
    with pytest.raises(InvalidInput):
        read_plan(str(tmp_path / "missing.json"))
