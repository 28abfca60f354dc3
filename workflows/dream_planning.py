"""A dry run's plan: built from what the cycle decided, completed with the
revisions of every entry it names (one read-only activity), so applying it later can
refuse any part whose entries moved on."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.dream_review import DreamReviewActivities
    from dreamkeeper.core.dream_payloads import ConsolidationResult, MergeCheck
    from dreamkeeper.core.dream_plan import (
        DreamPlan,
        PlanDetailInput,
        PlannedMerge,
        Refusal,
    )
    from dreamkeeper.workflows.options import SCAN_STEP, with_summary


def planned_merge(new_id: str, check: MergeCheck) -> PlannedMerge:
    merge = check.merge
    return PlannedMerge(
        new_id=new_id,
        sources=list(merge.source_ids),
        shown=dict(check.shown),
        content=merge.content,
        category=merge.category,
        tags=list(merge.tags),
        importance=merge.importance,
    )


def refusals(res: ConsolidationResult) -> list[Refusal]:
    out = []
    for rejected in res.rejected:
        reason = rejected.reason or f"drops {rejected.dropped} specific(s) of its sources"
        out.append(Refusal(ids=list(rejected.sources), reason=f"merge refused: {reason}"))
    for entry_id, reason in res.refused_prunes.items():
        out.append(Refusal(ids=[entry_id], reason=f"prune refused: {reason}"))
    for entry_id in res.protected:
        out.append(Refusal(ids=[entry_id], reason="prune refused: above the high-value floor"))
    if res.deferred_by_budget:
        out.append(
            Refusal(ids=[], reason=f"{res.deferred_by_budget} archive(s) left by the budget")
        )
    return out


async def complete_plan(plan: DreamPlan, res: ConsolidationResult) -> DreamPlan:
    ids = sorted({s for m in plan.merges for s in m.sources} | {p.id for p in plan.prunes})
    revisions = {}
    if ids:
        detail = await workflow.execute_activity_method(
            DreamReviewActivities.plan_details,
            PlanDetailInput(agent_id=plan.agent_id, ids=ids),
            **with_summary(SCAN_STEP, f"plan: revisions of {len(ids)} entr(ies)"),
        )
        revisions = detail.revisions
    merges = [
        m.model_copy(update={"revisions": {s: revisions.get(s, -1) for s in m.sources}})
        for m in plan.merges
    ]
    prunes = [p.model_copy(update={"revision": revisions.get(p.id, -1)}) for p in plan.prunes]
    return plan.model_copy(update={"merges": merges, "prunes": prunes, "refusals": refusals(res)})
