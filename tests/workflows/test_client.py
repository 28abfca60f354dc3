from __future__ import annotations

import _thread
import asyncio
import threading
import uuid

import pytest

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.stores.files.memory_store import FileMemoryStore


async def test_archive_restore_and_rescore_go_through_workflows(memory):
    agent = f"c-{uuid.uuid4().hex[:6]}"
    entry = FileMemoryStore(memory.settings.data_dir, agent).create("User lives in Chicago")
    assert [h.entry.id for h in memory.search_memory(agent, "chicago")] == [entry.id]

    archived = await memory.delete_memory(agent, entry.id)
    assert archived.archived and archived.archive_reason == "deleted by agent tool"
    assert memory.search_memory(agent, "chicago") == []  # the reader saw the worker's write

    restored = await memory.restore_memory(agent, entry.id)
    assert not restored.archived
    rescored = await memory.update_memory_importance(agent, entry.id, 0.9)
    assert rescored.importance == 0.9
    assert memory.search_memory(agent, "chicago")[0].entry.importance_score == 0.9

    # Each mutation left a workflow an operator can read.
    for op in ("archive", "restore", "importance"):
        desc = await memory.client.get_workflow_handle(f"{op}-{agent}-{entry.id}").describe()
        assert desc.status.name == "COMPLETED"


async def test_bad_input_is_refused_before_any_workflow_starts(memory):
    with pytest.raises(InvalidInput):
        await memory.delete_memory("../x", "0123456789ab")
    with pytest.raises(InvalidInput):
        await memory.update_memory_importance("ok", "0123456789ab", 3.0)


async def test_run_dream_waits_for_the_result(memory):
    agent = f"d-{uuid.uuid4().hex[:6]}"
    FileMemoryStore(memory.settings.data_dir, agent).create("a fact")
    result = await memory.run_dream(agent)
    # A fresh fact gives no pass anything to do: the cycle ran its idle check and ended.
    assert result.agent_id == agent and result.cycle_id and "decay" in result.idle


async def test_workflows_carry_agent_and_operation_search_attributes(memory):
    from dreamkeeper.client.attributes import AGENT_ID, MEMORY_OP
    from dreamkeeper.core.names import save_workflow_id

    agent = f"sa-{uuid.uuid4().hex[:6]}"
    ack = await memory.save_memory(agent, "User prefers tea over coffee")
    desc = await memory.client.get_workflow_handle(save_workflow_id(agent, ack.entry_id)).describe()
    assert desc.typed_search_attributes.get(AGENT_ID) == agent
    assert desc.typed_search_attributes.get(MEMORY_OP) == "save"
    summary = await desc.static_summary()
    assert summary and ack.entry_id in summary
    assert "tea" not in summary  # no memory content in what the UI shows


async def test_search_attributes_are_registered_idempotently(temporal_env):
    from dreamkeeper.worker.runtime import ensure_search_attributes

    await ensure_search_attributes(temporal_env.client, "default")
    await ensure_search_attributes(temporal_env.client, "default")


async def test_cli_writes_go_through_the_worker(worker, monkeypatch, capsys):
    import asyncio

    from dreamkeeper.cli.main import main

    client, queue, settings = worker
    monkeypatch.setenv("TEMPORAL_ADDRESS", client.service_client.config.target_host)
    monkeypatch.setenv("DREAMKEEPER_TASK_QUEUE", queue)
    base = ["--data", str(settings.data_dir), "--agent", "cli-wf"]
    # The CLI runs its own event loop; a thread keeps this test's loop (and worker) running.
    assert await asyncio.to_thread(main, [*base, "save", "User drinks green tea"]) == 0
    entry_id = capsys.readouterr().out.strip()
    assert await asyncio.to_thread(main, [*base, "delete", entry_id]) == 0
    assert FileMemoryStore(settings.data_dir, "cli-wf").get(entry_id).is_archived
    desc = await client.get_workflow_handle(f"archive-cli-wf-{entry_id}").describe()
    assert desc.status.name == "COMPLETED"


