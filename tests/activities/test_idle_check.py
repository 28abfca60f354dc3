"""The idle check activity (`dream_work`) on both backends: an agent whose idle mark
holds is answered without its store being opened; any change opens and counts it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dreamkeeper.activities.idle import IdleCheckActivities
from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.dream_payloads import WorkInput
from dreamkeeper.core.settings import DEFAULT_FLOOR, DecayParams, LLMSettings
from dreamkeeper.stores.contract.backend import StoreBackend
from dreamkeeper.stores.conversation.conversation_log import ConversationLog
from dreamkeeper.stores.files.backend import FileBackend
from dreamkeeper.stores.postgres.backend import PostgresBackend

T0 = datetime(2026, 9, 1, 8, 0, tzinfo=UTC)
AGENTS = ["a1", "a2", "a3"]


@pytest.fixture(params=["file", "postgres"])
def backend(request, tmp_path) -> StoreBackend:
    if request.param == "file":
        return FileBackend(tmp_path)
    return PostgresBackend(request.getfixturevalue("database_url"))


def _check(run, backend: StoreBackend, agents=AGENTS, as_of=T0, *, store_id=None):
    """One check as a worker runs it, on a worker just started (no store open yet):
    the agents found idle, and the agents whose stores it opened."""
    registry = StoreRegistry(backend)
    idle = IdleCheckActivities(
        registry,
        LLMSettings(),
        retention=timedelta(days=90),
        decay=DecayParams(),
        floor=DEFAULT_FLOOR,
    )
    got = run(idle.dream_work, WorkInput(agent_ids=agents, as_of=as_of, store_id=store_id))
    assert [w.agent_id for w in got.agents] == agents
    return [w.agent_id for w in got.agents if w.idle], sorted(registry.open_agents())


def test_marked_idle_agents_are_answered_without_opening_their_stores(run, backend):
    for agent in AGENTS:
        backend.memory(agent, clock=lambda: T0).create(f"A note of {agent}.")
    assert _check(run, backend) == (AGENTS, AGENTS)  # counted, and marked
    assert _check(run, backend) == (AGENTS, [])  # the marks hold: no store opened
    backend.memory("a1", clock=lambda: T0).create("Another note.")
    ConversationLog(backend.memory("a3").documents).append("s1", "user", "Hi there.", T0)
    assert _check(run, backend) == (["a1", "a2"], ["a1", "a3"])
    # A check for a named store opens it to check it is that store.
    store_id = backend.identity().store_id
    assert _check(run, backend, ["a2"], store_id=store_id) == (["a2"], ["a2"])


def test_a_mark_does_not_outlive_the_time_work_comes_due(run, backend):
    old = backend.memory("a1", clock=lambda: T0 - timedelta(days=20))
    old.create("The user's desk is on the third floor.", importance=0.5)
    assert _check(run, backend, ["a1"]) == (["a1"], ["a1"])
    assert _check(run, backend, ["a1"], T0 + timedelta(days=1)) == (["a1"], [])
    assert _check(run, backend, ["a1"], T0 + timedelta(days=60)) == ([], ["a1"])
