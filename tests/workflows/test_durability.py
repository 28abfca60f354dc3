"""Durability through the worker: races with a dream, a killed worker's failover, the
store identity, a worker that cannot write, a client with no worker (invariants 13, 19)."""

from __future__ import annotations

import asyncio
import errno
import json
import signal
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType, TimeoutType

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.core.dream_payloads import ConsolidationInput, ConsolidationResult
from dreamkeeper.core.errors import NotFound, StoreMismatch, Unavailable
from dreamkeeper.core.names import save_workflow_id
from dreamkeeper.core.payloads import RetireInput, RetireResult, SaveResult
from dreamkeeper.core.settings import LLMSettings, StoreSettings
from dreamkeeper.policies.coverage import find_missing_specifics
from dreamkeeper.stores.contract.identity import StoreIdentity
from dreamkeeper.stores.files import agent_files as files
from dreamkeeper.stores.files.identity import ensure_identity
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.testing.scripted_llm import Reply, ScriptedLLM
from dreamkeeper.worker.claim import claim_task_queue
from dreamkeeper.worker.temporal_worker import build_worker, worker_activities
from dreamkeeper.workflows.consolidation import Consolidation
from tests.workflows.subprocess_worker import spawn_worker

NOTE = "Trish Roberts of PWOP Productions gave her number, +1 386-299-4605."
AS_OF = datetime(2026, 7, 1, tzinfo=UTC)


def _agent() -> str:
    return f"d-{uuid.uuid4().hex[:6]}"


def _live_copy_covers(store: FileMemoryStore, text: str) -> bool:
    return any(not find_missing_specifics([text], e.content) for e in store.entries())


async def test_a_dream_fold_during_enrichment_leaves_the_memory_live(temporal_env, tmp_path):
    """The storm's loss: the fact repeats the note word for word, a dream folds it into
    the original, then the save retired the original into the folded fact — both
    archived. Now the dream leaves a save in flight alone, and the retirement checks
    under the store lock that the fact is live."""
    llm = ScriptedLLM()
    fact = {"content": NOTE, "category": "people", "tags": [], "importance": 0.6}
    llm.replies.append(Reply(json.dumps([fact])))
    llm.default = Reply(json.dumps({"toDelete": [], "toSave": []}))
    queue, settings = f"race-{uuid.uuid4().hex[:6]}", StoreSettings(data_dir=tmp_path)
    entered, release = threading.Event(), threading.Event()
    activities = worker_activities(settings, LLMSettings(base_url=llm.base_url))
    real = next(a for a in activities if getattr(a, "__name__", "") == "retire_original")

    @activity.defn(name="retire_original")
    def paused(inp: RetireInput) -> RetireResult:
        entered.set()
        release.wait(60)
        return real(inp)

    activities = [a for a in activities if a is not real] + [paused]
    agent = _agent()
    try:
        with ThreadPoolExecutor(4) as pool:
            async with build_worker(
                temporal_env.client,
                settings,
                task_queue=queue,
                executor=pool,
                activities=activities,
            ):
                memory = MemoryClient(temporal_env.client, settings, queue)
                ack = await memory.save_memory(agent, NOTE, category="people")
                assert await asyncio.to_thread(entered.wait, 30), "retirement never reached"
                store = FileMemoryStore(tmp_path, agent)
                assert len(store.entries()) == 2  # the original and its identical fact
                dream = await temporal_env.client.execute_workflow(
                    Consolidation.run,
                    ConsolidationInput(agent_id=agent, as_of=AS_OF),
                    id=f"race-dream-{agent}",
                    task_queue=queue,
                    result_type=ConsolidationResult,
                )
                assert dream.folded == 0 and dream.held_back == 1  # the save in flight
                release.set()
                result = await temporal_env.client.get_workflow_handle(
                    save_workflow_id(agent, ack.entry_id), result_type=SaveResult
                ).result()
    finally:
        release.set()
        llm.close()
    after = FileMemoryStore(tmp_path, agent)
    assert result.outcome == "enriched"
    assert _live_copy_covers(after, NOTE)
    assert after.get(ack.entry_id).retired_into == [result.replacements[0].entry_id]


