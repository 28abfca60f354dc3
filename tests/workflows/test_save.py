"""SaveMemory end to end: real worker, real dev server, scripted LLM over HTTP."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.sdk.v1 import WorkflowMetadata

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.core.names import save_workflow_id
from dreamkeeper.core.payloads import SaveResult
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.testing.scripted_llm import Reply

ORIGINAL = "Trish Roberts of PWOP Productions gave her number, +1 386-299-4605."
FACTS = [
    {
        "content": "Trish Roberts works at PWOP Productions.",
        "category": "people/colleagues",
        "tags": ["people"],
        "importance": 0.7,
    },
    {
        "content": "Trish Roberts's phone number is +1 386-299-4605.",
        "category": "people/contacts",
        "tags": ["phone"],
        "importance": 0.6,
    },
]


@pytest.fixture
def memory(worker):
    client, queue, settings = worker
    return MemoryClient(client, settings, queue)


def _agent() -> str:
    return f"s-{uuid.uuid4().hex[:6]}"


async def _result(memory: MemoryClient, agent: str, entry_id: str):
    handle = memory.client.get_workflow_handle(
        save_workflow_id(agent, entry_id), result_type=SaveResult
    )
    return await handle.result()


async def test_save_returns_before_the_llm_answers_and_enrichment_replaces_the_original(
    memory, llm
):
    agent = _agent()
    release = threading.Event()
    llm.replies.append(Reply(json.dumps(FACTS), hold=release))
    ack = await memory.save_memory(agent, ORIGINAL, category="people", source="user")
    # The LLM is still holding its answer: the original is already durable and searchable.
    assert not release.is_set()
    assert [h.entry.id for h in memory.search_memory(agent, "trish roberts")] == [ack.entry_id]
    release.set()
    result = await _result(memory, agent, ack.entry_id)
    assert result.outcome == "enriched" and len(result.replacements) == 2
    store = FileMemoryStore(memory.settings.data_dir, agent)
    original = store.get(ack.entry_id)
    assert original.is_archived and original.archive_reason.startswith("enriched into [")
    new_ids = {r.entry_id for r in result.replacements}
    assert {h.entry.id for h in memory.search_memory(agent, "trish roberts")} == new_ids
    # Save first, then archive: every replacement's record precedes the archive.
    journal = store.journal.read_all()
    archived_at = next(i for i, r in enumerate(journal) if r.action is JournalAction.ARCHIVED)
    created_at = [i for i, r in enumerate(journal) if r.id in new_ids]
    assert max(created_at) < archived_at


async def test_a_lossy_enrichment_keeps_the_original(memory, llm):
    agent = _agent()
    llm.replies.append(Reply(json.dumps(FACTS[:1])))  # drops the phone number
    ack = await memory.save_memory(agent, ORIGINAL, category="people")
    result = await _result(memory, agent, ack.entry_id)
    # The result says how many specifics were missing, never which (it is history).
    assert result.outcome == "kept" and "miss 1 specific" in result.detail
    assert "386" not in result.detail
    original = FileMemoryStore(memory.settings.data_dir, agent).get(ack.entry_id)
    assert not original.is_archived
    assert original.metadata["enrichment"].startswith("kept: the replacements miss")


async def test_malformed_llm_output_is_not_retried_and_leaves_the_original(memory, llm):
    agent = _agent()
    llm.replies.append(Reply("Sure! Here are your memories: Trish..."))
    ack = await memory.save_memory(agent, ORIGINAL)
    result = await _result(memory, agent, ack.entry_id)
    assert result.outcome == "kept" and len(llm.requests) == 1
    original = FileMemoryStore(memory.settings.data_dir, agent).get(ack.entry_id)
    assert not original.is_archived and "not JSON" in original.metadata["enrichment"]


@pytest.mark.slow  # waits out retry backoff
async def test_llm_down_then_up_is_retried_then_succeeds(memory, llm):
    agent = _agent()
    llm.replies += [Reply("busy", status=503), Reply("busy", status=503), Reply(json.dumps(FACTS))]
    ack = await memory.save_memory(agent, ORIGINAL, category="people")
    result = await _result(memory, agent, ack.entry_id)
    assert result.outcome == "enriched" and len(llm.requests) == 3


async def test_a_4xx_is_not_retried(memory, llm):
    agent = _agent()
    llm.replies.append(Reply("bad key", status=401))
    ack = await memory.save_memory(agent, ORIGINAL)
    result = await _result(memory, agent, ack.entry_id)
    assert result.outcome == "kept" and len(llm.requests) == 1


async def test_enriched_facts_go_through_dedup(memory, llm):
    agent = _agent()
    store = FileMemoryStore(memory.settings.data_dir, agent)
    existing = store.create(
        "Trish Roberts works at PWOP Productions.", category="people/colleagues"
    )
    llm.replies.append(Reply(json.dumps(FACTS)))
    ack = await memory.save_memory(agent, ORIGINAL, category="people")
    result = await _result(memory, agent, ack.entry_id)
    outcomes = {r.entry_id: r.outcome for r in result.replacements}
    assert outcomes[existing.id] == "reinforced"
    assert store.get(existing.id).reinforcement_count == 2
    assert len([e for e in store.entries() if "PWOP" in e.content]) == 1


async def test_without_an_llm_the_original_is_deduplicated_as_is(memory):
    agent = _agent()
    store = FileMemoryStore(memory.settings.data_dir, agent)
    existing = store.create("User lives in Chicago near the Loop", category="user")
    ack = await memory.save_memory(agent, "User lives in Chicago near the Loop", category="user")
    result = await _result(memory, agent, ack.entry_id)
    assert result.outcome == "deduplicated" and result.replacements[0].entry_id == existing.id
    assert store.get(existing.id).reinforcement_count == 2
    assert store.get(ack.entry_id).archive_reason == f"merged into {existing.id}"
    fresh = await memory.save_memory(agent, "User's dog is called Rex", category="user")
    assert (await _result(memory, agent, fresh.entry_id)).outcome == "kept"


async def test_bad_input_is_refused_before_anything_is_written(memory):
    from dreamkeeper.core.errors import InvalidInput

    with pytest.raises(InvalidInput):
        await memory.save_memory("a1", "fact", category="../etc")
    assert not (memory.settings.data_dir / "agents" / "a1").exists()


async def test_an_id_reused_with_other_content_is_a_conflict_while_running_and_after(memory, llm):
    """The same id is the same save only for the same content: while the first save is
    still enriching (its workflow running) and after it finished, other content under
    that id is refused (Conflict) and never answered with the first save's ack."""
    from dreamkeeper.core.errors import Conflict

    agent = _agent()
    release = threading.Event()
    llm.replies += [Reply(json.dumps(FACTS), hold=release)]
    ack = await memory.save_memory(agent, ORIGINAL, entry_id="0123456789ab")
    with pytest.raises(Conflict, match="other content"):
        await memory.save_memory(agent, "another fact entirely", entry_id="0123456789ab")
    again = await memory.save_memory(agent, ORIGINAL, entry_id="0123456789ab")  # a retry
    assert again.entry_id == ack.entry_id
    release.set()
    await _result(memory, agent, ack.entry_id)
    with pytest.raises(Conflict, match="other content"):
        await memory.save_memory(agent, "another fact entirely", entry_id="0123456789ab")
    contents = [
        e.content
        for e in FileMemoryStore(memory.settings.data_dir, agent).entries(include_archived=True)
    ]
    assert "another fact entirely" not in contents


