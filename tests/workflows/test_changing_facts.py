"""Facts that change, end to end: real worker, real dev server, scripted LLM over HTTP.
An agent's `replaces` is checked by subject and a refusal is an answer (no failed run);
`valid_from` reaches the store from the client and from the LLM (host-checked); a change
nobody explained is a visible conflict until the dream settles it."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.agent.session import SessionContext
from dreamkeeper.agent.tools import MemoryTools
from dreamkeeper.core.dream_payloads import ConsolidationInput, ConsolidationResult
from dreamkeeper.core.errors import InvalidInput, NotFound, ReplaceRefused
from dreamkeeper.core.names import save_workflow_id
from dreamkeeper.core.payloads import SaveOutcome, SaveResult
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore
from dreamkeeper.stores.longterm.records import CONFLICTS_WITH, MAY_BE_REPLACED_BY, linked
from dreamkeeper.stores.search.query import search
from dreamkeeper.testing.scripted_llm import Reply
from dreamkeeper.workflows.consolidation import Consolidation


@pytest.fixture
def memory(worker):
    client, queue, settings = worker
    return MemoryClient(client, settings, queue)


def _agent() -> str:
    return f"f-{uuid.uuid4().hex[:6]}"


async def _statuses(memory: MemoryClient, agent: str) -> list[str]:
    return [
        e.status.name if e.status else "?"
        async for e in memory.client.list_workflows(f'AgentId = "{agent}"')
    ]


async def _result(memory: MemoryClient, agent: str, entry_id: str) -> SaveResult:
    handle = memory.client.get_workflow_handle(
        save_workflow_id(agent, entry_id), result_type=SaveResult
    )
    return await handle.result()


async def test_a_replaces_about_another_subject_is_refused_visibly_and_leaves_no_failed_run(
    memory,
):
    agent = _agent()
    store = FileMemoryStore(memory.settings.data_dir, agent)
    cats = store.create("Mei is allergic to cats.", category="people")
    with pytest.raises(ReplaceRefused, match="another attribute") as refused:
        await memory.save_memory(
            agent, "Mei started a new job at Tessel.", replaces=[cats.id], entry_id="b00000000001"
        )
    assert cats.id in str(refused.value)
    result = await _result(memory, agent, "b00000000001")
    assert result.outcome is SaveOutcome.REFUSED and "another attribute" in (result.detail or "")
    assert [e.id for e in store.entries(include_archived=True)] == [cats.id]
    assert store.require(cats.id).is_current
    # Ids that resolve to nothing or to history are answered the same way: no failed run.
    with pytest.raises(NotFound):
        await memory.save_memory(agent, "Mei works at Tessel.", replaces=["0123456789ab"])
    assert "FAILED" not in await _statuses(memory, agent)

    # Replace it anyway, under the same id: a new run, logged and journaled as forced.
    ack = await memory.save_memory(
        agent,
        "Mei started a new job at Tessel.",
        replaces=[cats.id],
        entry_id="b00000000001",
        force_replace=True,
    )
    assert ack.replaced == [cats.id]
    assert (await _result(memory, agent, ack.entry_id)).outcome is SaveOutcome.KEPT
    assert store.require(cats.id).superseded_by == ack.entry_id
    reasons = [r.reason or "" for r in store.changes() if r.id == cats.id]
    assert (
        "forced over the subject check (another attribute (employer, not allergy))" in (reasons[-1])
    )
    assert "FAILED" not in await _statuses(memory, agent)


async def test_the_tool_answers_a_refusal_with_the_reason_and_how_to_proceed(memory):
    agent = _agent()
    store = FileMemoryStore(memory.settings.data_dir, agent)
    lead = store.create("Priya leads Lumen.")
    manager = store.create("Anna is the user's manager.", category="people")
    tools = MemoryTools(
        agent,
        SessionContext.user("s1"),
        memory=store,
        working=FileWorkingMemoryStore(memory.settings.data_dir, agent),
        writer=memory,
    )
    text = await tools.call(
        "save_memory",
        {"content": "Bjorn is now User's manager.", "category": "people", "replaces": [lead.id]},
    )
    assert text.startswith("Error: not saved: ") and "another subject" in text
    assert "force_replace" in text and lead.id in text
    # The right one, with its subject named last and the new value first: replaced.
    text = await tools.call(
        "save_memory",
        {"content": "Bjorn is now User's manager.", "category": "people", "replaces": [manager.id]},
    )
    assert text.startswith("Saved to long-term memory") and f"[{manager.id}]" in text
    assert not store.require(manager.id).is_current


async def test_a_replaces_the_check_cannot_tell_is_saved_beside_it_and_the_agent_told(memory):
    agent = _agent()
    store = FileMemoryStore(memory.settings.data_dir, agent)
    old = store.create("Ana Costa lives in Lisbon.", category="people")
    tools = MemoryTools(
        agent,
        SessionContext.user("s1"),
        memory=store,
        working=FileWorkingMemoryStore(memory.settings.data_dir, agent),
        writer=memory,
    )
    # No embedding model here: nothing can tell whether "renting in" is a new home.
    text = await tools.call(
        "save_memory",
        {
            "content": "Ana Costa is renting in Ghent these days.",
            "category": "people",
            "replaces": [old.id],
        },
    )
    assert text.startswith("Saved to long-term memory") and f"[{old.id}] stay current" in text
    new_id = text.split("[", 1)[1].split("]", 1)[0]
    assert store.require(old.id).is_current and store.require(new_id).is_current
    assert linked(store.require(old.id), MAY_BE_REPLACED_BY) == [new_id]
    ack = await memory.save_memory(
        agent, "Ana Costa is renting in Bergen now.", replaces=[old.id], entry_id="b00000000002"
    )
    assert ack.unconfirmed == [old.id] and ack.replaced == []
    assert (await _result(memory, agent, ack.entry_id)).outcome is SaveOutcome.KEPT
    assert "FAILED" not in await _statuses(memory, agent)


async def test_valid_from_reaches_the_store_and_as_of_reads_use_it(memory):
    agent = _agent()
    store = FileMemoryStore(memory.settings.data_dir, agent)
    ack = await memory.save_memory(agent, "The user moved to Denver.", valid_from="2026-03-01")
    await _result(memory, agent, ack.entry_id)
    entry = store.require(ack.entry_id)
    assert entry.valid_from == datetime(2026, 3, 1, tzinfo=UTC)
    assert entry.created_at > entry.valid_from
    assert [h.entry.id for h in search(store, "Denver", as_of="2026-03-15")] == [ack.entry_id]
    assert search(store, "Denver", as_of="2026-02-15") == []
    with pytest.raises(InvalidInput, match="ISO 8601"):
        await memory.save_memory(agent, "The user moved to Boulder.", valid_from="last week")
    with pytest.raises(InvalidInput, match="in the future"):
        await memory.save_memory(agent, "The user moves to Mars.", valid_from="2099-01-01")
    assert [e.content for e in store.entries()] == ["The user moved to Denver."]


async def test_the_llm_may_date_a_fact_from_the_note_and_the_host_checks_it(memory, llm):
    agent = _agent()
    store = FileMemoryStore(memory.settings.data_dir, agent)

    def reply(body: dict) -> Reply:
        message = body["messages"][-1]["content"]
        saved = datetime.fromisoformat(message.split("Saved at: ")[1].split(" ")[0])
        return Reply(
            json.dumps(
                [
                    {
                        "content": "The user moved to Denver.",
                        "category": "people",
                        "validFrom": (saved - timedelta(days=7)).date().isoformat(),
                    },
                    {
                        "content": "The user's new lease runs two years.",
                        "category": "people",
                        "validFrom": (saved + timedelta(days=120)).date().isoformat(),
                    },
                    {
                        "content": "The user likes the Denver weather.",
                        "category": "people",
                        "validFrom": "sometime soon",
                    },
                ]
            )
        )

    llm.responder = reply
    ack = await memory.save_memory(
        agent, "I moved to Denver last week; the lease runs two years and I like the weather."
    )
    result = await _result(memory, agent, ack.entry_id)
    assert result.outcome is SaveOutcome.ENRICHED
    assert "Saved at: " in llm.requests[-1]["messages"][-1]["content"]
    facts = {
        store.require(r.entry_id).content: store.require(r.entry_id) for r in result.replacements
    }
    moved = facts["The user moved to Denver."]
    original = store.require(ack.entry_id)
    assert moved.valid_from is not None
    assert moved.valid_from.date() == (original.created_at - timedelta(days=7)).date()
    # Four months ahead and not a date at all: ignored, the fact kept without it.
    assert facts["The user's new lease runs two years."].valid_from is None
    assert facts["The user likes the Denver weather."].valid_from is None


async def _consolidate(client, queue, agent, **kw) -> ConsolidationResult:
    return await client.execute_workflow(
        Consolidation.run,
        ConsolidationInput(agent_id=agent, **kw),
        id=f"consolidation-{agent}-{uuid.uuid4().hex[:4]}",
        task_queue=queue,
        result_type=ConsolidationResult,
    )


async def test_a_change_nobody_explained_is_visible_until_the_dream_settles_it(worker, memory):
    client, queue, _ = worker
    agent = _agent()
    store = FileMemoryStore(memory.settings.data_dir, agent)
    old = store.create("Maya Lund lives in Lisbon.", category="people", valid_from="2025-06-01")
    kept = store.create(
        "Tom Berg's phone number is +1 291-347-7545.",
        category="people",
        importance=0.9,
        valid_from="2025-06-01",
    )
    ack = await memory.save_memory(agent, "Porto is where Maya Lund lives now.", category="people")
    result = await _result(memory, agent, ack.entry_id)
    assert result.replacements[0].conflicts == [old.id]
    high = await memory.save_memory(agent, "Tom Berg got a new number: +1 404-519-2406.")
    assert (await _result(memory, agent, high.entry_id)).replacements[0].conflicts == [kept.id]
    assert linked(store.require(ack.entry_id), CONFLICTS_WITH) == [old.id]
    assert store.require(old.id).is_current  # nobody said so: no supersede yet

    # A dry run plans the settlement and changes nothing.
    dry = await _consolidate(client, queue, agent, dry_run=True)
    assert dry.plan is not None and [(s.id, s.by) for s in dry.plan.supersedes] == [
        (old.id, ack.entry_id)
    ]
    assert store.require(old.id).is_current

    done = await _consolidate(client, queue, agent, cycle_id=f"cycle-{agent}")
    assert done.settled_conflicts == [old.id] and old.id in done.superseded
    after = store.require(old.id)
    assert after.superseded_by == ack.entry_id and after.content == old.content
    # Above the high-value floor the dream does not hide it: the conflict stays visible.
    assert done.unsettled_conflicts == {kept.id: "above the high-value floor"}
    assert store.require(kept.id).is_current
    reasons = [r.reason or "" for r in store.changes() if r.id == old.id]
    assert reasons[-1] == f"conflict settled: replaced by {ack.entry_id} (dream)"
    assert "FAILED" not in await _statuses(memory, agent)


async def test_a_note_enrichment_leaves_whole_is_checked_for_conflicts_too(memory, llm):
    agent = _agent()
    store = FileMemoryStore(memory.settings.data_dir, agent)
    old = store.create("Omar Haddad's manager is Ana Ruiz.", category="people")
    llm.replies.append(Reply("[]"))  # nothing to extract: the note stays as saved
    ack = await memory.save_memory(agent, "Li Wei is now Omar Haddad's manager.")
    result = await _result(memory, agent, ack.entry_id)
    assert result.outcome is SaveOutcome.KEPT
    assert linked(store.require(ack.entry_id), CONFLICTS_WITH) == [old.id]
    assert store.require(old.id).is_current
