"""Claiming a task queue for this worker's store (see workflows.store_claim)."""

from __future__ import annotations

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from dreamkeeper.stores.identity import StoreIdentity, StoreMismatch
from dreamkeeper.workflows.observability import tagged
from dreamkeeper.workflows.store_claim import LOCATION, STORE_ID, StoreClaim, claim_workflow_id


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
    return str(memo.get(STORE_ID)), str(memo.get(LOCATION))


async def claim_task_queue(
    client: Client, task_queue: str, identity: StoreIdentity, *, reclaim: bool = False
) -> str:
    """Claim the queue for this store; StoreMismatch if another store holds it."""
    held = await claimed_store(client, task_queue)
    if held is not None and held[0] == identity.store_id:
        return "already held by this store"
    if held is not None and not reclaim:
        raise StoreMismatch(
            f"task queue {task_queue!r} already serves store {held[0]} at {held[1]}, but this "
            f"worker's data directory holds {identity.describe()}: two stores on one queue "
            "would split agents' memories. Point DREAMKEEPER_DATA at that directory, use "
            "another DREAMKEEPER_TASK_QUEUE, or start with --reclaim if the store moved here"
        )
    handle = client.get_workflow_handle(claim_workflow_id(task_queue))
    if held is not None:
        await handle.terminate(f"task queue reclaimed by {identity.describe()}")
    try:
        await client.start_workflow(
            StoreClaim.run, args=[identity.store_id, identity.location],
            id=claim_workflow_id(task_queue), task_queue=task_queue,
            memo={STORE_ID: identity.store_id, LOCATION: identity.location},
            static_summary=f"task queue {task_queue} serves {identity.describe()}",
            search_attributes=tagged(None, "claim"),
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        )  # fmt: skip
    except WorkflowAlreadyStartedError:
        # Another worker of some store claimed it in between: check which.
        return await claim_task_queue(client, task_queue, identity, reclaim=False)
    return "reclaimed" if held is not None else "claimed"
