"""DreamSweep: what the schedule runs. Starts `dream-{agent}` for every agent with a store,
at most `parallelism` at once (a worker hosting a thousand agents does not start a
thousand dreams together: each starts as an earlier one ends).

Schedules append a timestamp to the ids they start, so the sweep — not the schedule —
starts each agent's Dream under its fixed id: a dream already running for an agent (a
manual one, or a slow previous cycle) makes the start fail, and the sweep skips it.

Before starting any, the sweep asks which agents have work (the cycle's own idle check,
a batch of agents per activity): an agent with nothing to do in any pass gets no cycle
at all, so a sweep's cost grows with the active agents, not all of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime

from temporalio import workflow
from temporalio.exceptions import ActivityError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.agents import AgentActivities
    from dreamkeeper.activities.idle import IdleCheckActivities
    from dreamkeeper.client.attributes import tagged
    from dreamkeeper.core import names
    from dreamkeeper.core.dream_payloads import DreamInput, WorkInput, WorkResult
    from dreamkeeper.core.names import DREAM_TIMEOUT, dream_workflow_id
    from dreamkeeper.core.payloads import DEFAULT_SWEEP_PARALLELISM, SweepInput, SweepResult
    from dreamkeeper.workflows.dream import Dream, tag_if_untagged
    from dreamkeeper.workflows.options import SCAN_STEP, STORE_STEP, with_summary


PACED = "sweep-paced"  # a workflow.patched id (histories carry it): bounded parallelism
IDLE_CHECK = "sweep-idle-check"  # a workflow.patched id: agents with nothing to do skipped
CHECK_BATCH = 100  # agents per idle-check activity


@workflow.defn(name=names.DREAM_SWEEP)
class DreamSweep:
    @workflow.run
    async def run(self, inp: SweepInput) -> SweepResult:
        tag_if_untagged(None, "sweep")
        agents: list[str] = await workflow.execute_activity_method(
            AgentActivities.list_agents, **with_summary(STORE_STEP, "list agents with a store")
        )
        if workflow.patched(PACED):
            idle: list[str] = []
            as_of = None
            if workflow.patched(IDLE_CHECK):
                as_of = workflow.now()  # the check's "now" is the cycles' too
                agents, idle = await self._with_work(agents, as_of)
            parallelism = inp.parallelism or DEFAULT_SWEEP_PARALLELISM
            result = await self._paced(agents, parallelism, as_of)
            result.idle = idle
            return self._done(result)
        result = SweepResult()
        as_of = workflow.now()
        handles = []
        for agent in agents:
            handle = await self._start(agent, as_of, result)
            if handle is not None:
                handles.append((agent, handle))
        self._started_details(result)
        outcomes = await asyncio.gather(*(h for _, h in handles), return_exceptions=True)
        result.failed = [
            a for (a, _), o in zip(handles, outcomes, strict=True) if isinstance(o, BaseException)
        ]
        return self._done(result)

    async def _paced(
        self, agents: list[str], parallelism: int, as_of: datetime | None
    ) -> SweepResult:
        """Start dreams as earlier ones end, never more than `parallelism` running."""
        result = SweepResult()
        as_of = as_of or workflow.now()
        running: set[asyncio.Task] = set()
        names_of: dict[asyncio.Task, str] = {}
        for number, agent in enumerate(agents, start=1):
            while len(running) >= parallelism:
                done, pending = await workflow.wait(running, return_when=asyncio.FIRST_COMPLETED)
                running = set(pending)
                self._collect(done, names_of, result)
            handle = await self._start(agent, as_of, result)
            if handle is not None:
                running.add(handle)  # a child's handle is its task
                names_of[handle] = agent
            workflow.set_current_details(
                f"dreaming: {number}/{len(agents)} started, {len(running)} running "
                f"(at most {parallelism} at once), {len(result.already_running)} already running"
            )
        if running:
            done, _ = await workflow.wait(running)
            self._collect(done, names_of, result)
        result.failed.sort(key=agents.index)
        return result

    @staticmethod
    async def _with_work(agents: list[str], as_of: datetime) -> tuple[list[str], list[str]]:
        """Split the agents into those with work for a cycle and the idle, a batch of
        agents per check; a failed check counts its whole batch as having work."""
        busy: list[str] = []
        idle: list[str] = []
        for start in range(0, len(agents), CHECK_BATCH):
            batch = agents[start : start + CHECK_BATCH]
            workflow.set_current_details(f"checking for work: {start}/{len(agents)} agents")
            try:
                got: WorkResult = await workflow.execute_activity_method(
                    IdleCheckActivities.dream_work,
                    WorkInput(agent_ids=batch, as_of=as_of),
                    **with_summary(SCAN_STEP, f"which of {len(batch)} agents have work"),
                )
            except ActivityError as exc:
                workflow.logger.warning("dream sweep: idle check failed: %s", exc.cause or exc)
                busy += batch
                continue
            for work in got.agents:
                (idle if work.idle else busy).append(work.agent_id)
        return busy, idle

    @staticmethod
    def _collect(done: Iterable[asyncio.Task], names_of: dict, result: SweepResult) -> None:
        for task in done:
            if task.cancelled() or task.exception() is not None:
                result.failed.append(names_of[task])

    async def _start(self, agent: str, as_of, result: SweepResult):  # noqa: ANN001, ANN202
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
            return None
        result.started.append(agent)
        return handle

    @staticmethod
    def _started_details(result: SweepResult) -> None:
        running = ", ".join(result.already_running[:20])
        workflow.set_current_details(
            f"dreaming for {len(result.started)} agent(s); "
            f"{len(result.already_running)} already running" + (f" ({running})" if running else "")
        )

    @staticmethod
    def _done(result: SweepResult) -> SweepResult:
        if result.already_running:
            workflow.logger.warning(
                "dream sweep: a cycle is still running for %s; skipped (each cycle ends within %s)",
                ", ".join(result.already_running[:20]),
                DREAM_TIMEOUT,
            )
        workflow.set_current_details(
            f"done: {len(result.started) - len(result.failed)} dreamed, "
            f"{len(result.already_running)} skipped (running), {len(result.failed)} failed"
            + (f", {len(result.idle)} idle (nothing to do)" if result.idle else "")
        )
        return result
