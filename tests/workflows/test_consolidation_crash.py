"""A worker killed (SIGKILL) after saving a merged entry and before archiving its
sources: a new worker finishes the cycle with no duplicate merged entry and no source
archived without its replacement."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from datetime import UTC, datetime

import pytest

from dreamkeeper.core.dream_payloads import ConsolidationInput, ConsolidationResult
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.testing.scripted_llm import Reply, ScriptedLLM
from dreamkeeper.workflows.consolidation import Consolidation
from tests.workflows.subprocess_worker import spawn_worker

pytestmark = pytest.mark.slow  # kills a worker process and waits for failover

AS_OF = datetime(2026, 7, 1, tzinfo=UTC)
MERGED = "Duane and Trish Roberts run PWOP Productions in Las Vegas since 2014."


async def test_worker_killed_between_saving_the_merge_and_archiving_its_sources(
    temporal_env, tmp_path
):
    address = temporal_env.client.service_client.config.target_host
    queue = f"crash-{uuid.uuid4().hex[:6]}"
    agent = "crash-dream"
    store = FileMemoryStore(tmp_path, agent)
    a = store.create("Duane and Trish Roberts run PWOP Productions since 2014.", category="people")
    b = store.create("Trish Roberts runs PWOP Productions in Las Vegas.", category="people")
    llm = ScriptedLLM()
    llm.replies.append(
        Reply(
            json.dumps(
                {
                    "toDelete": [a.id, b.id],
                    "toSave": [
                        {"content": MERGED, "category": "people", "sourceIds": [a.id, b.id]}
                    ],
                }
            )
        )
    )
    first = spawn_worker(address, queue, tmp_path, llm, freeze="archive_merged_sources")
    second = None
    try:
        handle = await temporal_env.client.start_workflow(
            Consolidation.run,
            ConsolidationInput(agent_id=agent, as_of=AS_OF),
            id=f"consolidation-{agent}-{uuid.uuid4().hex[:4]}",
            task_queue=queue,
            result_type=ConsolidationResult,
        )
        line = await asyncio.wait_for(asyncio.to_thread(first.stdout.readline), timeout=60)
        assert line.strip() == "frozen", "the worker never reached the archive step"
        # The crash point: the merged entry is durable, its sources are untouched.
        at_crash = FileMemoryStore(tmp_path, agent)
        assert len(at_crash.entries()) == 3 and at_crash.archived() == []
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        second = spawn_worker(address, queue, tmp_path, llm)
        result = await asyncio.wait_for(handle.result(), timeout=120)
        (merge,) = result.merged
        after = FileMemoryStore(tmp_path, agent)
        assert [e.id for e in after.entries()] == [merge.new_id]
        assert after.get(merge.new_id).content == MERGED
        assert len(after.entries(include_archived=True)) == 3  # no second merged entry
        for source in (a, b):
            assert after.get(source.id).archive_reason == f"merged into {merge.new_id}"
        assert result.pruned == [] and len(llm.requests) == 1
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        llm.close()
