"""A worker killed (SIGKILL) mid-save: a new worker finishes the job, nothing lost or doubled."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import uuid

import pytest

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.core.names import save_workflow_id
from dreamkeeper.core.payloads import SaveResult
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.testing.scripted_llm import Reply, ScriptedLLM
from tests.workflows.subprocess_worker import spawn_worker
from tests.workflows.test_save import FACTS, ORIGINAL

pytestmark = pytest.mark.slow  # kills a worker process and waits for failover


async def test_worker_killed_during_enrichment_a_new_worker_completes_the_save(
    temporal_env, tmp_path
):
    address = temporal_env.client.service_client.config.target_host
    queue = f"crash-{uuid.uuid4().hex[:6]}"
    agent = "crash-agent"
    llm = ScriptedLLM()
    never = threading.Event()  # the first worker's LLM call never gets an answer
    llm.replies += [Reply(json.dumps(FACTS), hold=never), Reply(json.dumps(FACTS))]
    first = spawn_worker(address, queue, tmp_path, llm)
    second = None
    try:
        memory = MemoryClient(temporal_env.client, StoreSettings(data_dir=tmp_path), queue)
        ack = await memory.save_memory(agent, ORIGINAL, category="people")
        for _ in range(200):  # until the enrichment request reached the LLM
            if llm.requests:
                break
            await asyncio.sleep(0.05)
        assert llm.requests, "enrichment never started"
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        # The original persisted before the crash.
        assert FileMemoryStore(tmp_path, agent).get(ack.entry_id) is not None
        second = spawn_worker(address, queue, tmp_path, llm)
        handle = temporal_env.client.get_workflow_handle(
            save_workflow_id(agent, ack.entry_id), result_type=SaveResult
        )
        result = await asyncio.wait_for(handle.result(), timeout=120)
        assert result.outcome == "enriched" and len(llm.requests) == 2
        store = FileMemoryStore(tmp_path, agent)
        live = store.entries()
        assert sorted(e.content for e in live) == sorted(f["content"] for f in FACTS)
        assert store.get(ack.entry_id).is_archived
        assert len(store.entries(include_archived=True)) == 3  # no duplicate anywhere
    finally:
        never.set()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        llm.close()
