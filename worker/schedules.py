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
from dreamkeeper.client.codec import plain_payload
from dreamkeeper.core.names import DREAM_SCHEDULE_ID
from dreamkeeper.core.payloads import SweepInput
from dreamkeeper.workflows.sweep import DreamSweep

DEFAULT_TASK_QUEUE = "dreamkeeper"


def schedule_id_for(task_queue: str) -> str:
    """One dream schedule per task queue (per shard: each host sweeps its own agents);
    the default queue keeps the historical id."""
    return (
        DREAM_SCHEDULE_ID
        if task_queue == DEFAULT_TASK_QUEUE
        else f"{DREAM_SCHEDULE_ID}-{task_queue}"
    )


SWEEP_SUMMARY = "dream cycle for every agent with a store"


def dream_schedule(task_queue: str, cron: str, parallelism: int | None = None) -> Schedule:
    suffix = "" if task_queue == DEFAULT_TASK_QUEUE else f"-{task_queue}"
    action = ScheduleActionStartWorkflow(
        DreamSweep.run,
        SweepInput(parallelism=parallelism),
        id=f"dream-sweep{suffix}",
        task_queue=task_queue,
        typed_search_attributes=tagged(None, "sweep"),
    )
    # Fixed text, no content: left unsealed, so `temporal schedule describe` reads the
    # schedule without a codec (a sealed summary makes it fail outright).
    action.static_summary = plain_payload(SWEEP_SUMMARY)
    return Schedule(
        action=action,
        spec=ScheduleSpec(cron_expressions=[cron]),
        policy=SchedulePolicy(
            overlap=ScheduleOverlapPolicy.SKIP, catchup_window=timedelta(minutes=10)
        ),
    )


async def ensure_dream_schedule(
    client: Client,
    task_queue: str,
    cron: str,
    schedule_id: str | None = None,
    *,
    parallelism: int | None = None,
) -> str:
    """Create the schedule, or bring an existing one's action and spec up to date while
    keeping its state (paused, note). Returns "created" or "updated"."""
    schedule_id = schedule_id or schedule_id_for(task_queue)
    wanted = dream_schedule(task_queue, cron, parallelism)
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
