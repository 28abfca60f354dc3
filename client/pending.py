"""Whether a worker took a workflow, as Temporal sees it: a worker holds its workflow
task. A caller that gave up waiting on a save tells "no worker runs" apart from "a
worker runs it and keeps retrying": the save's first step is a local activity, which
records nothing in Temporal (no pending activity, no failure) until it gives up, so the
held workflow task is all there is to see. A forget's step is an ordinary activity: a
started one is a worker at work (it heartbeats, so a dead worker's is retried).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.api.enums.v1 import PendingActivityState, PendingWorkflowTaskState
from temporalio.client import Client
from temporalio.service import RPCError

DESCRIBE_TIMEOUT = timedelta(seconds=5)
STARTED = PendingWorkflowTaskState.PENDING_WORKFLOW_TASK_STATE_STARTED
ACTIVITY_STARTED = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED


async def worker_holds(client: Client, workflow_id: str) -> bool:
    """Whether a worker holds the workflow's task now (False too when it cannot be asked)."""
    try:
        description = await client.get_workflow_handle(workflow_id).describe(
            rpc_timeout=DESCRIBE_TIMEOUT
        )
    except RPCError:
        return False
    raw = description.raw_description
    return raw.HasField("pending_workflow_task") and raw.pending_workflow_task.state == STARTED


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