async def _payload_texts(memory: MemoryClient, agent: str, *known) -> list[str]:
    """Every payload in the histories of the agent's workflows (those listed, and the
    `known` descriptions, as listing may lag), decoded with the client's converter."""
    found: list[Payload] = []

    def walk(message: Message) -> None:
        if isinstance(message, Payload):
            found.append(message)
            return
        for field, value in message.ListFields():
            if field.message_type is None:
                continue
            if field.message_type.GetOptions().map_entry:
                items = list(value.values())
            else:
                items = [value] if isinstance(value, Message) else list(value)
            for item in items:
                if isinstance(item, Message):
                    walk(item)

    runs = {(r.id, r.run_id) for r in known}
    async for execution in memory.client.list_workflows(f'AgentId = "{agent}"'):
        runs.add((execution.id, execution.run_id))
    for workflow_id, run_id in runs:
        history = await memory.client.get_workflow_handle(
            workflow_id, run_id=run_id
        ).fetch_history()
        for event in history.events:
            walk(event)
    return [repr(v) for v in await memory.client.data_converter.decode(found)]


async def _statuses(memory: MemoryClient, agent: str) -> list[str]:
    return [
        e.status.name if e.status else "?"
        async for e in memory.client.list_workflows(f'AgentId = "{agent}"')
    ]


