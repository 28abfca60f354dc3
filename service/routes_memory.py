"""Long-term memory over HTTP: search, get, archived, save, delete, restore, importance,
and the dream cycle. Reads go straight to the store (as `MemoryClient` does); writes run
their workflows through the worker in this process, so a save answers once it is
durable."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import ValidationError
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from dreamkeeper.core import names
from dreamkeeper.core.api import (
    DreamStarted,
    DreamStatus,
    EntriesResponse,
    Hit,
    ImportanceRequest,
    RestoreRequest,
    SaveRequest,
    SearchRequest,
    SearchResponse,
)
from dreamkeeper.core.errors import (
    Conflict,
    DreamkeeperError,
    InvalidInput,
    Unavailable,
)
from dreamkeeper.core.forgetting import ForgetReceipt, ForgetRequest
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.payloads import EntryOpResult, SaveAck
from dreamkeeper.core.validation import validate_entry_id
from dreamkeeper.policies.access import Need
from dreamkeeper.service.access import check_route_access, needs
from dreamkeeper.service.problems import validation_detail
from dreamkeeper.service.state import ServiceState, state_of
from dreamkeeper.stores.search.query import search

# Every route declares its access (`needs`); the router's dependency checks it against
# the agent id the route parsed (service.access).
router = APIRouter(
    prefix="/v1/agents/{agent_id}", tags=["memory"], dependencies=[Depends(check_route_access)]
)
READ, WRITE = needs(Need.READ), needs(Need.WRITE)
State = Annotated[ServiceState, Depends(state_of)]


_SEARCH_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SearchRequest"}}},
    }
}


def run_search(state: ServiceState, agent_id: str, raw: bytes) -> bytes:
    """A search from its request body to its answer's JSON: the body parsed and the answer
    serialised once each (FastAPI's body and response-model handling would double both).
    Served by `fast_path.FastSearch` ahead of the framework; the route below documents it
    and answers the same way if the fast path is bypassed."""
    try:
        body = SearchRequest.model_validate_json(raw)
    except ValidationError as exc:
        raise InvalidInput(validation_detail(exc.errors())) from None
    handle = state.agent(agent_id)
    started = time.perf_counter()
    hits = search(
        handle.store,
        body.query,
        category=body.category,
        tags=body.tags,
        metadata=body.metadata,
        limit=body.limit,
        include_archived=body.include_archived,
        include_superseded=body.include_superseded,
        as_of=body.as_of,
        history=body.history,
        created_after=body.created_after,
        created_before=body.created_before,
    )
    state.metrics.search_seconds.observe(time.perf_counter() - started)
    found = SearchResponse(hits=[Hit(entry=h.entry, score=h.score) for h in hits])
    return found.model_dump_json(by_alias=True).encode()


@router.post(
    "/search", response_model=SearchResponse, openapi_extra=needs(Need.READ, **_SEARCH_BODY)
)
async def search_memories(agent_id: str, request: Request) -> Response:
    state: ServiceState = request.app.state.service
    answer = run_search(state, agent_id, await request.body())
    return Response(answer, media_type="application/json")


@router.get("/memories/{entry_id}", response_model=MemoryEntry, openapi_extra=READ)
async def get_memory(agent_id: str, entry_id: str, state: State) -> MemoryEntry:
    return state.agent(agent_id).store.require(validate_entry_id(entry_id))


@router.get("/archived", response_model=EntriesResponse, openapi_extra=READ)
async def archived(agent_id: str, state: State) -> EntriesResponse:
    return EntriesResponse(entries=state.agent(agent_id).store.archived())


@router.post("/memories", response_model=SaveAck, status_code=201, openapi_extra=WRITE)
async def save_memory(agent_id: str, body: SaveRequest, state: State) -> SaveAck:
    """Returns once the original is durable; enrichment and dedup go on in the workflow.
    A `replaces` that names another subject is refused with 409 (`ReplaceRefused`, the
    reason in `detail`), nothing saved, unless `force_replace`."""
    count = state.metrics.saves
    try:
        handle = state.agent(agent_id, write=True)
        ack = await state.memory.save_memory(
            handle.agent_id,
            body.content,
            category=body.category,
            tags=body.tags,
            source=body.source,
            importance=body.importance,
            entry_id=body.entry_id,
            idempotency_key=body.idempotency_key,
            replaces=body.replaces,
            force_replace=body.force_replace,
            valid_from=body.valid_from,
        )
    except DreamkeeperError as exc:
        outcome = (
            "invalid"
            if isinstance(exc, InvalidInput)
            else "conflict"
            if isinstance(exc, Conflict)
            else "unavailable"
            if isinstance(exc, Unavailable)
            else "error"
        )
        count.labels(outcome).inc()
        raise
    count.labels("repeated" if ack.already_done else "saved").inc()
    return ack


@router.delete("/memories/{entry_id}", response_model=EntryOpResult, openapi_extra=WRITE)
async def delete_memory(agent_id: str, entry_id: str, state: State) -> EntryOpResult:
    """Archive: hidden from search, recoverable until purged."""
    handle = state.agent(agent_id)
    return await state.memory.delete_memory(handle.agent_id, entry_id)


@router.post("/memories/{entry_id}/restore", response_model=EntryOpResult, openapi_extra=WRITE)
async def restore_memory(
    agent_id: str, entry_id: str, body: RestoreRequest, state: State
) -> EntryOpResult:
    handle = state.agent(agent_id)
    return await state.memory.restore_memory(handle.agent_id, entry_id, force=body.force)


@router.put("/memories/{entry_id}/importance", response_model=EntryOpResult, openapi_extra=WRITE)
async def set_importance(
    agent_id: str, entry_id: str, body: ImportanceRequest, state: State
) -> EntryOpResult:
    handle = state.agent(agent_id)
    return await state.memory.update_memory_importance(handle.agent_id, entry_id, body.importance)


@router.post("/forget", response_model=ForgetReceipt, openapi_extra=WRITE)
async def forget(agent_id: str, body: ForgetRequest, state: State) -> ForgetReceipt:
    """Erase now, from every tier and the agent's Temporal histories (its data key): a
    person's request to be forgotten, never a model's tool. The receipt lists what went
    where and the verification that the text matches nothing."""
    handle = state.agent(agent_id)
    receipt = await state.memory.forget(handle.agent_id, body.checked())
    if body.whole_agent and not body.dry_run:
        state.release(handle.agent_id)  # its context builder holds the erased stores
    return receipt


@router.post("/dream", response_model=DreamStarted, status_code=202, openapi_extra=WRITE)
async def start_dream(agent_id: str, state: State) -> DreamStarted:
    """Start (or join, if one is running) the agent's dream cycle."""
    handle = state.agent(agent_id)
    workflow = await state.memory.start_dream(handle.agent_id)
    return DreamStarted(workflow_id=workflow.id, run_id=workflow.result_run_id)


@router.get("/dream", response_model=DreamStatus, openapi_extra=READ)
async def dream_status(agent_id: str, state: State) -> DreamStatus:
    """The latest dream cycle of this agent (started here or by the schedule)."""
    handle = state.agent(agent_id)
    workflow_id = names.dream_workflow_id(handle.agent_id)
    workflow = state.memory.client.get_workflow_handle(workflow_id)
    try:
        described = await workflow.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return DreamStatus(workflow_id=workflow_id, status="NONE")
        raise Unavailable(f"cannot ask Temporal about {workflow_id}: {exc}") from None
    status = described.status or WorkflowExecutionStatus.RUNNING
    result = None
    if status == WorkflowExecutionStatus.COMPLETED:
        from dreamkeeper.core.dream_payloads import DreamResult

        done = state.memory.client.get_workflow_handle(workflow_id, result_type=DreamResult)
        result = (await done.result()).model_dump(mode="json")
    return DreamStatus(workflow_id=workflow_id, status=status.name, result=result)