@pytest.mark.slow  # waits out a heartbeat timeout
async def test_a_killed_worker_s_dream_step_resumes_after_a_heartbeat_timeout(
    temporal_env, tmp_path
):
    """A store step that dies with its worker is retried elsewhere once its heartbeat
    stops (seconds), not after its start-to-close timeout (minutes)."""
    address = temporal_env.client.service_client.config.target_host
    queue, agent = f"hb-{uuid.uuid4().hex[:6]}", _agent()
    store = FileMemoryStore(tmp_path, agent)
    for _ in range(2):
        store.create("The Blazor class runs on Fridays at 12:30.", category="events")
    llm = ScriptedLLM(default=Reply(json.dumps({"toDelete": [], "toSave": []})))
    first = spawn_worker(address, queue, tmp_path, llm, freeze="fold_exact_duplicates")
    second = None
    try:
        handle = await temporal_env.client.start_workflow(
            Consolidation.run,
            ConsolidationInput(agent_id=agent, as_of=AS_OF),
            id=f"hb-{agent}",
            task_queue=queue,
            result_type=ConsolidationResult,
        )
        line = await asyncio.wait_for(asyncio.to_thread(first.stdout.readline), timeout=60)
        assert line.strip() == "frozen"
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        second = spawn_worker(address, queue, tmp_path, llm)
        result = await asyncio.wait_for(handle.result(), timeout=180)
        assert result.folded == 1
        timeouts = [
            e.activity_task_timed_out_event_attributes.failure.timeout_failure_info.timeout_type
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT
        ]
        assert timeouts in ([], [TimeoutType.TIMEOUT_TYPE_HEARTBEAT])
        attempts = [
            e.activity_task_started_event_attributes.attempt
            async for e in handle.fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        ]
        assert max(attempts) >= 2  # the fold ran again on the second worker
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        llm.close()


async def test_a_second_store_cannot_claim_a_task_queue(temporal_env, tmp_path):
    queue = f"claim-{uuid.uuid4().hex[:6]}"
    mine = ensure_identity(tmp_path / "a")
    assert await claim_task_queue(temporal_env.client, queue, mine) == "claimed"
    assert await claim_task_queue(temporal_env.client, queue, mine) == "already held by this store"
    other = ensure_identity(tmp_path / "b")
    with pytest.raises(StoreMismatch) as refused:
        await claim_task_queue(temporal_env.client, queue, other)
    assert str(tmp_path / "a") in str(refused.value) and str(tmp_path / "b") in str(refused.value)
    assert await claim_task_queue(temporal_env.client, queue, other, reclaim=True) == "reclaimed"
    await temporal_env.client.get_workflow_handle(f"dreamkeeper-store-{queue}").terminate()


async def test_a_client_on_another_data_directory_fails_loudly(worker, tmp_path):
    client, queue, settings = worker
    await claim_task_queue(client, queue, ensure_identity(settings.data_dir))
    try:
        elsewhere = StoreSettings(data_dir=tmp_path / "elsewhere")
        with pytest.raises(StoreMismatch) as refused:
            await MemoryClient(client, elsewhere, queue).check_store()
        message = str(refused.value)
        assert str(settings.data_dir) in message and "elsewhere" in message
        # And a save that reaches a worker of another store is refused by the worker.
        stranger = MemoryClient(client, elsewhere, queue)
        stranger._identity = StoreIdentity("0" * 16, "somewhere:/else")
        with pytest.raises(StoreMismatch, match="somewhere"):
            await stranger.save_memory(_agent(), "User lives in Chicago")
    finally:
        await client.get_workflow_handle(f"dreamkeeper-store-{queue}").terminate()


async def test_an_unknown_id_gets_the_answer_direct_gives_without_a_workflow(memory):
    agent = _agent()
    FileMemoryStore(memory.settings.data_dir, agent).create("User lives in Chicago")
    ensure_identity(memory.settings.data_dir)
    memory._identity = ensure_identity(memory.settings.data_dir)
    with pytest.raises(NotFound, match="no memory with id 0123456789ab"):
        await memory.delete_memory(agent, "0123456789ab")


