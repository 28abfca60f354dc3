"""DreamSweep: what the schedule runs. Starts `dream-{agent}` for every agent with a store.

Schedules append a timestamp to the ids they start, so the sweep — not the schedule —
starts each agent's Dream under its fixed id: a dream already running for an agent (a
manual one, or a slow previous cycle) makes the start fail, and the sweep skips it.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.agents import AgentActivities
    from dreamkeeper.client.attributes import tagged
    from dreamkeeper.core import names
    from dreamkeeper.core.dream_payloads import DreamInput
    from dreamkeeper.core.names import DREAM_TIMEOUT, dream_workflow_id
    from dreamkeeper.core.payloads import SweepInput, SweepResult
    from dreamkeeper.workflows.dream import Dream
    from dreamkeeper.workflows.options import STORE_STEP, with_summary


@workflow.defn(name=names.DREAM_SWEEP)
class DreamSweep:
    @workflow.run
    async def run(self, _: SweepInput) -> SweepResult:
        agents: list[str] = await workflow.execute_activity_method(
            AgentActivities.list_agents, **with_summary(STORE_STEP, "list agents with a store")
        )
        result = SweepResult()
        as_of = workflow.now()
        handles = []
        for agent in agents:
            try:
                handle = await workflow.start_child_workflow(
                    Dream.run,
                    DreamInput(agent_id=agent, as_of=as_of),
                    id=dream_workflow_id(agent),
                    static_summary=f"scheduled dream for agent {agent}",
                    search_attributes=tagged(agent, "dream"),
                    execution_timeout=DREAM_TIMEOUT,
                )
            except WorkflowAlreadyStartedError:
                result.already_running.append(agent)
                continue
            result.started.append(agent)
            handles.append((agent, handle))
        running = ", ".join(result.already_running[:20])
        workflow.set_current_details(
            f"dreaming for {len(result.started)} agent(s); "
            f"{len(result.already_running)} already running" + (f" ({running})" if running else "")
        )
        if result.already_running:
            workflow.logger.warning(
                "dream sweep: a cycle is still running for %s; skipped (each cycle ends within %s)",
                running,
                DREAM_TIMEOUT,
            )
        outcomes = await asyncio.gather(*(h for _, h in handles), return_exceptions=True)
        result.failed = [
            a for (a, _), o in zip(handles, outcomes, strict=True) if isinstance(o, BaseException)
        ]
        workflow.set_current_details(
            f"done: {len(result.started) - len(result.failed)} dreamed, "
            f"{len(result.already_running)} skipped (running), {len(result.failed)} failed"
        )
        return result
