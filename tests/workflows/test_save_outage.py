"""A save that outlives a database outage says what is failing — the database, named,
with PostgreSQL's cause — not "no worker answered ... is `dreamkeeper worker` running?"
while the worker runs and retries. Once the database is back, the same save completes.
Real Temporal, a real worker, a real PostgreSQL server stopped and started again."""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.worker import Worker

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.client.pending import worker_took
from dreamkeeper.core.errors import DatabaseUnavailable, Unavailable
from dreamkeeper.core.names import claim_workflow_id, save_workflow_id
from dreamkeeper.core.settings import EmbeddingSettings, LLMSettings, StoreSettings
from dreamkeeper.stores.postgres.backend import PostgresBackend
from dreamkeeper.stores.postgres.database import Database, describe
from dreamkeeper.stores.postgres.migrations import upgrade
from dreamkeeper.worker.claim import claim_task_queue
from dreamkeeper.worker.temporal_worker import build_worker
from tests.harness.postgres import PostgresCluster, find_bindir

ENTRY = "0123456789ab"


def _agent() -> str:
    """An agent of this test alone: the dev server is the session's, and a save of the
    same agent and entry id left running by another test (one with no worker) would be
    the run this save attaches to, on a queue no worker here polls."""
    return f"outage-{uuid.uuid4().hex[:8]}"


def _upgraded(cluster: PostgresCluster, name: str) -> str:
    """A new database of `cluster` with Dreamkeeper's schema: its URL."""
    url = cluster.create_database(name)
    db = Database(url, max_size=1)
    upgrade(db)
    db.close()
    return url