async def test_a_save_with_no_worker_polling_fails_in_bounded_time_naming_its_id(
    temporal_env, tmp_path
):
    memory = MemoryClient(
        temporal_env.client,
        StoreSettings(data_dir=tmp_path),
        f"nobody-{uuid.uuid4().hex[:6]}",
        save_timeout=2,
    )
    with pytest.raises(Unavailable) as queued:
        await memory.save_memory("a1", "User lives in Chicago", entry_id="0123456789ab")
    # Not left running on a queue nobody polls: a later test's save of the same agent and
    # id on the session's dev server would attach to it.
    await temporal_env.client.get_workflow_handle(
        save_workflow_id("a1", "0123456789ab")
    ).terminate()
    message = str(queued.value)
    assert (
        "0123456789ab" in message and "queued" in message and "completes when a worker" in message
    )


async def test_a_save_with_no_worker_gives_up_at_the_default_timeout_and_completes_later(
    temporal_env, tmp_path
):
    """At the default DREAMKEEPER_SAVE_TIMEOUT_SECONDS (30) the server answers the
    update's long poll before each attempt's RPC deadline, so a deadline kept only per
    attempt never ran out. The save stays queued: its run completes once a worker polls,
    and a retry with the same id is answered by that run, not a new one."""
    settings = StoreSettings(data_dir=tmp_path)
    queue, agent = f"nobody-{uuid.uuid4().hex[:6]}", _agent()
    memory = MemoryClient(temporal_env.client, settings, queue)
    assert memory.save_timeout == StoreSettings().save_timeout == 30
    with pytest.raises(Unavailable, match="queued but not yet durable") as queued:
        # The margin turns a hang into this test's failure instead of the suite's.
        await asyncio.wait_for(
            memory.save_memory(agent, "User lives in Chicago", entry_id="0123456789ab"),
            timeout=memory.save_timeout + 30,
        )
    assert "completes when a worker polls" in str(queued.value)
    handle = temporal_env.client.get_workflow_handle(
        save_workflow_id(agent, "0123456789ab"), result_type=SaveResult
    )
    first = await handle.describe()
    assert first.status.name == "RUNNING"
    with ThreadPoolExecutor(4) as pool:
        async with build_worker(temporal_env.client, settings, task_queue=queue, executor=pool):
            assert (await handle.result()).entry_id == "0123456789ab"
            again = await memory.save_memory(
                agent, "User lives in Chicago", entry_id="0123456789ab"
            )
    assert again.entry_id == "0123456789ab" and again.already_done
    assert (await handle.describe()).run_id == first.run_id  # still the one run
    assert FileMemoryStore(tmp_path, agent).require("0123456789ab").content == (
        "User lives in Chicago"
    )


async def test_a_store_that_cannot_be_written_fails_for_good_with_the_reason(
    temporal_env, tmp_path, monkeypatch
):
    def read_only(dfd, name, data, *, durable):
        raise OSError(errno.EROFS, "Read-only file system", name)

    monkeypatch.setattr(files, "_replace_at", read_only)  # every atomic write goes here
    queue, settings = f"ro-{uuid.uuid4().hex[:6]}", StoreSettings(data_dir=tmp_path)
    with ThreadPoolExecutor(4) as pool:
        async with build_worker(temporal_env.client, settings, task_queue=queue, executor=pool):
            memory = MemoryClient(temporal_env.client, settings, queue, save_timeout=60)
            with pytest.raises(Unavailable, match="cannot be written"):
                await memory.save_memory(_agent(), "User lives in Chicago")


async def test_a_save_that_joined_a_run_on_another_queue_names_that_queue(temporal_env, tmp_path):
    """A save attaches to the run already under its id wherever it was started (here by
    a client whose agent was sharded to another queue): waiting on it, the client names
    that queue, not its own, where no worker will ever see the run."""
    settings = StoreSettings(data_dir=tmp_path)
    agent, entry = _agent(), "0123456789ab"
    before, after = f"before-{uuid.uuid4().hex[:6]}", f"after-{uuid.uuid4().hex[:6]}"
    first = MemoryClient(temporal_env.client, settings, before, save_timeout=1)
    with pytest.raises(Unavailable):
        await first.save_memory(agent, "User lives in Chicago", entry_id=entry)
    second = MemoryClient(temporal_env.client, settings, after, save_timeout=1)
    try:
        with pytest.raises(Unavailable) as queued:
            await second.save_memory(agent, "User lives in Chicago", entry_id=entry)
    finally:
        await temporal_env.client.get_workflow_handle(save_workflow_id(agent, entry)).terminate()
    message = str(queued.value)
    assert f"started earlier on task queue {before!r}, not on {after!r}" in message
    assert "no worker answered" not in message