async def test_an_id_reused_with_other_content_after_the_save_finished_leaves_no_failed_run(
    memory,
):
    """Refused before any run starts: no failed workflow, and the rejected content in no
    history (nor the store)."""
    from dreamkeeper.core.errors import Conflict

    agent = _agent()
    ack = await memory.save_memory(agent, "User's dog is called Rex", entry_id="0123456789ab")
    handle = memory.client.get_workflow_handle(save_workflow_id(agent, ack.entry_id))
    await handle.result()
    first = await handle.describe()
    with pytest.raises(Conflict, match="other content"):
        await memory.save_memory(agent, "User's cat is called Tom", entry_id="0123456789ab")
    latest = await handle.describe()  # the id's newest run, read consistently
    assert latest.run_id == first.run_id and latest.status.name == "COMPLETED"
    assert "FAILED" not in await _statuses(memory, agent)
    texts = await _payload_texts(memory, agent, latest)
    assert any("Rex" in t for t in texts)  # the decoding sees content
    assert not any("Tom" in t for t in texts)


async def test_a_retried_save_whose_run_finished_is_answered_by_that_run(memory):
    agent = _agent()
    ack = await memory.save_memory(agent, "User prefers tea over coffee", idempotency_key="k1")
    handle = memory.client.get_workflow_handle(save_workflow_id(agent, ack.entry_id))
    await handle.result()
    first = await handle.describe()
    again = await memory.save_memory(agent, "User prefers tea over coffee", idempotency_key="k1")
    assert again.entry_id == ack.entry_id and again.already_done
    assert (await handle.describe()).run_id == first.run_id  # no second run was started


async def test_a_finished_save_shows_done_not_a_stale_step(memory):
    agent = _agent()
    ack = await memory.save_memory(agent, "User prefers tea over coffee")
    handle = memory.client.get_workflow_handle(save_workflow_id(agent, ack.entry_id))
    await handle.result()
    # What the UI reads as the run's current details.
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    assert meta.current_details == "done: kept as saved"


async def test_a_save_that_replaces_a_fact_supersedes_it_and_recall_returns_the_new_one(memory):
    from dreamkeeper.core.errors import Conflict, NotFound
    from dreamkeeper.stores.search.query import search

    agent = _agent()
    store = FileMemoryStore(memory.settings.data_dir, agent)
    old = store.create("Maya's manager is Tom Baker.", category="people")
    ack = await memory.save_memory(
        agent, "Maya's manager is Ana Ruiz.", category="people", replaces=[old.id]
    )
    assert ack.replaced == [old.id]
    await _result(memory, agent, ack.entry_id)
    before = store.require(old.id)
    assert before.superseded_by == ack.entry_id and before.content == old.content
    assert not before.is_archived
    assert [h.entry.id for h in search(store, "Maya manager")] == [ack.entry_id]
    # The same save again (a retry): nothing more happens.
    again = await memory.save_memory(
        agent,
        "Maya's manager is Ana Ruiz.",
        category="people",
        replaces=[old.id],
        entry_id=ack.entry_id,
    )
    assert again.entry_id == ack.entry_id
    assert store.require(old.id).revision == before.revision
    # Replacing what was already replaced, or what does not exist, changes nothing.
    with pytest.raises(Conflict):
        await memory.save_memory(agent, "Maya's manager is Li Wei.", replaces=[old.id])
    with pytest.raises(NotFound):
        await memory.save_memory(agent, "Maya's manager is Li Wei.", replaces=["0123456789ab"])
    assert [e.id for e in store.entries() if "Li Wei" in e.content] == []


async def test_enrichment_may_replace_only_a_shown_current_entry_about_the_same_thing(memory, llm):
    agent = _agent()
    store = FileMemoryStore(memory.settings.data_dir, agent)
    old = store.create("Maya Lund lives in Lisbon.", category="people")
    other = store.create("Tom Berg lives in Lisbon.", category="people")
    elsewhere = store.create("Maya Lund's office is in Lisbon.", category="work")
    hidden = store.create("Oslo has long winters.", category="places")
    facts = [
        # Right: shown, current, same category, same subject.
        {"content": "Maya Lund lives in Porto.", "category": "people", "replaces": [old.id]},
        # Wrong: another subject, another category, never shown, not an id at all.
        {
            "content": "Maya Lund's sister lives in Porto.",
            "category": "people",
            "replaces": [other.id, elsewhere.id, hidden.id, "../../etc", 7],
        },
    ]
    llm.replies.append(Reply(json.dumps(facts)))
    ack = await memory.save_memory(agent, "Maya Lund moved to Porto, near her sister.")
    result = await _result(memory, agent, ack.entry_id)
    shown = llm.requests[-1]["messages"][-1]["content"]
    assert old.id in shown and hidden.id not in shown
    replaced = {i for r in result.replacements for i in r.replaced}
    assert replaced == {old.id}
    assert store.require(old.id).superseded_by == result.replacements[0].entry_id
    for untouched in (other, elsewhere, hidden):
        assert store.require(untouched.id).is_current
