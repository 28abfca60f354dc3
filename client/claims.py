"""What store a task queue serves, as its StoreClaim workflow's memo says (read-only:
the worker makes the claim, see worker.claim): the store's id and location, and whether
its worker seals payloads (the id of its sealing key)."""

from __future__ import annotations

from dataclasses import dataclass

from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode

from dreamkeeper.client.codec import ENCODING, ENCRYPTED, PayloadKeyMismatch
from dreamkeeper.core.errors import StoreMismatch
from dreamkeeper.core.names import (
    CLAIM_LOCATION,
    CLAIM_SEALED_WITH,
    CLAIM_STORE_ID,
    claim_workflow_id,
)


@dataclass(frozen=True)
class Claim:
    store_id: str
    location: str
    sealed_with: str | None  # the worker's sealing payload key id; None: it seals nothing


async def claim_of(client: Client, task_queue: str) -> Claim | None:
    """The task queue's claim, or None if no worker claimed it. StoreMismatch when the
    claim is sealed with a payload key this process lacks."""
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
        sealed_with = fields.get(CLAIM_SEALED_WITH)
        return Claim(
            await _memo_text(client, fields.get(CLAIM_STORE_ID)),
            await _memo_text(client, fields.get(CLAIM_LOCATION)),
            await _memo_text(client, sealed_with) if sealed_with is not None else None,
        )
    except PayloadKeyMismatch as exc:
        raise StoreMismatch(
            f"task queue {task_queue!r} is served by a worker whose store claim is sealed "
            f"with a payload key: {exc}"
        ) from None


async def claimed_store(client: Client, task_queue: str) -> tuple[str, str] | None:
    """(store id, location) the task queue serves, or None if no worker claimed it."""
    claim = await claim_of(client, task_queue)
    return (claim.store_id, claim.location) if claim is not None else None


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