@pytest.fixture
def cluster():
    """Our own server: stopping it disturbs no other test."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries")  # the session fixture reports it in CI
    cluster = PostgresCluster(bindir)
    cluster.start()
    yield cluster
    cluster.destroy()


async def test_a_save_that_outlives_a_database_outage_names_the_database_not_the_worker(
    temporal_env, tmp_path, cluster
):
    agent = _agent()
    url = _upgraded(cluster, "dk_save_outage")
    settings = StoreSettings(data_dir=tmp_path, database_url=url)
    queue = f"outage-{uuid.uuid4().hex[:6]}"
    executor = ThreadPoolExecutor(max_workers=4)
    worker = build_worker(
        temporal_env.client,
        settings,
        task_queue=queue,
        executor=executor,
        llm=LLMSettings(),
        embeddings=EmbeddingSettings(),
    )
    running = asyncio.create_task(worker.run())
    # As `dreamkeeper worker` does: the claim tells a client what the queue serves (and
    # that it seals nothing), so starting a save needs no round trip to the database.
    await claim_task_queue(temporal_env.client, queue, PostgresBackend(url).identity())
    try:
        # Long enough for the worker to take the save's task on a loaded machine: with no
        # worker holding it yet, the answer is "no worker answered" (the other test).
        memory = MemoryClient(temporal_env.client, settings, queue, save_timeout=20)
        first = await memory.save_memory(agent, "The deploy window is Tuesday 14:00.")
        cluster.stop()
        with pytest.raises(DatabaseUnavailable) as stuck:
            await memory.save_memory(agent, "Release notes go out Friday.", entry_id=ENTRY)
        message = str(stuck.value)
        # Whether the worker had its task at that moment or not (a loaded dev server may
        # not say in time), the database is what is named.
        assert re.search(
            r"took it and keeps retrying its first step, which needs the database: "
            r"|: the database it needs does not answer: ",
            message,
        )
        assert f"cannot connect to the database at {describe(url)}: Connection refused" in message
        assert "is `dreamkeeper worker` running?" not in message
        assert f"entry_id={ENTRY!r}" in message
        cluster.start()  # the worker was never restarted: it retries, and the save lands
        patient = MemoryClient(temporal_env.client, settings, queue, save_timeout=120)
        ack = await patient.save_memory(agent, "Release notes go out Friday.", entry_id=ENTRY)
        assert ack.entry_id == ENTRY
        stored = PostgresBackend(url).memory(agent).get(ENTRY)
        assert stored is not None and stored.content == "Release notes go out Friday."
        for entry_id in (first.entry_id, ENTRY):  # both runs finish, the outage behind them
            handle = temporal_env.client.get_workflow_handle(save_workflow_id(agent, entry_id))
            await handle.result()
    finally:
        await temporal_env.client.get_workflow_handle(claim_workflow_id(queue)).terminate()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(worker.shutdown(), timeout=60)
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await running
        executor.shutdown(wait=False, cancel_futures=True)


async def test_with_no_worker_and_no_database_the_save_names_the_database(
    temporal_env, tmp_path, cluster
):
    agent = _agent()
    url = _upgraded(cluster, "dk_nobody")
    settings = StoreSettings(data_dir=tmp_path, database_url=url)
    queue = f"nobody-{uuid.uuid4().hex[:6]}"
    await claim_task_queue(temporal_env.client, queue, PostgresBackend(url).identity())
    memory = MemoryClient(temporal_env.client, settings, queue, save_timeout=2)
    cluster.stop()
    try:
        with pytest.raises(DatabaseUnavailable) as stuck:
            await memory.save_memory(agent, "A fact nobody persists yet.", entry_id=ENTRY)
        message = str(stuck.value)
        assert ": the database it needs does not answer: " in message
        assert f"cannot connect to the database at {describe(url)}: Connection refused" in message
        assert f"a worker on task queue {queue!r} takes it" in message
        assert "is `dreamkeeper worker` running?" not in message
    finally:
        await temporal_env.client.get_workflow_handle(claim_workflow_id(queue)).terminate()
        with contextlib.suppress(Exception):
            await temporal_env.client.get_workflow_handle(
                save_workflow_id(agent, ENTRY)
            ).terminate()


async def test_with_no_worker_the_save_still_says_no_worker_answered(temporal_env, database_url):
    agent = _agent()
    settings = StoreSettings(database_url=database_url)
    memory = MemoryClient(
        temporal_env.client, settings, f"nobody-{uuid.uuid4().hex[:6]}", save_timeout=2
    )
    with pytest.raises(Unavailable) as queued:
        await memory.save_memory(agent, "A fact nobody persists yet.", entry_id=ENTRY)
    await temporal_env.client.get_workflow_handle(save_workflow_id(agent, ENTRY)).terminate()
    assert not isinstance(queued.value, DatabaseUnavailable)
    assert "no worker answered within 2s" in str(queued.value)
    assert "is `dreamkeeper worker` running?" in str(queued.value)


@workflow.defn(sandboxed=False)
class _WaitsForASignal:
    """A run whose first task a worker completes, after which it holds no task: what
    Temporal shows between two heartbeats of a worker's task that retries a local
    activity."""

    def __init__(self) -> None:
        self.released = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.released)

    @workflow.signal
    def release(self) -> None:
        self.released = True


async def test_a_worker_that_handed_its_task_back_still_took_the_workflow(temporal_env):
    client = temporal_env.client
    polled, unpolled = f"took-{uuid.uuid4().hex[:6]}", f"nobody-{uuid.uuid4().hex[:6]}"
    async with Worker(client, task_queue=polled, workflows=[_WaitsForASignal]):
        handle = await client.start_workflow(
            _WaitsForASignal.run, id=f"took-{uuid.uuid4().hex}", task_queue=polled
        )
        while EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED not in [
            event.event_type async for event in handle.fetch_history_events()
        ]:
            await asyncio.sleep(0.05)
    raw = (await handle.describe()).raw_description
    assert not raw.HasField("pending_workflow_task")  # no task held: the snapshot says no
    assert await worker_took(client, handle.id)
    never = await client.start_workflow(
        _WaitsForASignal.run, id=f"nobody-{uuid.uuid4().hex}", task_queue=unpolled
    )
    assert not await worker_took(client, never.id)
    for started in (handle, never):
        await started.terminate()
