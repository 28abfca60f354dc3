"""Approval of a dream's risky changes: an unapproved risky merge is never applied
(rejected, or timed out and dropped); what is not risky applies as before."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta

from temporalio.api.sdk.v1 import WorkflowMetadata

from dreamkeeper.core.dream_payloads import ConsolidationInput, ConsolidationResult
from dreamkeeper.core.dream_plan import ApprovalDecision, ApprovalState
from dreamkeeper.stores.dream_state.dream_settings import write_approval
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.testing.scripted_llm import Reply
from dreamkeeper.workflows.consolidation import Consolidation

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
HV1, HV2, P1, P2, CH = (f"{p}{2:011d}" for p in "abcde")


def _seed(settings, agent):
    store = FileMemoryStore(settings.data_dir, agent, clock=lambda: T0)
    store.create("Trish Roberts lives in Atlanta.", category="people", entry_id=HV1, importance=0.9)
    store.create("Trish Roberts lives in Atlanta, Georgia.", category="people", entry_id=HV2)
    store.create("Duane Lhotka likes hiking.", category="people", entry_id=P1)
    store.create("Duane Lhotka likes hiking a lot.", category="people", entry_id=P2)
    store.create("checking the build status for run 4411", category="status", entry_id=CH)
    return store


def _reply() -> Reply:
    return Reply(
        json.dumps(
            {
                "toDelete": [CH],
                "toSave": [
                    {
                        "content": "Trish Roberts lives in Atlanta, Georgia.",
                        "category": "people",
                        "sourceIds": [HV1, HV2],
                    },
                    {
                        "content": "Duane Lhotka likes hiking a lot.",
                        "category": "people",
                        "sourceIds": [P1, P2],
                    },
                ],
            }
        )
    )


async def _start(client, queue, agent, **options):
    return await client.start_workflow(
        Consolidation.run,
        ConsolidationInput(agent_id=agent, as_of=T0 + timedelta(days=1), **options),
        id=f"consolidation-{agent}",
        task_queue=queue,
        result_type=ConsolidationResult,
    )


async def _pending(handle) -> ApprovalState:
    while True:  # until the workflow reaches its approval step (no time is asserted)
        state = await handle.query("pending", result_type=ApprovalState)
        if state.pending:
            return state
        await asyncio.sleep(0.2)


async def test_a_rejected_risky_merge_is_never_applied_and_the_rest_is(worker, llm):
    client, queue, settings = worker
    agent = f"ap-{uuid.uuid4().hex[:6]}"
    _seed(settings, agent)
    llm.replies.append(_reply())
    handle = await _start(client, queue, agent, approval="risky", risky_prunes=0)
    state = await _pending(handle)
    keys = {p.key: p for p in state.pending}
    merge_key = next(k for k in keys if k.startswith("merge:"))
    assert keys[merge_key].ids == [HV1, HV2] and "high-value" in keys[merge_key].why
    assert f"prune:{CH}" in keys  # over risky_prunes=0
    assert not any(HV1 not in p.ids and p.kind == "merge" for p in state.pending)
    assert "awaiting approval" in (await _current_details(handle))
    await handle.execute_update("reject", ApprovalDecision(keys=[merge_key]))
    after = await handle.execute_update("approve", ApprovalDecision(), result_type=ApprovalState)
    assert after.pending == [] and after.approved == [f"prune:{CH}"]
    result = await handle.result()
    assert [m.sources for m in result.merged] == [[P1, P2]]
    assert ([HV1, HV2], "rejected by the operator") in [
        (r.sources, r.reason) for r in result.rejected
    ]
    assert result.pruned == [CH]
    live = {e.id for e in FileMemoryStore(settings.data_dir, agent).entries()}
    assert {HV1, HV2} <= live and CH not in live


async def test_a_risky_merge_nobody_approves_is_dropped_at_the_timeout(worker, llm):
    client, queue, settings = worker
    agent = f"ap-{uuid.uuid4().hex[:6]}"
    _seed(settings, agent)
    llm.replies.append(_reply())
    handle = await _start(client, queue, agent, approval="risky", approval_timeout_minutes=0.02)
    result = await handle.result()
    assert [m.sources for m in result.merged] == [[P1, P2]]
    assert ([HV1, HV2], "approval timed out") in [(r.sources, r.reason) for r in result.rejected]
    assert result.pruned == [CH]  # one prune is not over the default count: not risky
    store = FileMemoryStore(settings.data_dir, agent)
    assert {HV1, HV2} <= {e.id for e in store.entries()}
    # Dropped, not declined: left unstamped, so the next cycle proposes it again.
    assert store.get(HV1).consolidation_reviewed_hash is None


async def _current_details(handle) -> str:
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return meta.current_details


async def test_the_agents_own_setting_makes_its_cycles_wait(worker, llm):
    client, queue, settings = worker
    agent = f"ap-{uuid.uuid4().hex[:6]}"
    store = _seed(settings, agent)
    write_approval(store.documents, "all")
    llm.replies.append(_reply())
    handle = await _start(client, queue, agent, archive_share=1.0)  # approval: off here
    state = await _pending(handle)
    assert {p.kind for p in state.pending} == {"merge", "prune"}
    await handle.execute_update("approve", ApprovalDecision())
    result = await handle.result()
    assert len(result.merged) == 2 and result.pruned == [CH]
