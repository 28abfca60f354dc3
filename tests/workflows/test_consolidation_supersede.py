"""Consolidation marks outdated entries as superseded instead of pruning them: real
worker, real dev server, scripted LLM (invariant 20)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

from dreamkeeper.core.dream_payloads import ConsolidationInput, ConsolidationResult
from dreamkeeper.core.dream_plan import ApplyPlanInput, ApplyPlanResult, UndoInput, UndoResult
from dreamkeeper.core.names import APPLY_DREAM_PLAN, UNDO_DREAM
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.testing.scripted_llm import Reply
from dreamkeeper.workflows.consolidation import Consolidation

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
AS_OF = T0 + timedelta(days=200)


def _setup(settings):
    agent = f"v-{uuid.uuid4().hex[:6]}"
    store = FileMemoryStore(settings.data_dir, agent, clock=lambda: AS_OF)
    old = store.create(
        "Maya Lund lives in Lisbon.", category="people", entry_id="a00000000001", now=T0
    )
    new = store.create(
        "Maya Lund lives in Porto.",
        category="people",
        entry_id="a00000000002",
        now=T0 + timedelta(days=90),
    )
    other = store.create(
        "Tom Berg works at Vexa.", category="people", entry_id="a00000000003", now=T0
    )
    work = store.create(
        "Maya Lund's desk is on floor 3.",
        category="work",
        entry_id="a00000000004",
        now=T0 + timedelta(days=100),
    )
    return agent, store, old, new, other, work


def _reply(old, new, other, work) -> Reply:
    return Reply(
        json.dumps(
            {
                # The outdated entry is also proposed as a prune: it must not be archived.
                "toDelete": [old.id],
                "toSave": [],
                "superseded": [
                    {"id": old.id, "by": new.id},  # right
                    {"id": other.id, "by": new.id},  # another subject
                    {"id": new.id, "by": work.id},  # another category
                    {"id": work.id, "by": "ffffffffffff"},  # never shown
                ],
            }
        )
    )


async def _run(client, queue, agent, **kw) -> ConsolidationResult:
    return await client.execute_workflow(
        Consolidation.run,
        ConsolidationInput(agent_id=agent, as_of=AS_OF, **kw),
        id=f"consolidation-{agent}-{uuid.uuid4().hex[:4]}",
        task_queue=queue,
        result_type=ConsolidationResult,
    )


async def test_an_outdated_entry_is_superseded_not_pruned_and_wrong_proposals_are_refused(
    worker, llm
):
    client, queue, settings = worker
    agent, store, old, new, other, work = _setup(settings)
    llm.replies.append(_reply(old, new, other, work))
    result = await _run(client, queue, agent, cycle_id="cycle-sup-1")
    assert result.superseded == [old.id]
    assert result.pruned == []
    after = store.require(old.id)
    assert after.superseded_by == new.id and not after.is_archived
    assert after.content == old.content
    for untouched in (new, other, work):
        assert store.require(untouched.id).is_current
    assert set(result.refused_supersedes) == {other.id}

    # Dream undo puts it back.
    undone = await client.execute_workflow(
        UNDO_DREAM,
        UndoInput(agent_id=agent, cycle_id="cycle-sup-1"),
        id=f"undo-{agent}",
        task_queue=queue,
        result_type=UndoResult,
    )
    assert old.id in undone.restored
    assert store.require(old.id).is_current


async def test_the_dry_run_plan_shows_the_supersedes_and_changes_nothing(worker, llm):
    client, queue, settings = worker
    agent, store, old, new, other, work = _setup(settings)
    before = {e.id: e for e in store.entries()}
    llm.replies.append(_reply(old, new, other, work))
    result = await _run(client, queue, agent, dry_run=True)
    assert result.plan is not None
    assert [(p.id, p.by) for p in result.plan.supersedes] == [(old.id, new.id)]
    assert {e.id: e for e in store.entries()} == before
    # Applying the plan does exactly it; undoing that takes it back.
    applied = await client.execute_workflow(
        APPLY_DREAM_PLAN,
        ApplyPlanInput(plan=result.plan),
        id=f"apply-{agent}",
        task_queue=queue,
        result_type=ApplyPlanResult,
    )
    assert applied.superseded == [old.id]
    assert store.require(old.id).superseded_by == new.id
    await client.execute_workflow(
        UNDO_DREAM,
        UndoInput(agent_id=agent, cycle_id=applied.cycle_id),
        id=f"undo-{agent}",
        task_queue=queue,
        result_type=UndoResult,
    )
    assert store.require(old.id).is_current


async def test_the_dream_never_supersedes_a_high_value_entry(worker, llm):
    client, queue, settings = worker
    agent, store, old, new, other, work = _setup(settings)
    store.update_importance(old.id, 0.9)
    llm.replies.append(_reply(old, new, other, work))
    result = await _run(client, queue, agent)
    assert result.superseded == []
    assert result.refused_supersedes[old.id] == "above the high-value floor"
    assert store.require(old.id).is_current and not store.require(old.id).is_archived
