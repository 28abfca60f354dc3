"""Whether a worker took a workflow, as Temporal sees it. A caller that gave up waiting
on a save tells "no worker runs" apart from "a worker runs it and keeps retrying": the
save's first step is a local activity, which records nothing in Temporal (no pending
activity, no failure) until it gives up, so the workflow's tasks are all there is to
see. A forget's step is an ordinary activity: a started one is a worker at work (it
heartbeats, so a dead worker's is retried).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.api.enums.v1 import EventType, PendingActivityState, PendingWorkflowTaskState
from temporalio.client import Client
from temporalio.service import RPCError

DESCRIBE_TIMEOUT = timedelta(seconds=5)
STARTED = PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED
ACTIVITY_STARTED = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED


async def worker_took(client: Client, workflow_id: str) -> bool:
    """Whether a worker took the workflow: it holds the workflow's task now, or the run's
    history shows a task a worker started. The held task alone is a snapshot that misses
    a live worker: while its local activity retries, the worker hands its task back
    every few seconds (the task's heartbeat) and takes the next one, so a describe can
    land in between, on a task that is only scheduled. A run no worker ever polled has
    no started task in its history. False when Temporal cannot be asked (twice)."""
    for _ in range(2):
        try:
            description = await client.get_workflow_handle(workflow_id).describe(
                rpc_timeout=DESCRIBE_TIMEOUT
            )
        except RPCError:
            continue
        raw = description.raw_description
        if raw.HasField("pending_workflow_task") and raw.pending_workflow_task.state == STARTED:
            return True
        return await _task_started_in_history(client, workflow_id)
    return False


async def run_task_queue(client: Client, workflow_id: str) -> str | None:
    """The task queue the workflow's run was started on (its tasks go nowhere else), or
    None when Temporal cannot be asked. A save attaches to a run already under its id,
    wherever that run was started: a client whose agent's shard moved, or one with
    another default queue, waits on a run no worker of its own queue will ever see."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe(
            rpc_timeout=DESCRIBE_TIMEOUT
        )
    except RPCError:
        return None
    return description.task_queue or None


async def _task_started_in_history(client: Client, workflow_id: str) -> bool:
    try:
        async for event in client.get_workflow_handle(workflow_id).fetch_history_events(
            rpc_timeout=DESCRIBE_TIMEOUT
        ):
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                return True
    except RPCError:
        return False
    return False


async def worker_runs(client: Client, workflow_id: str) -> bool:
    """Whether a worker is working on the workflow now: it holds its workflow task, or
    one of its activities has started (and heartbeats). False when nothing is taken,
    when the workflow is closed, or when it cannot be asked."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe(
            rpc_timeout=DESCRIBE_TIMEOUT
        )
    except RPCError:
        return False
    raw = description.raw_description
    if raw.HasField("pending_workflow_task") and raw.pending_workflow_task.state == STARTED:
        return True
    return any(a.state == ACTIVITY_STARTED for a in raw.pending_activities)
