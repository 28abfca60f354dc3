"""What store a task queue serves, as its StoreClaim workflow's memo says (read-only:
the worker makes the claim, see worker.claim)."""

from __future__ import annotations

from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from dreamkeeper.client.codec import ENCODING, ENCRYPTED, PayloadKeyMismatch
from dreamkeeper.core.errors import StoreMismatch
from dreamkeeper.core.names import CLAIM_LOCATION, CLAIM_STORE_ID, claim_workflow_id


async def claimed_store(client: Client, task_queue: str) -> tuple[str, str] | None:
    """(store id, location) the task queue serves, or None if no worker claimed it.
    StoreMismatch when the claim is sealed with a payload key this process lacks."""
    try:
        desc = await client.get_workflow_handle(claim_workflow_id(task_queue)).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    if desc.status != WorkflowExecutionStatus.RUNNING:
        return None
    fields = desc.raw_description.workflow_execution_info.memo.fields
    try:
        return (
            await _memo_text(client, fields.get(CLAIM_STORE_ID)),
            await _memo_text(client, fields.get(CLAIM_LOCATION)),
        )
    except PayloadKeyMismatch as exc:
        raise StoreMismatch(
            f"task queue {task_queue!r} is served by a worker whose store claim is sealed "
            f"with a payload key: {exc}"
        ) from None


async def _memo_text(client: Client, payload: Payload | None) -> str:
    # Claims are written plain (ids and a path, no content: worker.claim), so a client
    # without the worker's key can still name the store it would mismatch; a claim
    # written sealed (older workers) needs the key, and the codec says which is missing.
    if payload is None:
        return "None"
    if payload.metadata.get(ENCODING) == ENCRYPTED:
        value = (await client.data_converter.decode([payload], [str]))[0]
    else:
        value = pydantic_data_converter.payload_converter.from_payloads([payload], [str])[0]
    return str(value)
