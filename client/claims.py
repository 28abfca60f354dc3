"""What store a task queue serves, as its StoreClaim workflow's memo says (read-only:
the worker makes the claim, see worker.claim)."""

from __future__ import annotations

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from dreamkeeper.core.names import CLAIM_LOCATION, CLAIM_STORE_ID, claim_workflow_id


async def claimed_store(client: Client, task_queue: str) -> tuple[str, str] | None:
    """(store id, location) the task queue serves, or None if no worker claimed it."""
    try:
        desc = await client.get_workflow_handle(claim_workflow_id(task_queue)).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return None
    memo = await desc.memo()
    return str(memo.get(CLAIM_STORE_ID)), str(memo.get(CLAIM_LOCATION))
