"""A dream cycle's dry run: purge selection, folding, gating, the LLM's proposals,
validation and repair, prune rules and decay — each pass deciding exactly as it would,
none of them writing. The embedding backfill (it writes vectors) and preference
inference (it rotates the conversation log and saves) are not run: the plan says so.

The result's `plan` is what `ApplyDreamPlan` takes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.client.attributes import tagged
    from dreamkeeper.core.dream_payloads import (
        ConsolidationInput,
        ConsolidationResult,
        DreamInput,
        DreamResult,
        PreferenceResult,
    )
    from dreamkeeper.core.dream_plan import DreamPlan
    from dreamkeeper.core.payloads import DecayInput, DecayResult, PurgeInput, PurgeResult
    from dreamkeeper.workflows.consolidation import Consolidation
    from dreamkeeper.workflows.maintenance import ArchivePurge, ImportanceDecay

STEP_TIMEOUT = timedelta(minutes=90)
NOT_PLANNED = [
    "embedding backfill (it writes vectors; clustering used the vectors there are)",
    "preference inference (it rotates the conversation log)",
]


async def dry_run(inp: DreamInput, as_of: datetime) -> DreamResult:
    agent = inp.agent_id
    run_id = workflow.info().workflow_id

    def child(op: str) -> dict:
        return {
            "id": f"{run_id}-dry-{op}",
            "static_summary": f"dry run: {op} for agent {agent}",
            "search_attributes": tagged(agent, op),
            "execution_timeout": STEP_TIMEOUT,
        }

    workflow.set_current_details("dry run 1/3: purge selection")
    purge: PurgeResult = await workflow.execute_child_workflow(
        ArchivePurge.run,
        PurgeInput(agent_id=agent, as_of=as_of, store_id=inp.store_id, dry_run=True),
        **child("purge"),
    )
    workflow.set_current_details("dry run 2/3: consolidation")
    options = inp.consolidation.model_dump() | {"dry_run": True}
    consolidation: ConsolidationResult = await workflow.execute_child_workflow(
        Consolidation.run,
        ConsolidationInput(agent_id=agent, as_of=as_of, store_id=inp.store_id, **options),
        **child("consolidation"),
    )
    plan = consolidation.plan or DreamPlan(agent_id=agent, as_of=as_of)
    archived = [s for m in plan.merges for s in m.sources] + [p.id for p in plan.prunes]
    archived += [c for f in plan.folds for c in f.copies]
    workflow.set_current_details("dry run 3/3: importance decay")
    decay: DecayResult = await workflow.execute_child_workflow(
        ImportanceDecay.run,
        DecayInput(
            agent_id=agent, as_of=as_of, store_id=inp.store_id, dry_run=True, exclude=archived
        ),
        **child("decay"),
    )
    plan = plan.model_copy(
        update={
            "purge": purge.purged,
            "purge_revisions": purge.revisions,
            "decay": decay.planned,
            "skipped": NOT_PLANNED
            + ([consolidation.llm_skipped] if consolidation.llm_skipped else []),
        }
    )
    workflow.set_current_details(f"done (dry run, nothing applied): {plan.summary()}")
    return DreamResult(
        agent_id=agent,
        as_of=as_of,
        purge=purge,
        consolidation=consolidation,
        preferences=PreferenceResult(agent_id=agent, skipped="dry run"),
        decay=decay,
        cycle_id=workflow.info().run_id,
        plan=plan,
    )
