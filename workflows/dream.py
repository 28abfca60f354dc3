"""Dream: an agent's maintenance cycle. For now purge, then decay, as child workflows."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.payloads import (
        DecayInput,
        DecayResult,
        DreamInput,
        DreamResult,
        PurgeInput,
        PurgeResult,
    )
    from dreamkeeper.workflows.maintenance import ArchivePurge, ImportanceDecay
    from dreamkeeper.workflows.observability import tagged


def dream_workflow_id(agent_id: str) -> str:
    return f"dream-{agent_id}"


@workflow.defn(name="Dream")
class Dream:
    @workflow.run
    async def run(self, inp: DreamInput) -> DreamResult:
        # One as_of for the whole cycle, so every pass sees the same "now".
        as_of = inp.as_of or workflow.now()
        run_id = workflow.info().workflow_id
        workflow.set_current_details("step 1/2: purging archived entries past retention")
        purge: PurgeResult = await workflow.execute_child_workflow(
            ArchivePurge.run,
            PurgeInput(agent_id=inp.agent_id, as_of=as_of),
            id=f"{run_id}-purge",
            static_summary=f"purge for agent {inp.agent_id}",
            search_attributes=tagged(inp.agent_id, "purge"),
        )
        workflow.set_current_details("step 2/2: importance decay")
        decay: DecayResult = await workflow.execute_child_workflow(
            ImportanceDecay.run,
            DecayInput(agent_id=inp.agent_id, as_of=as_of),
            id=f"{run_id}-decay",
            static_summary=f"decay for agent {inp.agent_id}",
            search_attributes=tagged(inp.agent_id, "decay"),
        )
        workflow.set_current_details(
            f"done: purged {len(purge.purged)}, decayed {decay.decayed} of {decay.considered}"
        )
        return DreamResult(agent_id=inp.agent_id, as_of=as_of, purge=purge, decay=decay)
