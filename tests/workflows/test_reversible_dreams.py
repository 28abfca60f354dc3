"""Reversible dreams end to end: dry run, applying a plan, undo, the recall gate.

Real worker, real dev server, the scripted LLM over HTTP: each test seeds a store with
known ids and scripts the LLM's replies (the same replies for a dry run and the real run
it is compared with)."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta

from dreamkeeper.core.dream_payloads import ConsolidationOptions, DreamInput, DreamResult
from dreamkeeper.core.dream_plan import ApplyPlanInput, ApplyPlanResult, UndoInput, UndoResult
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.files.identity import ensure_identity
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.testing.scripted_llm import Reply
from dreamkeeper.workflows.dream import Dream
from dreamkeeper.workflows.dream_ops import ApplyDreamPlan, UndoDream

T0 = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
AS_OF = T0 + timedelta(days=120)  # past the decay grace and the archive retention
A, B, C, D1, D2, OLD, STALE, KEEP = (f"{p}{0:011d}" for p in "abcdef12")


def _agent() -> str:
    return f"r-{uuid.uuid4().hex[:6]}"


def _hashes(root) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _seed(settings, agent: str) -> FileMemoryStore:
    store = FileMemoryStore(settings.data_dir, agent, clock=lambda: T0)
    store.create("Trish Roberts lives in Atlanta, Georgia.", category="people", entry_id=A)
    store.create("Trish Roberts has lived in Atlanta since 2019.", category="people", entry_id=B)
    store.create("checking the build status for run 4411", category="status", entry_id=C)
    store.create("Allen Conway works at Xebia.", category="people/work", entry_id=D1)
    store.create("Allen Conway works at Xebia.", category="people/work", entry_id=D2)
    store.create("Old note about Denver parking.", category="notes", entry_id=OLD)
    store.archive(OLD, "deleted by agent tool", now=T0)
    store.create("Lacey Franklin likes green tea.", category="people", entry_id=STALE)
    store.create("The quarterly review is in Lisbon.", category="events", entry_id=KEEP)
    return store


def _honest_reply() -> Reply:
    merged = "Trish Roberts lives in Atlanta, Georgia, and has lived there since 2019."
    return Reply(
        json.dumps(
            {
                "toDelete": [C],
                "toSave": [{"content": merged, "category": "people", "sourceIds": [A, B]}],
            }
        )
    )


async def _dream(client, queue, agent, *, dry_run=False, wid=None) -> DreamResult:
    return await client.execute_workflow(
        Dream.run,
        DreamInput(agent_id=agent, as_of=AS_OF, dry_run=dry_run),
        id=wid or f"dream-{agent}-{uuid.uuid4().hex[:6]}",
        task_queue=queue,
        result_type=DreamResult,
    )


def _live(settings, agent) -> dict[str, tuple[str, float]]:
    store = FileMemoryStore(settings.data_dir, agent)
    return {e.id: (e.content, e.importance_score) for e in store.entries()}


async def test_a_dry_run_changes_no_file_and_plans_what_the_real_run_does(worker, llm):
    client, queue, settings = worker
    agent = _agent()
    _seed(settings, agent)
    ensure_identity(settings.data_dir)
    before = _hashes(settings.data_dir)
    llm.replies += [_honest_reply(), _honest_reply()]

    dry = await _dream(client, queue, agent, dry_run=True)
    assert _hashes(settings.data_dir) == before  # nothing on disk changed, not one byte
    plan = dry.plan
    assert plan is not None
    assert [m.sources for m in plan.merges] == [[A, B]]
    assert plan.merges[0].content.startswith("Trish Roberts lives in Atlanta")
    assert set(plan.merges[0].revisions) == {A, B}
    assert [p.id for p in plan.prunes] == [C]
    assert [(f.survivor, f.copies) for f in plan.folds] == [(D1, [D2])]
    assert plan.purge == [OLD]
    assert {d.id for d in plan.decay} >= {STALE, KEEP}
    assert all(d.after < d.before for d in plan.decay)

    real = await _dream(client, queue, agent)
    c = real.consolidation
    assert [(m.new_id, m.sources) for m in c.merged] == [(m.new_id, m.sources) for m in plan.merges]
    assert c.pruned == [p.id for p in plan.prunes]
    assert c.folded == sum(len(f.copies) for f in plan.folds)
    assert real.purge.purged == plan.purge
    store = FileMemoryStore(settings.data_dir, agent)
    decayed = {e.id: e.importance_score for e in store.entries()}
    for d in plan.decay:
        assert decayed[d.id] == d.after


async def test_applying_a_plan_does_exactly_it_and_refuses_a_changed_source(worker, llm):
    client, queue, settings = worker
    agent = _agent()
    store = _seed(settings, agent)
    llm.replies += [_honest_reply()]
    plan = (await _dream(client, queue, agent, dry_run=True)).plan
    assert plan is not None and plan.merges and plan.prunes
    # The operator's store moves on: B is reinforced (its revision changes) before apply.
    b = store.get(B)
    store.put(
        b.model_copy(update={"reinforcement_count": 2}),
        action=JournalAction.REINFORCED,
    )
    applied: ApplyPlanResult = await client.execute_workflow(
        ApplyDreamPlan.run,
        ApplyPlanInput(plan=plan),
        id=f"apply-{agent}",
        task_queue=queue,
        result_type=ApplyPlanResult,
    )
    assert applied.merged == []  # the merge reads B: refused, not applied over newer state
    assert any(B in r.ids and "changed since" in r.reason for r in applied.refused)
    assert applied.pruned == [C]  # the unchanged parts are applied
    assert applied.folded == [D2]
    assert applied.purged == [OLD]
    live = _live(settings, agent)
    assert A in live and B in live and C not in live and D2 not in live
    assert len(llm.requests) == 1  # applying a plan asks no LLM anything


async def test_undo_returns_the_live_set_and_reports_what_changed_since(worker, llm):
    client, queue, settings = worker
    agent = _agent()
    store = _seed(settings, agent)
    before = _live(settings, agent)
    llm.replies += [_honest_reply()]
    real = await _dream(client, queue, agent)
    assert real.cycle_id and real.consolidation.merged and real.consolidation.pruned
    after = _live(settings, agent)
    assert after != before
    # Someone reinforces KEEP after the cycle decayed it: undo must leave it alone.
    keep = store.get(KEEP)
    store.put(keep.model_copy(update={"reinforcement_count": 3}), action=JournalAction.REINFORCED)

    async def undo() -> UndoResult:
        return await client.execute_workflow(
            UndoDream.run,
            UndoInput(agent_id=agent, cycle_id=real.cycle_id),
            id=f"undo-{agent}-{uuid.uuid4().hex[:4]}",
            task_queue=queue,
            result_type=UndoResult,
        )

    result = await undo()
    assert KEEP in result.touched
    merged_id = real.consolidation.merged[0].new_id
    assert merged_id in result.archived
    restored = _live(settings, agent)
    expected = {i: v for i, v in before.items() if i != KEEP}
    assert {i: v for i, v in restored.items() if i != KEEP} == expected
    assert restored[KEEP][1] == after[KEEP][1]  # left as it was (decayed, reinforced)
    again = await undo()  # idempotent
    assert again.restored == [] and again.archived == []
    assert _live(settings, agent) == restored
    missing = await client.execute_workflow(
        UndoDream.run,
        UndoInput(agent_id=agent, cycle_id="no-such-cycle"),
        id=f"undo-{agent}-none",
        task_queue=queue,
        result_type=UndoResult,
    )
    assert missing.found is False


def _window_store(settings, agent):
    store = FileMemoryStore(settings.data_dir, agent, clock=lambda: T0)
    a, b, c, d = (f"{p}{1:011d}" for p in "3456")
    store.create("Trish prefers the window seat on long flights.", category="travel", entry_id=a)
    store.create("Trish prefers a seat near the front on flights.", category="travel", entry_id=b)
    store.create("Duane Lhotka likes hiking in Denver.", category="people", entry_id=c)
    store.create("Duane Lhotka goes hiking near Denver.", category="people", entry_id=d)
    for i in range(6):  # a corpus around them, so idf tells common from distinctive
        store.create(f"Meeting {i} about the long budget review.", category="notes")
    return store, (a, b, c, d)


async def test_the_recall_gate_undoes_a_merge_dropping_a_distinctive_word(worker, llm):
    client, queue, settings = worker
    agent = _agent()
    _, (a, b, c, d) = _window_store(settings, agent)
    lossy = "Trish prefers a seat near the front on long flights."  # no "window"
    honest = "Duane Lhotka likes hiking in and near Denver; he goes hiking there."
    llm.replies += [
        Reply(
            json.dumps(
                {
                    "toDelete": [],
                    "toSave": [
                        {"content": lossy, "category": "travel", "sourceIds": [a, b]},
                        {"content": honest, "category": "people", "sourceIds": [c, d]},
                    ],
                }
            )
        )
    ]
    result = await client.execute_workflow(
        Dream.run,
        DreamInput(agent_id=agent, as_of=T0 + timedelta(days=1)),
        id=f"dream-{agent}",
        task_queue=queue,
        result_type=DreamResult,
    )
    c_ = result.consolidation
    # Coverage accepted both (no specific is lost); the gate undid the lossy one.
    assert [m.sources for m in c_.merged] == [[c, d]]
    assert [(r.sources, r.reason) for r in c_.rejected] == [([a, b], "recall regression")]
    assert c_.gate_checked >= 2 and c_.gate_seconds > 0
    live = _live(settings, agent)
    assert a in live and b in live  # the sources are back
    assert c not in live and d not in live


async def test_the_recall_gate_can_be_turned_off(worker, llm):
    client, queue, settings = worker
    agent = _agent()
    _, (a, b, _c, _d) = _window_store(settings, agent)
    lossy = "Trish prefers a seat near the front on long flights."
    llm.replies += [
        Reply(
            json.dumps(
                {
                    "toDelete": [],
                    "toSave": [{"content": lossy, "category": "travel", "sourceIds": [a, b]}],
                }
            )
        )
    ]
    result = await client.execute_workflow(
        Dream.run,
        DreamInput(
            agent_id=agent,
            as_of=T0 + timedelta(days=1),
            consolidation=ConsolidationOptions(recall_gate=False),
        ),
        id=f"dream-{agent}",
        task_queue=queue,
        result_type=DreamResult,
    )
    assert [m.sources for m in result.consolidation.merged] == [[a, b]]
    assert result.consolidation.gate_checked == 0
