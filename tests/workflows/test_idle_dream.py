"""The idle check: a cycle runs only the passes that have work, and says which it skipped."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy

from dreamkeeper.core.dream_payloads import DreamInput, DreamResult
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.conversation.conversation_log import ConversationLog
from dreamkeeper.workflows.dream import Dream

T0 = datetime(2026, 9, 1, 8, 0, tzinfo=UTC)
EVERY_PASS = ["purge", "embedding backfill", "consolidation", "preference inference", "decay"]


@pytest.fixture(params=["file", "postgres"])
def backend(request) -> str:
    """The worker's backend (the `worker` fixture reads this parameter)."""
    return str(request.param)


def _store(settings: StoreSettings, agent: str, clock=lambda: T0):  # noqa: ANN001, ANN202
    return open_backend(settings).memory(agent, clock=clock)


async def _steps(handle: WorkflowHandle) -> tuple[list[str], list[str]]:
    """The child workflow types and activity types the cycle's history scheduled."""
    children, activities = [], []
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            attrs = event.start_child_workflow_execution_initiated_event_attributes
            children.append(attrs.workflow_type.name)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activities.append(event.activity_task_scheduled_event_attributes.activity_type.name)
    return children, activities


async def _dream(client: Client, queue: str, agent: str) -> tuple[DreamResult, WorkflowHandle]:
    handle = await client.start_workflow(
        Dream.run,
        DreamInput(agent_id=agent, as_of=T0 + timedelta(days=1)),
        id=f"dream-{agent}",
        task_queue=queue,
        result_type=DreamResult,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    )
    return await handle.result(), handle


async def test_an_idle_agent_costs_one_activity_and_no_child_workflow(worker, backend):
    client, queue, settings = worker
    agent = f"idle-{uuid.uuid4().hex[:6]}"
    store = _store(settings, agent)
    store.create("The user lives in Chicago.", category="places")
    store.create("The user's dog is called Rex.", category="people")
    result, handle = await _dream(client, queue, agent)
    assert result.idle == EVERY_PASS
    assert await _steps(handle) == ([], ["dream_work"])
    assert result.consolidation.total == 2 and result.preferences.skipped is not None
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert meta.current_details.endswith(
        "nothing to do for purge, embedding backfill, consolidation, preference inference, "
        "decay (skipped)"
    )
    assert len(_store(settings, agent).entries()) == 2


def _turns(settings: StoreSettings, agent: str) -> None:
    _store(settings, agent).create("A note.")
    documents = _store(settings, agent).documents
    ConversationLog(documents).append("s1", "user", "Please stop using emoji.", T0)


def _archive_past_retention(settings: StoreSettings, agent: str) -> None:
    old = _store(settings, agent, clock=lambda: T0 - timedelta(days=200))
    gone = old.create("An old note about a meeting room.", importance=0.3)
    old.archive(gone.id, "deleted by agent tool")


def _decay_due(settings: StoreSettings, agent: str) -> None:
    old = _store(settings, agent, clock=lambda: T0 - timedelta(days=60))
    old.create("The user's desk is on the third floor.", importance=0.5)


def _exact_duplicate(settings: StoreSettings, agent: str) -> None:
    store = _store(settings, agent)
    store.create("The user lives in Chicago.", category="places")
    store.create("The user  lives in Chicago.", category="places")


@pytest.mark.parametrize(
    ("make_work", "child", "step"),
    [
        (_turns, "PreferenceInference", "preference inference"),
        (_archive_past_retention, "ArchivePurge", "purge"),
        (_decay_due, "ImportanceDecay", "decay"),
        (_exact_duplicate, "Consolidation", "consolidation"),
    ],
    ids=["turns", "purge", "decay", "duplicates"],
)
async def test_only_the_passes_with_work_run(worker, backend, make_work, child, step):
    client, queue, settings = worker
    agent = f"work-{uuid.uuid4().hex[:6]}"
    make_work(settings, agent)
    result, handle = await _dream(client, queue, agent)
    children, activities = await _steps(handle)
    assert children == [child]
    assert activities == ["dream_work"]  # the backfill too is skipped without a model
    assert result.idle == [p for p in EVERY_PASS if p != step]
    # The pass did its work, so the next cycle finds the agent idle.
    again, handle = await _dream(client, queue, agent)
    assert again.idle == EVERY_PASS and await _steps(handle) == ([], ["dream_work"])
