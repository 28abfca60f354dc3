"""The dream schedule: created at start-up, idempotently, keeping an operator's pause."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)

from dreamkeeper.client.attributes import tagged
from dreamkeeper.core.names import DREAM_SCHEDULE_ID
from dreamkeeper.core.payloads import SweepInput
from dreamkeeper.workflows.sweep import DreamSweep


def dream_schedule(task_queue: str, cron: str) -> Schedule:
    return Schedule(
        action=ScheduleActionStartWorkflow(
            DreamSweep.run,
            SweepInput(),
            id="dream-sweep",
            task_queue=task_queue,
            static_summary="dream cycle for every agent with a store",
            typed_search_attributes=tagged(None, "sweep"),
        ),
        spec=ScheduleSpec(cron_expressions=[cron]),
        policy=SchedulePolicy(
            overlap=ScheduleOverlapPolicy.SKIP, catchup_window=timedelta(minutes=10)
        ),
    )


async def ensure_dream_schedule(
    client: Client, task_queue: str, cron: str, schedule_id: str = DREAM_SCHEDULE_ID
) -> str:
    """Create the schedule, or bring an existing one's action and spec up to date while
    keeping its state (paused, note). Returns "created" or "updated"."""
    wanted = dream_schedule(task_queue, cron)
    try:
        await client.create_schedule(schedule_id, wanted)
        return "created"
    except ScheduleAlreadyRunningError:
        pass

    def update(current: ScheduleUpdateInput) -> ScheduleUpdate:
        kept = current.description.schedule
        return ScheduleUpdate(
            schedule=dataclasses.replace(
                kept, action=wanted.action, spec=wanted.spec, policy=wanted.policy
            )
        )

    await client.get_schedule_handle(schedule_id).update(update)
    return "updated"