async def test_connect_takes_the_save_timeout_from_the_settings(worker):
    """DREAMKEEPER_SAVE_TIMEOUT_SECONDS reaches the client (StoreSettings.save_timeout),
    unless connect() is given its own."""
    import dataclasses

    from dreamkeeper.agent.client import MemoryClient
    from dreamkeeper.core.settings import TemporalSettings

    client, queue, settings = worker
    temporal = TemporalSettings(address=client.service_client.config.target_host, task_queue=queue)
    configured = dataclasses.replace(settings, save_timeout=7.5)
    assert (await MemoryClient.connect(configured, temporal)).save_timeout == 7.5
    chosen = await MemoryClient.connect(configured, temporal, save_timeout=3)
    assert chosen.save_timeout == 3


async def test_a_refused_restore_starts_no_workflow(memory):
    """Restoring an entry merged into one still live is refused (without force) before
    any run starts: no failed workflow for a user error."""
    from temporalio.service import RPCError, RPCStatusCode

    from dreamkeeper.core.errors import Conflict
    from dreamkeeper.stores.files.identity import ensure_identity

    agent = f"r-{uuid.uuid4().hex[:6]}"
    store = FileMemoryStore(memory.settings.data_dir, agent)
    merged = store.create("User lives in Chicago")
    into = store.create("User lives in Chicago near the Loop")
    assert store.retire_into(merged.id, [into.id], reason=f"merged into {into.id}").retired
    memory._identity = ensure_identity(memory.settings.data_dir)  # a client on the store
    with pytest.raises(Conflict, match="restore with force"):
        await memory.restore_memory(agent, merged.id)
    with pytest.raises(RPCError) as missing:
        await memory.client.get_workflow_handle(f"restore-{agent}-{merged.id}").describe()
    assert missing.value.status is RPCStatusCode.NOT_FOUND
    statuses = [e.status.name async for e in memory.client.list_workflows(f'AgentId = "{agent}"')]
    assert "FAILED" not in statuses
    assert not (await memory.restore_memory(agent, merged.id, force=True)).archived


async def test_a_callers_mistake_is_not_logged_as_a_worker_fault(memory, caplog):
    """A user error raised in an activity (here: no such entry, asked of the worker by a
    client without the store's files) is benign: the SDK logs it at DEBUG, without the
    warning and traceback an operator would chase."""
    import logging

    from dreamkeeper.core.errors import NotFound

    caplog.set_level(logging.DEBUG, logger="temporalio.activity")
    agent = f"n-{uuid.uuid4().hex[:6]}"
    assert memory._identity is None  # so the client cannot check the id itself
    with pytest.raises(NotFound):
        await memory.delete_memory(agent, "0123456789ab")
    failed = [r for r in caplog.records if r.getMessage().startswith("Completing activity as")]
    assert failed and all(r.levelno == logging.DEBUG for r in failed)


def _contents(memory, agent) -> dict[str, str]:
    return {e.id: e.content for e in FileMemoryStore(memory.settings.data_dir, agent).entries()}


async def test_the_agent_handle_dry_runs_applies_the_plan_and_undoes_it(memory, llm):
    from tests.workflows.test_reversible_dreams import A, B, C, _honest_reply, _seed

    agent = f"h-{uuid.uuid4().hex[:6]}"
    _seed(memory.settings, agent)
    before = _contents(memory, agent)
    llm.replies += [_honest_reply()]
    me = memory.agent(agent)

    dry = await me.dream(dry_run=True)
    assert dry.plan is not None and [m.sources for m in dry.plan.merges] == [[A, B]]
    assert _contents(memory, agent) == before  # a dry run applies nothing

    applied = await me.apply_plan(dry.plan)
    assert applied.merged and applied.cycle_id
    assert not {A, B, C} & set(_contents(memory, agent))

    undone = await me.undo_dream(applied.cycle_id)
    assert undone.found and _contents(memory, agent) == before
    with pytest.raises(InvalidInput, match="the plan is for agent"):
        await memory.agent("someone-else").apply_plan(dry.plan)


