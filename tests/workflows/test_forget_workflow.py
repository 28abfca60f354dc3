"""Forget goes through the worker (docs/design.md, invariant 22): a Forget workflow per
request, with the receipt as its result, its history holding nothing of the forgotten
text once it is done, a worker killed inside the store's forgetting finished by the
activity's retry, and no worker at all answered like a save's."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus

from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.client.attributes import AGENT_ID, MEMORY_OP
from dreamkeeper.client.codec import (
    AGENT,
    EncryptionCodec,
    PayloadErased,
    PayloadKeys,
    data_converter,
    generate_key_file,
    open_sealed,
)
from dreamkeeper.core.errors import Conflict, InvalidInput, Unavailable
from dreamkeeper.core.forgetting import ForgetInput, ForgetOutcome, ForgetRequest
from dreamkeeper.core.names import forget_workflow_id, save_workflow_id
from dreamkeeper.core.payloads import SaveResult
from dreamkeeper.core.settings import EmbeddingSettings, LLMSettings, StoreSettings
from dreamkeeper.stores import faults
from dreamkeeper.stores.files.backend import FileBackend
from dreamkeeper.stores.files.conversation_memory import FileConversationStore
from dreamkeeper.stores.files.forgetting import JOURNAL
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.worker.temporal_worker import build_worker, worker_activities
from tests.workflows.test_forgetting import _files_holding, _histories

FACT = "Perpetua Lindqvist hides the cellar key inside the cracked terracotta owl."
PHRASE = "terracotta owl"  # in FACT only
DREAMKEEPER = Path(sys.executable).parent / "dreamkeeper"


@pytest_asyncio.fixture
async def keyed(temporal_env, tmp_path, monkeypatch):
    """A client and an in-process worker on one data directory with a payload key (each
    agent's payloads sealed with its data key), the worker's open stores in a registry
    the test can look into."""
    for name in ("DREAMKEEPER_PAYLOAD_KEY", "DREAMKEEPER_PAYLOAD_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    generate_key_file(tmp_path / "payload-key")
    keys = PayloadKeys.from_env({}, data_dir=tmp_path, key_store=FileBackend(tmp_path).agent_keys)
    address = temporal_env.client.service_client.config.target_host
    client = await Client.connect(address, data_converter=data_converter(keys))
    settings = StoreSettings(data_dir=tmp_path)
    queue = f"forgetwf-{uuid.uuid4().hex[:8]}"
    registry = StoreRegistry(FileBackend(tmp_path))
    activities = worker_activities(settings, LLMSettings(), EmbeddingSettings(), stores=registry)
    with ThreadPoolExecutor(max_workers=4) as executor:
        worker = build_worker(
            client, settings, task_queue=queue, executor=executor, activities=activities
        )
        async with worker:
            yield MemoryClient(client, settings, queue), registry, keys


async def _saved(memory: MemoryClient, agent: str, text: str) -> str:
    ack = await memory.save_memory(agent, text, category="people", source="user")
    await memory.client.get_workflow_handle(
        save_workflow_id(agent, ack.entry_id), result_type=SaveResult
    ).result()
    return ack.entry_id


async def test_a_forget_runs_as_a_workflow_whose_result_is_the_receipt_and_whose_history_keeps_no_text(
    keyed, tmp_path
):
    memory, registry, keys = keyed
    agent = f"fw-{uuid.uuid4().hex[:6]}"
    entry_id = await _saved(memory, agent, FACT)
    keep = await _saved(memory, agent, "The user rows on Sunday mornings.")
    FileConversationStore(tmp_path, agent).add_turn("s1", "user", f"Note: {FACT}")
    assert agent in registry.open_agents()  # the saves opened it on the worker

    receipt = await memory.forget(agent, ForgetRequest(match=PHRASE, request_id="r-1"))
    assert receipt.request_id == "r-1" and receipt.scope == "match"
    assert receipt.entries == [entry_id] and receipt.verified, receipt.verification
    assert receipt.history_keys_destroyed == 1
    assert PHRASE not in receipt.model_dump_json()
    assert _files_holding(tmp_path, PHRASE) == []
    # The worker let go of what it held of the agent; its next use opens it afresh.
    assert agent not in registry.open_agents()
    assert [h.entry.id for h in memory.search_memory(agent, "rows Sunday")] == [keep]

    # A run of its own, on the worker, tagged like every workflow, its result the receipt.
    workflow_id = forget_workflow_id(agent, "r-1")
    handle = memory.client.get_workflow_handle(workflow_id, result_type=ForgetOutcome)
    described = await handle.describe()
    assert described.workflow_type == "Forget"
    assert described.status == WorkflowExecutionStatus.COMPLETED
    assert described.typed_search_attributes.get(AGENT_ID) == agent
    assert described.typed_search_attributes.get(MEMORY_OP) == "forget"
    assert (await handle.result()).receipt == receipt
    history = await handle.fetch_history()
    activities = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    ]
    assert len(activities) == 1  # the store's forgetting, one step

    # Asked again with the same request id: the same run answers, nothing runs again.
    again = await memory.forget(agent, ForgetRequest(match=PHRASE, request_id="r-1"))
    assert again == receipt
    assert (await handle.describe()).run_id == described.run_id
    # The same id for another request (a dry run of it) is refused, not answered wrongly.
    with pytest.raises(Conflict, match="r-1"):
        await memory.forget(agent, ForgetRequest(match=PHRASE, dry_run=True, request_id="r-1"))

    # Its history, read with every key the system still has: the input and the result
    # open (they must, for a worker that replays the run) and hold no content; the
    # request inside, sealed with the agent's data key, opens for nobody.
    codec = data_converter(
        PayloadKeys.from_env({}, data_dir=tmp_path, key_store=FileBackend(tmp_path).agent_keys)
    ).payload_codec
    assert isinstance(codec, EncryptionCodec)
    [payloads] = (await _histories(memory.client, [workflow_id])).values()
    assert payloads
    inputs = []
    for payload in payloads:
        assert AGENT not in payload.metadata  # sealed with the payload key: outlives forget
        opened = codec.decode_sync([payload])[0].data
        assert PHRASE.encode() not in opened and b"cellar" not in opened
        value = json.loads(opened)
        if isinstance(value, dict) and "sealedRequest" in value:
            inputs.append(ForgetInput.model_validate(value))
    assert len(inputs) == 2  # the workflow's input and its activity's
    for inp in inputs:
        with pytest.raises(PayloadErased, match="forgotten"):
            open_sealed(data_converter(keys), inp.sealed_request, ForgetRequest)
    # The receipt in the history is readable, as the record of the forget.
    assert any(b"receipt" in codec.decode_sync([p])[0].data for p in payloads)


async def test_a_whole_agent_forget_leaves_no_key_behind_for_its_own_receipt(keyed, tmp_path):
    """The receipt is sealed with the payload key, so erasing an agent mints it no new
    data key afterwards."""
    memory, _, _ = keyed
    agent = f"fw-{uuid.uuid4().hex[:6]}"
    await _saved(memory, agent, FACT)
    assert (tmp_path / "agent-keys" / f"{agent}.json").exists()
    receipt = await memory.forget(agent, ForgetRequest(whole_agent=True))
    assert receipt.scope == "agent" and receipt.verified and receipt.history_keys_destroyed == 1
    assert not (tmp_path / "agents" / agent).exists()
    assert not (tmp_path / "agent-keys" / f"{agent}.json").exists()


async def test_bad_requests_are_refused_before_any_run_starts(keyed):
    memory, _, _ = keyed
    agent = f"fw-{uuid.uuid4().hex[:6]}"
    entry_id = await _saved(memory, agent, FACT)
    for request in (
        ForgetRequest(),
        ForgetRequest(match="ow", request_id="bad-1"),
        ForgetRequest(ids=["not-an-id"], request_id="bad-2"),
        ForgetRequest(ids=[entry_id], whole_agent=True, request_id="bad-3"),
    ):
        with pytest.raises(InvalidInput):
            await memory.forget(agent, request)
    runs = [
        w
        async for w in memory.client.list_workflows(f"AgentId = '{agent}' AND MemoryOp = 'forget'")
    ]
    assert runs == []
    assert memory.store(agent).get(entry_id) is not None


def _spawn_worker(temporal_env, queue: str, data: Path, **env: str) -> subprocess.Popen:
    """`dreamkeeper worker` on the data directory, as a deployment runs it."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DREAMKEEPER_")}
    environment.update(
        TEMPORAL_ADDRESS=temporal_env.client.service_client.config.target_host,
        DREAMKEEPER_TASK_QUEUE=queue,
        DREAMKEEPER_EMBEDDING_BACKEND="none",
        **env,
    )
    return subprocess.Popen(
        [str(DREAMKEEPER), "--data", str(data), "worker"],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop(worker: subprocess.Popen) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def _pending_requests(data: Path) -> list[str]:
    begun: dict[str, bool] = {}
    for line in (data / JOURNAL).read_text().splitlines():
        record = json.loads(line)
        begun[record["request"]] = bool(record.get("done")) or begun.get(record["request"], False)
    return [r for r, done in begun.items() if not done]


async def test_a_worker_killed_inside_the_forgetting_is_finished_by_the_retry(
    temporal_env, tmp_path, monkeypatch
):
    for name in ("DREAMKEEPER_PAYLOAD_KEY", "DREAMKEEPER_PAYLOAD_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    generate_key_file(tmp_path / "payload-key")
    keys = PayloadKeys.from_env({}, data_dir=tmp_path, key_store=FileBackend(tmp_path).agent_keys)
    address = temporal_env.client.service_client.config.target_host
    client = await Client.connect(address, data_converter=data_converter(keys))
    queue = f"forget-kill-{uuid.uuid4().hex[:8]}"
    # Dies (exit 137, as a SIGKILL) once the other tiers are scrubbed, before the
    # entries are erased: the request is journaled and half done.
    dying = _spawn_worker(
        temporal_env, queue, tmp_path, DREAMKEEPER_CRASH_POINT=faults.FORGET_TIERS_SCRUBBED
    )
    second: subprocess.Popen | None = None
    try:
        memory = MemoryClient(client, StoreSettings(data_dir=tmp_path), queue, save_timeout=120)
        agent = f"fk-{uuid.uuid4().hex[:6]}"
        entry_id = await _saved(memory, agent, FACT)
        FileConversationStore(tmp_path, agent).add_turn("s1", "user", f"Note: {FACT}")

        forgetting = asyncio.create_task(
            memory.forget(agent, ForgetRequest(match=PHRASE, request_id="killed"))
        )
        assert await asyncio.to_thread(dying.wait, 120) == faults.KILLED_EXIT_CODE
        assert not forgetting.done()
        # Half done: the turn is scrubbed, the entry not yet erased, the request pending.
        assert FileMemoryStore(tmp_path, agent).get(entry_id) is not None
        [pending] = _pending_requests(tmp_path)

        second = _spawn_worker(temporal_env, queue, tmp_path)
        receipt = await asyncio.wait_for(forgetting, timeout=180)
    finally:
        for worker in (dying, second):
            if worker is not None:
                _stop(worker)
    # The retry finished the interrupted request (this one, begun before) and reports
    # what it erased, though by the time it ran its own pass the entry was gone.
    assert receipt.request_id == "killed" and receipt.resumed == []
    assert pending and receipt.entries == [entry_id]
    assert receipt.verified, receipt.verification
    assert _pending_requests(tmp_path) == []
    assert FileMemoryStore(tmp_path, agent).get(entry_id) is None
    assert _files_holding(tmp_path, PHRASE) == []
    handle = client.get_workflow_handle(forget_workflow_id(agent, "killed"))
    starts = [
        e.activity_task_started_event_attributes.attempt
        for e in (await handle.fetch_history()).events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    assert starts == [2]  # recorded once, on the attempt that completed: the first died
    # The key that sealed the request is gone with the forget: its history has no text.
    [payloads] = (await _histories(client, [handle.id])).values()
    codec = data_converter(
        PayloadKeys.from_env({}, data_dir=tmp_path, key_store=FileBackend(tmp_path).agent_keys)
    ).payload_codec
    assert isinstance(codec, EncryptionCodec)
    for payload in payloads:
        assert PHRASE.encode() not in codec.decode_sync([payload])[0].data


async def test_with_no_worker_a_forget_says_so_and_runs_once_one_polls(
    temporal_env, tmp_path, monkeypatch
):
    for name in ("DREAMKEEPER_PAYLOAD_KEY", "DREAMKEEPER_PAYLOAD_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    settings = StoreSettings(data_dir=tmp_path)
    queue = f"forget-idle-{uuid.uuid4().hex[:8]}"
    agent = f"fn-{uuid.uuid4().hex[:6]}"
    entry = FileMemoryStore(tmp_path, agent).create(FACT)
    memory = MemoryClient(temporal_env.client, settings, queue, save_timeout=1)
    with pytest.raises(Unavailable, match="no worker answered") as refused:
        await memory.forget(agent, ForgetRequest(ids=[entry.id], request_id="later"))
    assert "'later'" in str(refused.value) and queue in str(refused.value)
    assert FileMemoryStore(tmp_path, agent).get(entry.id) is not None  # queued, not run

    with ThreadPoolExecutor(max_workers=4) as executor:
        worker = build_worker(
            temporal_env.client,
            settings,
            task_queue=queue,
            executor=executor,
            llm=LLMSettings(),
            embeddings=EmbeddingSettings(),
        )
        async with worker:
            memory.save_timeout = 60
            receipt = await memory.forget(agent, ForgetRequest(ids=[entry.id], request_id="later"))
    assert receipt.entries == [entry.id] and receipt.verified
    assert FileMemoryStore(tmp_path, agent).get(entry.id) is None
