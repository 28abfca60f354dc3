"""Consolidation end to end: real worker, real dev server, scripted LLM over HTTP.

Each test seeds a store with known ids, scripts what the LLM proposes, runs the
Consolidation workflow and checks what deterministic code allowed to happen.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from dreamkeeper.core.dream_payloads import ConsolidationInput, ConsolidationResult
from dreamkeeper.policies.merge import MERGED_FROM
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.testing.scripted_llm import Reply
from dreamkeeper.workflows.consolidation import Consolidation
from tests.helpers import tree_snapshot

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
AS_OF = T0 + timedelta(days=3)


def _agent() -> str:
    return f"c-{uuid.uuid4().hex[:6]}"


def _ids(n: int, prefix: str = "a") -> list[str]:
    return [f"{prefix}{i:011d}" for i in range(n)]


def _store(settings, agent: str, at: datetime = T0) -> FileMemoryStore:
    return FileMemoryStore(settings.data_dir, agent, clock=lambda: at)


def _reply(to_delete=(), to_save=()) -> Reply:
    return Reply(json.dumps({"toDelete": list(to_delete), "toSave": list(to_save)}))


async def _consolidate(client, queue, agent, **kw) -> ConsolidationResult:
    return await client.execute_workflow(
        Consolidation.run,
        ConsolidationInput(agent_id=agent, as_of=kw.pop("as_of", AS_OF), **kw),
        id=f"consolidation-{agent}-{uuid.uuid4().hex[:4]}",
        task_queue=queue,
        result_type=ConsolidationResult,
    )


def _prompt_ids(request: dict) -> list[str]:
    text = request["messages"][1]["content"]
    return [part.split("]", 1)[0] for part in text.split("[ID:")[1:]]


async def test_a_rejected_merges_sources_are_not_archived_through_to_delete(worker, llm, caplog):
    """The production shape that archived 13 entries: the prompt asks for every source
    in toDelete, so rejecting the merge must also keep them off the prune path."""
    client, queue, settings = worker
    agent = _agent()
    store = _store(settings, agent)
    a, b = _ids(2)
    store.create(
        "Rocky Lhotka also appears in travel data as Rockford Duane Lhotka.",
        category="user-preferences/identity",
        entry_id=a,
        importance=0.99,
    )
    store.create(
        "Rocky Lhotka's GitHub account is rockfordlhotka.",
        category="user-preferences/identity",
        entry_id=b,
    )
    lossy = {
        "content": "Rocky Lhotka's GitHub account is rockfordlhotka.",
        "category": "user-preferences/identity",
        "sourceIds": [a, b],
    }
    llm.replies += [
        _reply(to_delete=[a, b], to_save=[lossy]),
        Reply(json.dumps({"content": lossy["content"]})),  # the repair still drops it
    ]
    with caplog.at_level("INFO"):
        result = await _consolidate(client, queue, agent)
    assert [r.sources for r in result.rejected] == [[a, b]]
    # The result says how many specifics were dropped, never which (invariant 18).
    assert result.rejected[0].dropped >= 2
    assert "Rockford" not in result.model_dump_json() and "Duane" not in result.model_dump_json()
    info = [r.getMessage() for r in caplog.records if r.levelno >= 20]
    assert any(f"rejected merge of [{a}, {b}] — dropped" in m for m in info)
    assert not any("Rockford" in m or "Duane" in m for m in info)
    assert result.merged == [] and result.pruned == []
    assert result.refused_prunes == {a: "a source of a merge", b: "a source of a merge"}
    fresh = FileMemoryStore(settings.data_dir, agent)
    assert [e.id for e in fresh.entries()] == sorted([a, b])
    assert all(e.consolidation_reviewed_hash == e.fingerprint for e in fresh.entries())
    assert len(llm.requests) == 2  # one proposal, one repair
    repair = llm.requests[1]["messages"][0]["content"]
    assert "Rockford" in repair and "Duane" in repair


async def test_ids_outside_the_eligible_set_and_hallucinated_ids_resolve_to_nothing(worker, llm):
    client, queue, settings = worker
    agent = _agent()
    store = _store(settings, agent)
    reviewed, fresh_id, other = _ids(3)
    old = store.create(
        "Las Vegas trip with Trish Roberts in 2026.",
        entry_id=reviewed,
        category="travel",
        importance=0.2,
    )
    store.put(
        old.model_copy(update={"consolidation_reviewed_hash": old.fingerprint}),
        action=JournalAction.REVIEWED,
    )
    store.create(
        "Meeting notes from the BlazorBook kickoff.",
        entry_id=fresh_id,
        category="projects",
        importance=0.2,
    )
    store.create(
        "Tripit holds the itinerary for Denver.", entry_id=other, category="travel", importance=0.2
    )
    # Shown: fresh_id and other (unreviewed). Not shown: reviewed. Invented: deadbeef0000.
    llm.replies.append(
        _reply(
            to_delete=[reviewed, "deadbeef0000"],
            to_save=[
                {
                    "content": "Las Vegas trip with Trish Roberts in 2026. BlazorBook kickoff.",
                    "category": "travel",
                    "sourceIds": [reviewed, "deadbeef0000"],
                }
            ],
        )
    )
    result = await _consolidate(client, queue, agent)
    assert sorted(_prompt_ids(llm.requests[0])) == sorted([fresh_id, other])
    assert set(result.ignored_ids) == {reviewed, "deadbeef0000"}
    assert result.merged == [] and result.pruned == [] and result.left_alone == 1
    after = FileMemoryStore(settings.data_dir, agent)
    assert len(after.entries()) == 3 and len(after.entries(include_archived=True)) == 3


async def test_the_floor_refuses_to_prune_high_value_entries(worker, llm, caplog):
    client, queue, settings = worker
    agent = _agent()
    store = _store(settings, agent)
    precious, reinforced, chatter = _ids(3)
    store.create(
        "Agent infrastructure runs on the k3s cluster named Atlas.",
        entry_id=precious,
        category="agent-knowledge/infrastructure",
        importance=0.99,
    )
    e = store.create(
        "Routing anti-pattern: never send billing questions to triage.",
        entry_id=reinforced,
        category="anti-patterns/routing",
        importance=0.3,
    )
    store.put(e.model_copy(update={"reinforcement_count": 106}), action=JournalAction.REINFORCED)
    store.create("checking the build now", entry_id=chatter, category="status", importance=0.1)
    llm.replies.append(_reply(to_delete=[precious, reinforced, chatter]))
    with caplog.at_level("INFO"):
        result = await _consolidate(client, queue, agent)
    assert sorted(result.protected) == sorted([precious, reinforced])
    assert result.pruned == [chatter]
    after = FileMemoryStore(settings.data_dir, agent)
    assert after.get(chatter).archive_reason == "flagged ephemeral by consolidation"
    assert not after.get(precious).is_archived and not after.get(reinforced).is_archived
    assert any(
        f"refused to prune {precious}" in r.getMessage()
        and "above the high-value floor" in r.getMessage()
        for r in caplog.records
    )
    # The prune is logged by id; its content only at DEBUG (invariant 18).
    info = [r.getMessage() for r in caplog.records if r.levelno >= 20]
    assert any(f"archived {chatter}" in m for m in info)
    assert not any("checking the build" in m for m in info)


async def test_a_thirteen_source_merge_keeping_every_specific_is_accepted(worker, llm):
    client, queue, settings = worker
    agent = _agent()
    facts = [
        "Allen Conway is a Principal Consultant.",
        "Allen Conway works at Xebia.",
        "Allen Conway's work email is Allen.Conway@xebia.com.",
        "Allen Conway's personal email is atconway@bellsouth.net.",
        "Allen Conway's phone is +1 386-299-4605.",
        "Allen Conway speaks at VS Live.",
        "Allen Conway lives in Florida.",
        "Allen Conway likes Blazor.",
        "Allen Conway met Rocky in 2019.",
        "Allen Conway wrote about OAuth.",
        "Allen Conway presented on 2026-08-19.",
        "Allen Conway's team uses Azure.",
        "Allen Conway mentors at Microsoft MVP events.",
    ]
    ids = _ids(13)
    clock = {"now": T0}
    store = FileMemoryStore(settings.data_dir, agent, clock=lambda: clock["now"])
    for n, (eid, fact) in enumerate(zip(ids, facts, strict=True)):
        clock["now"] = T0 + timedelta(days=n)
        entry = store.create(
            fact,
            category="people/colleagues",
            entry_id=eid,
            importance=0.4,
            metadata={"subjectTimeStart": f"20{10 + n}"},
        )
        store.put(
            entry.model_copy(update={"reinforcement_count": n + 1}), action=JournalAction.REINFORCED
        )
    merged_text = (
        "Allen Conway is a Principal Consultant at Xebia (work email Allen.Conway@xebia.com, "
        "personal atconway@bellsouth.net, phone +1 386-299-4605). He speaks at VS Live, lives "
        "in Florida, likes Blazor, met Rocky in 2019, writes about OAuth, presented on "
        "August 19, 2026, his team uses Azure, and he mentors at Microsoft MVP events."
    )
    reply = _reply(
        to_delete=ids,
        to_save=[
            {
                "content": merged_text,
                "category": "people/colleagues",
                "tags": ["people"],
                "sourceIds": ids,
                "importance": 0.7,
            }
        ],
    )
    # By default one cycle archives at most a fifth of a 13-entry store: the merge waits,
    # unstamped, and nothing is archived.
    llm.replies.append(reply)
    waited = await _consolidate(client, queue, agent)
    assert waited.merged == [] and waited.deferred_by_budget == 13 and waited.stamped == 0
    assert len(FileMemoryStore(settings.data_dir, agent).entries()) == 13
    # An operator who allows a whole store to be consolidated in one cycle gets it.
    llm.replies.append(reply)
    result = await _consolidate(client, queue, agent, archive_share=1.0)
    assert len(result.merged) == 1 and result.rejected == [] and result.pruned == []
    assert result.archived_with_replacement == 13
    after = FileMemoryStore(settings.data_dir, agent)
    (live,) = after.entries()
    assert live.id == result.merged[0].new_id and live.content == merged_text
    assert live.reinforcement_count == sum(range(1, 14)) == 91
    # Temporal arithmetic is the host's: created min, last seen max, subject time widened.
    assert live.created_at == T0 and live.last_seen_at == T0 + timedelta(days=12)
    assert live.metadata["subjectTimeStart"] == "2010"
    assert json.loads(live.metadata[MERGED_FROM]) == ids
    # The LLM asked for 0.7; a merge never rises above its most important source.
    assert live.metadata["mergedAt"] == AS_OF.isoformat() and live.importance_score == 0.4
    for eid in ids:
        assert after.get(eid).archive_reason == f"merged into {live.id}"


async def test_a_source_edited_during_the_llm_call_is_left_alone(worker, llm):
    client, queue, settings = worker
    agent = _agent()
    store = _store(settings, agent)
    a, b, c = _ids(3)
    store.create("Carl Franklin hosts a podcast with Richard.", entry_id=a, category="people")
    store.create("Carl Franklin hosts the podcast with Richard.", entry_id=b, category="people")
    store.create("status: waiting on the build", entry_id=c, category="status", importance=0.1)
    thinking = threading.Event()
    llm.replies.append(
        Reply(
            json.dumps(
                {
                    "toDelete": [c],
                    "toSave": [
                        {
                            "content": "Carl Franklin hosts a podcast with Richard.",
                            "category": "people",
                            "sourceIds": [a, b],
                        }
                    ],
                }
            ),
            hold=thinking,
        )
    )
    run = asyncio.ensure_future(_consolidate(client, queue, agent))
    for _ in range(200):
        if llm.requests:
            break
        await asyncio.sleep(0.05)
    store.update(b, content="Carl Franklin hosts the podcast with Richard Campbell.")
    store.update(c, content="status: waiting on the build for Lacey")
    thinking.set()
    result = await run
    assert result.merged == [] and result.pruned == [] and result.left_alone == 1
    after = FileMemoryStore(settings.data_dir, agent)
    assert len(after.entries()) == 3 and after.archived() == []
    assert after.get(a).consolidation_reviewed_hash == after.get(a).fingerprint
    assert after.get(b).consolidation_reviewed_hash is None  # changed: reviewed again later


@pytest.mark.parametrize("content", ["{not json", '{"toSave": [{"sourceIds": []}]}', "[1, 2]"])
async def test_malformed_llm_output_changes_nothing(worker, llm, content):
    client, queue, settings = worker
    agent = _agent()
    store = _store(settings, agent)
    a, b = _ids(2)
    store.create("PWOP Productions produces .NET Rocks.", entry_id=a, category="work")
    store.create("PWOP Productions produces .NET Rocks!", entry_id=b, category="work")
    before = tree_snapshot(store.memory_dir)
    llm.replies.append(Reply(content))
    result = await _consolidate(client, queue, agent)
    assert result.batches_failed == 1 and result.merged == [] and result.stamped == 0
    assert len(llm.requests) == 1  # non-retryable
    assert tree_snapshot(store.memory_dir) == before


async def test_a_repair_that_restores_the_specifics_is_accepted(worker, llm):
    client, queue, settings = worker
    agent = _agent()
    store = _store(settings, agent)
    a, b = _ids(2)
    store.create("Matt and Lacey joined the Blazor class on Friday.", entry_id=a, category="class")
    store.create("Matt joined the Blazor class.", entry_id=b, category="class")
    lossy = {"content": "Matt joined the Blazor class.", "category": "class", "sourceIds": [a, b]}
    llm.replies += [
        _reply(to_save=[lossy]),
        Reply(json.dumps({"content": "Matt and Lacey joined the Blazor class on Friday."})),
    ]
    result = await _consolidate(client, queue, agent)
    assert result.repaired == 1 and len(result.merged) == 1 and result.rejected == []
    after = FileMemoryStore(settings.data_dir, agent)
    assert [e.content for e in after.entries()] == [
        "Matt and Lacey joined the Blazor class on Friday."
    ]


async def test_a_second_cycle_withholds_what_was_reviewed(worker, llm):
    client, queue, settings = worker
    agent = _agent()
    store = _store(settings, agent)
    a, b = _ids(2)
    store.create("The Denver office is on Larimer Street.", entry_id=a, category="places")
    store.create("Nancy prefers tea over coffee.", entry_id=b, category="people")
    llm.replies.append(_reply())
    first = await _consolidate(client, queue, agent)
    assert first.reviewed == 2 and first.stamped == 2
    second = await _consolidate(client, queue, agent, as_of=AS_OF + timedelta(hours=12))
    assert second.reviewed == 0 and second.withheld == 2 and len(llm.requests) == 1
    # Decay rewrites importance and updatedAt, not content: still withheld.
    store.update(a, importance_score=0.3, updated_at=AS_OF + timedelta(days=1))
    store.create("Nancy's dog is called Rose.", entry_id="a00000000009", category="people")
    llm.replies.append(_reply())
    third = await _consolidate(client, queue, agent, as_of=AS_OF + timedelta(days=1))
    assert third.reviewed == 1 and _prompt_ids(llm.requests[1]) == ["a00000000009"]


async def test_without_an_llm_only_the_deterministic_steps_run(worker, caplog):
    client, queue, settings = worker
    agent = _agent()
    clock = {"now": T0}
    store = FileMemoryStore(settings.data_dir, agent, clock=lambda: clock["now"])
    first = store.create("Xebia is Allen's employer.", category="work", tags=["a"])
    clock["now"] = T0 + timedelta(days=1)
    copy = store.create("Xebia  is Allen's employer.", category="work", tags=["b"])
    with caplog.at_level("INFO"):
        result = await _consolidate(client, queue, agent)
    assert result.folded == 1 and result.llm_skipped and result.reviewed == 1
    after = FileMemoryStore(settings.data_dir, agent)
    survivor = after.get(first.id)
    assert survivor.reinforcement_count == 2 and survivor.tags == ["a", "b"]
    assert after.get(copy.id).archive_reason == f"merged into {first.id}"
    messages = [r.getMessage() for r in caplog.records]
    assert any("no LLM configured" in m for m in messages)
    assert any("merge-coverage vocabulary from built-in baseline" in m for m in messages)


async def test_a_malformed_vocabulary_is_reported_once_per_cycle(worker, caplog):
    """One warning and one summary line per cycle, not one from the loader and another
    from the activity that called it."""
    from dreamkeeper.stores.search.vocabulary import FILE_NAME

    client, queue, settings = worker
    agent = _agent()
    store = FileMemoryStore(settings.data_dir, agent, clock=lambda: T0)
    store.create("Xebia is Allen's employer.", category="work")
    (store.root / FILE_NAME).write_text('{"alwaysSpecificWords": "May"}')
    with caplog.at_level("INFO"):
        await _consolidate(client, queue, agent)
    messages = [r.getMessage() for r in caplog.records]
    warned = [r for r in caplog.records if "coverage checking stays on" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelname == "WARNING", messages
    assert f"consolidation {agent}: " in warned[0].getMessage()
    assert sum("merge-coverage vocabulary from" in m for m in messages) == 1, messages