async def test_the_agent_handle_reads_archived_entries_like_the_remote_one(memory):
    agent = f"g-{uuid.uuid4().hex[:6]}"
    me = memory.agent(agent)
    entry = FileMemoryStore(memory.settings.data_dir, agent).create("User lives in Chicago")
    await me.delete(entry.id)
    assert me.search("chicago") == []
    assert [h.entry.id for h in me.search("chicago", include_archived=True)] == [entry.id]
    assert [e.id for e in me.archived()] == [entry.id]
    assert me.get(entry.id).is_archived
    with pytest.raises(InvalidInput, match="unknown option 'catgory'"):
        me.search("chicago", catgory="user")  # type: ignore[call-arg]


async def _pending_while(thread_inside: threading.Event, task: asyncio.Task) -> bool:
    """Whether `task` is still waiting after the loop has run everything else it had,
    while the thread is held inside Python."""
    for _ in range(50):
        await asyncio.sleep(0)
    return thread_inside.is_set() and not task.done()


def _foreign_thread_in_python() -> tuple[threading.Event, threading.Event, list[str]]:
    """A thread Python did not start as a `threading.Thread` (as the Temporal SDK's
    runtime threads are not), held inside Python until released."""
    inside, release, left = threading.Event(), threading.Event(), []

    def body() -> None:
        inside.set()
        release.wait()
        left.append("left")

    _thread.start_new_thread(body, ())
    inside.wait()
    return inside, release, left


async def test_closing_waits_until_no_runtime_thread_is_inside_python(worker):
    """A script may end right after `aclose()`: the SDK's thread that handed back the
    last answer must be out of Python by then, or interpreter shutdown aborts (134)."""
    from dreamkeeper.agent.client import MemoryClient

    client, queue, settings = worker
    memory = MemoryClient(client, settings, queue)
    inside, release, left = _foreign_thread_in_python()
    closing = asyncio.create_task(memory.aclose())
    try:
        assert await _pending_while(inside, closing)
    finally:
        release.set()
    await closing
    assert left == ["left"]
    await memory.aclose()  # idempotent


async def test_a_connect_that_fails_closes_what_it_opened(worker, tmp_path, monkeypatch):
    """connect() raising StoreMismatch has closed the embedding client it made and let
    the runtime's threads out of Python; used as `async with`, the client is closed when
    the block ends, however it ends."""
    from dreamkeeper.agent import client as client_module
    from dreamkeeper.agent.client import MemoryClient
    from dreamkeeper.core.errors import StoreMismatch
    from dreamkeeper.core.settings import StoreSettings, TemporalSettings
    from dreamkeeper.stores.files.identity import ensure_identity
    from dreamkeeper.worker.claim import claim_task_queue

    class RecordingEmbedder:
        closed = 0

        def close(self) -> None:
            RecordingEmbedder.closed += 1

    monkeypatch.setattr(client_module, "embedding_client", lambda settings: RecordingEmbedder())
    client, queue, settings = worker
    temporal = TemporalSettings(address=client.service_client.config.target_host, task_queue=queue)
    await claim_task_queue(client, queue, ensure_identity(settings.data_dir))
    try:
        elsewhere = StoreSettings(data_dir=tmp_path / "elsewhere")
        with pytest.raises(StoreMismatch):
            await MemoryClient.connect(elsewhere, temporal)
        assert RecordingEmbedder.closed == 1
        with pytest.raises(StoreMismatch):
            async with MemoryClient.connect(elsewhere, temporal):
                pytest.fail("the block never runs on another store")
        assert RecordingEmbedder.closed == 2

        with pytest.raises(KeyError):
            async with MemoryClient.connect(settings, temporal) as memory:
                assert memory.store_id is not None
                raise KeyError("the caller's own error")
        assert RecordingEmbedder.closed == 3
        async with MemoryClient.connect(settings, temporal) as memory:
            pass
        assert RecordingEmbedder.closed == 4
    finally:
        await client.get_workflow_handle(f"dreamkeeper-store-{queue}").terminate()
