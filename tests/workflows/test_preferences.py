"""PreferenceInference and the full Dream cycle with an LLM."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

from temporalio.api.sdk.v1 import WorkflowMetadata

from dreamkeeper.core.dream_payloads import (
    DreamInput,
    PreferenceInput,
    PreferenceResult,
)
from dreamkeeper.stores.conversation.conversation_log import PROCESSED, ConversationLog
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.testing.scripted_llm import Reply
from dreamkeeper.workflows.dream import Dream
from dreamkeeper.workflows.preferences import PreferenceInference

T0 = datetime(2026, 9, 1, 8, 0, tzinfo=UTC)
PREFS = {
    "toSave": [
        {
            "content": "The user prefers answers without emoji.",
            "tags": ["style"],
            "importance": 0.7,
        },
        {"content": "The user wants to approve any purchase over $50 first.", "importance": 0.8},
    ]
}


def _log(settings, agent: str) -> ConversationLog:
    log = ConversationLog(FileMemoryStore(settings.data_dir, agent).documents)
    log.append("s1", "user", "Stop using emoji. I told you twice.", T0)
    log.append("s1", "assistant", "Understood.", T0 + timedelta(seconds=5))
    log.append("s2", "user", "Ask me before you buy anything over $50.", T0 + timedelta(hours=1))
    return log


async def _infer(client, queue, agent) -> PreferenceResult:
    return await client.execute_workflow(
        PreferenceInference.run,
        PreferenceInput(agent_id=agent, as_of=T0 + timedelta(days=1)),
        id=f"prefs-{agent}-{uuid.uuid4().hex[:4]}",
        task_queue=queue,
        result_type=PreferenceResult,
    )


async def test_preferences_are_inferred_saved_through_dedup_and_the_log_rotated(worker, llm):
    client, queue, settings = worker
    agent = f"p-{uuid.uuid4().hex[:6]}"
    log = _log(settings, agent)
    llm.replies.append(Reply(json.dumps(PREFS)))
    result = await _infer(client, queue, agent)
    assert result.turns == 3 and len(result.saved) == 2
    prompt = llm.requests[0]["messages"][1]["content"]
    assert "## session s1" in prompt and "## session s2" in prompt and "$50" in prompt
    store = FileMemoryStore(settings.data_dir, agent)
    by_content = {e.content: e for e in store.entries()}
    emoji = by_content["The user prefers answers without emoji."]
    money = by_content["The user wants to approve any purchase over $50 first."]
    for entry in (emoji, money):
        assert entry.category == "user-preferences/inferred"
        assert "inferred" in entry.tags and entry.source == "inferred"
    assert money.metadata["requires_user_permission"] == "true"
    assert "requires_user_permission" not in emoji.metadata
    assert log.read() == []  # cleared ...
    assert result.rotated_to is not None
    assert len(log.read(result.rotated_to)) == 3  # ... but kept
    # ... and the same preferences again reinforce rather than duplicate.
    _log(settings, agent)
    llm.replies.append(Reply(json.dumps(PREFS)))
    again = await client.execute_workflow(
        PreferenceInference.run,
        PreferenceInput(agent_id=agent, as_of=T0 + timedelta(days=2)),
        id=f"prefs-{agent}-again",
        task_queue=queue,
        result_type=PreferenceResult,
    )
    assert [s.outcome for s in again.saved] == ["reinforced", "reinforced"]
    assert len(FileMemoryStore(settings.data_dir, agent).entries()) == 2


async def test_the_log_is_cleared_even_when_the_llm_fails(worker, llm):
    client, queue, settings = worker
    agent = f"p-{uuid.uuid4().hex[:6]}"
    log = _log(settings, agent)
    llm.replies.append(Reply("I think the user likes tea"))  # not JSON
    result = await _infer(client, queue, agent)
    assert result.saved == [] and result.skipped.startswith("inference failed")
    assert log.read() == [] and len(log.documents.names(PROCESSED)) == 1
    assert FileMemoryStore(settings.data_dir, agent).entries() == []


async def test_an_empty_log_asks_nothing(worker, llm):
    client, queue, settings = worker
    result = await _infer(client, queue, f"p-{uuid.uuid4().hex[:6]}")
    assert result.skipped == "the conversation log is empty" and llm.requests == []


async def test_a_dream_cycle_with_an_llm_runs_every_pass_in_order(worker, llm):
    client, queue, settings = worker
    agent = f"d-{uuid.uuid4().hex[:6]}"
    store = FileMemoryStore(settings.data_dir, agent, clock=lambda: T0)
    note = store.create("ping received from the monitor", category="status", importance=0.1)
    # Work for every pass: an archive past retention, and a note old enough to decay.
    earlier = FileMemoryStore(settings.data_dir, agent, clock=lambda: T0 - timedelta(days=200))
    gone = earlier.create("An old note about a meeting room.", category="notes")
    earlier.archive(gone.id, "deleted by agent tool")
    earlier.create("The user's desk is on the third floor.", category="places", importance=0.5)
    _log(settings, agent)
    llm.replies += [
        Reply(json.dumps({"toDelete": [note.id], "toSave": []})),
        Reply(json.dumps(PREFS)),
    ]
    handle = await client.start_workflow(
        Dream.run,
        DreamInput(agent_id=agent, as_of=T0 + timedelta(days=1)),
        id=f"dream-{agent}",
        task_queue=queue,
    )
    result = await handle.result()
    assert result.consolidation.pruned == [note.id] and len(result.preferences.saved) == 2
    prompts = [r["messages"][0]["content"] for r in llm.requests]
    assert "long-term memory" in prompts[0] and "preferences" in prompts[1]
    # What an operator reads in the UI: the cycle's summary as the workflow's details.
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert meta.current_details.startswith("done: purged 1;")
    assert "archived 0 with a replacement and 1 without" in meta.current_details
    children = [
        e.workflow_type async for e in client.list_workflows(f"ParentWorkflowId = 'dream-{agent}'")
    ]
    assert sorted(children) == sorted(
        ["ArchivePurge", "Consolidation", "PreferenceInference", "ImportanceDecay"]
    )
