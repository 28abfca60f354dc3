"""Dream: an agent's maintenance cycle, each pass a child workflow with one `as_of`:
purge → consolidation → preference inference → decay.

Purge runs first so the cycle works on what retention keeps; consolidation before decay
so merge arithmetic sees importance as it stood; preference inference after
consolidation so what it saves is reviewed next cycle, not merged in the same one.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.dream_payloads import (
        ConsolidationInput,
        ConsolidationResult,
        DreamInput,
        DreamResult,
        PreferenceInput,
        PreferenceResult,
    )
    from dreamkeeper.activities.payloads import DecayInput, DecayResult, PurgeInput, PurgeResult
    from dreamkeeper.workflows.consolidation import Consolidation
    from dreamkeeper.workflows.maintenance import ArchivePurge, ImportanceDecay
    from dreamkeeper.workflows.observability import tagged
    from dreamkeeper.workflows.preferences import PreferenceInference


def dream_workflow_id(agent_id: str) -> str:
    return f"dream-{agent_id}"


@workflow.defn(name="Dream")
class Dream:
    @workflow.run
    async def run(self, inp: DreamInput) -> DreamResult:
        # One as_of for the whole cycle, so every pass sees the same "now".
        as_of = inp.as_of or workflow.now()
        agent = inp.agent_id
        run_id = workflow.info().workflow_id

        def child(op: str) -> dict:
            return {
                "id": f"{run_id}-{op}",
                "static_summary": f"{op} for agent {agent}",
                "search_attributes": tagged(agent, op),
            }

        workflow.set_current_details("step 1/4: purging archived entries past retention")
        purge: PurgeResult = await workflow.execute_child_workflow(
            ArchivePurge.run, PurgeInput(agent_id=agent, as_of=as_of), **child("purge")
        )
        workflow.set_current_details("step 2/4: consolidation")
        consolidation: ConsolidationResult = await workflow.execute_child_workflow(
            Consolidation.run,
            ConsolidationInput(agent_id=agent, as_of=as_of, **inp.consolidation.model_dump()),
            **child("consolidation"),
        )
        workflow.set_current_details("step 3/4: preference inference")
        preferences: PreferenceResult = await workflow.execute_child_workflow(
            PreferenceInference.run,
            PreferenceInput(agent_id=agent, as_of=as_of),
            **child("preferences"),
        )
        workflow.set_current_details("step 4/4: importance decay")
        decay: DecayResult = await workflow.execute_child_workflow(
            ImportanceDecay.run, DecayInput(agent_id=agent, as_of=as_of), **child("decay")
        )
        summary = (
            f"purged {len(purge.purged)}; {consolidation.summary()}; "
            f"{len(preferences.saved)} preference(s) inferred; "
            f"decayed {decay.decayed} of {decay.considered}"
        )
        workflow.logger.info("dream cycle complete for %s — %s", agent, summary)
        workflow.set_current_details(f"done: {summary}")
        return DreamResult(
            agent_id=agent, as_of=as_of, purge=purge, consolidation=consolidation,
            preferences=preferences, decay=decay,
        )  # fmt: skip
