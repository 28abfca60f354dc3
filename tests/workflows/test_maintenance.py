"""Purge, decay and Dream through a real worker on a real dev server."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from dreamkeeper.core.dream_payloads import DreamInput
from dreamkeeper.core.names import dream_workflow_id
from dreamkeeper.core.payloads import DecayInput, PurgeInput
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.workflows.dream import Dream
from dreamkeeper.workflows.maintenance import ArchivePurge, ImportanceDecay

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _wid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_decay_with_the_same_as_of_twice_is_applied_once(worker):
    client, queue, settings = worker
    store = FileMemoryStore(settings.data_dir, "a1", clock=lambda: T0)
    entry = store.create("a fact that fades", importance=0.9)
    as_of = T0 + timedelta(days=75)
    results = [
        await client.execute_workflow(
            ImportanceDecay.run,
            DecayInput(agent_id="a1", as_of=as_of),
            id=_wid("decay-a1"),
            task_queue=queue,
        )
        for _ in range(2)
    ]
    assert [r.decayed for r in results] == [1, 0]
    after = FileMemoryStore(settings.data_dir, "a1").get(entry.id)
    assert abs(after.importance_score - 0.9 * 0.5) < 1e-9
    assert after.updated_at == as_of
    decays = [r for r in store.journal.read_all() if r.action is JournalAction.DECAYED]
    assert len(decays) == 1


async def test_purge_respects_retention_and_the_floor(worker):
    client, queue, settings = worker
    clock = {"now": T0}
    store = FileMemoryStore(settings.data_dir, "a2", clock=lambda: clock["now"])
    low = store.create("old low value", importance=0.2)
    high = store.create("old high value", importance=0.95)
    recent = store.create("recent", importance=0.2)
    store.archive(low.id, "deleted by agent tool")
    store.archive(high.id, "deleted by agent tool")
    clock["now"] = T0 + timedelta(days=80)
    store.archive(recent.id, "deleted by agent tool")
    result = await client.execute_workflow(
        ArchivePurge.run,
        PurgeInput(agent_id="a2", as_of=T0 + timedelta(days=100)),
        id=_wid("purge-a2"),
        task_queue=queue,
    )
    assert result.purged == [low.id]
    assert result.kept_high_value == [high.id] and result.kept_in_retention == 1
    fresh = FileMemoryStore(settings.data_dir, "a2")
    assert fresh.get(low.id) is None and fresh.get(high.id) and fresh.get(recent.id)


async def test_dream_runs_purge_then_decay_with_one_as_of(worker):
    client, queue, settings = worker
    store = FileMemoryStore(settings.data_dir, "a3", clock=lambda: T0)
    gone = store.create("archived long ago", importance=0.2)
    store.archive(gone.id, "deleted by agent tool")
    fading = store.create("fading fact", importance=0.8)
    as_of = T0 + timedelta(days=120)
    handle = await client.start_workflow(
        Dream.run,
        DreamInput(agent_id="a3", as_of=as_of),
        id=dream_workflow_id("a3") + uuid.uuid4().hex[:4],
        task_queue=queue,
    )
    result = await handle.result()
    assert result.purge.purged == [gone.id] and result.decay.decayed == 1
    assert result.as_of == as_of == result.purge.as_of == result.decay.as_of
    desc = await handle.describe()
    assert desc.status.name == "COMPLETED"
    assert FileMemoryStore(settings.data_dir, "a3").get(fading.id).importance_score < 0.8


async def test_bad_agent_id_fails_without_retrying_forever(worker):
    import pytest
    from temporalio.client import WorkflowFailureError

    client, queue, _ = worker
    with pytest.raises(WorkflowFailureError) as failure:
        await client.execute_workflow(
            ImportanceDecay.run,
            DecayInput(agent_id="../etc", as_of=T0),
            id=_wid("decay-bad"),
            task_queue=queue,
        )
    assert "invalid agent id" in str(failure.value.cause.cause)
