"""Per-session memory over HTTP: the per-turn context, working memory, conversation turns,
and the 7 memory tools (`MemoryTools`: same text results as in-process and over MCP)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends

from dreamkeeper.agent.session import ContextKind, SessionContext
from dreamkeeper.agent.tools import tool_specs
from dreamkeeper.core.api import (
    ContextRequest,
    ContextResponse,
    ConversationResponse,
    ToolCallRequest,
    ToolResult,
    TurnOut,
    TurnRequest,
    WorkingEntryOut,
    WorkingSaveRequest,
    WorkingSearchRequest,
    WorkingSearchResponse,
)
from dreamkeeper.core.errors import InvalidInput, NotFound
from dreamkeeper.policies.access import READ_ONLY_TOOLS, Need
from dreamkeeper.service.access import check_route_access, needs
from dreamkeeper.service.state import ServiceState, state_of
from dreamkeeper.stores.contract import WorkingMemoryStore
from dreamkeeper.stores.contract.working import WorkingEntry
from dreamkeeper.stores.working.working_memory import validate_key, validate_namespace

MAX_NAMESPACE_SCAN = 100_000  # live entries looked through for a plain key

# Every route declares its access (`needs`); the router's dependency checks it against
# the agent id the route parsed (service.access).
router = APIRouter(
    prefix="/v1/agents/{agent_id}", tags=["session"], dependencies=[Depends(check_route_access)]
)
READ, WRITE = needs(Need.READ), needs(Need.WRITE)
State = Annotated[ServiceState, Depends(state_of)]


def _out(entry: WorkingEntry, *, value: bool = True) -> WorkingEntryOut:
    return WorkingEntryOut(
        key=entry.key,
        value=entry.value if value else None,
        category=entry.category,
        tags=entry.tags,
        stored_at=entry.stored_at,
        expires_at=entry.expires_at,
    )


@router.post("/context", response_model=ContextResponse, openapi_extra=READ)
async def context(agent_id: str, body: ContextRequest, state: State) -> ContextResponse:
    """What the agent's LLM sees of memory before this user message (reads only: an
    agent with no store here is unknown, as for every read)."""
    handle = state.agent(agent_id)
    session = SessionContext(body.session, ContextKind(body.kind))
    started = time.perf_counter()
    built = handle.context.build(session, body.message)
    state.metrics.context_seconds.observe(time.perf_counter() - started)
    return ContextResponse(messages=built.messages, recalled=built.recalled, timings=built.timings)


@router.put("/working", response_model=WorkingEntryOut, openapi_extra=WRITE)
async def working_save(agent_id: str, body: WorkingSaveRequest, state: State) -> WorkingEntryOut:
    handle = state.agent(agent_id, write=True)
    ttl = None if body.ttl_seconds is None else timedelta(seconds=body.ttl_seconds)
    entry = handle.working.save(
        body.namespace,
        body.key,
        body.value,
        ttl=ttl,
        background=body.background,
        category=body.category,
        tags=body.tags,
    )
    return _out(entry)


@router.get("/working/{key:path}", response_model=WorkingEntryOut, openapi_extra=READ)
async def working_get(
    agent_id: str, key: str, state: State, namespace: str | None = None
) -> WorkingEntryOut:
    """The key as `PUT /working` took it: with `?namespace=session/s1` a plain key is
    looked up in that namespace; without, a full key (`session/s1/inbox`) as returned
    by the save, or a plain key that exactly one namespace holds."""
    working = state.agent(agent_id).working
    full = working.resolve(validate_namespace(namespace), key) if namespace else key
    entry = working.get(full)
    if entry is None and not namespace and "/" not in key.strip("/"):
        entry = _the_one_namespace_holding(working, key)
    if entry is None:
        raise NotFound(f"no live working-memory entry at {full!r} (entries expire)")
    return _out(entry)


def _the_one_namespace_holding(working: WorkingMemoryStore, key: str) -> WorkingEntry | None:
    # A plain key is what the caller saved (`{"namespace", "key"}`): found in one
    # namespace it is that entry; in several, the caller must say which.
    suffix = "/" + validate_key(key)
    holders = [e for e in working.list(cap=MAX_NAMESPACE_SCAN).entries if e.key.endswith(suffix)]
    if len(holders) > 1:
        raise InvalidInput(
            f"working-memory key {key!r} is in {len(holders)} namespaces "
            f"({', '.join(sorted(e.namespace for e in holders))}): add ?namespace=… or "
            "give the full key"
        )
    return holders[0] if holders else None


@router.post("/working/search", response_model=WorkingSearchResponse, openapi_extra=READ)
async def working_search(
    agent_id: str, body: WorkingSearchRequest, state: State
) -> WorkingSearchResponse:
    """With a query: BM25 hits with scores; without: the live entries, newest first."""
    working = state.agent(agent_id).working
    if body.query is None or not body.query.strip():
        listing = working.list(body.prefix, category=body.category, tags=body.tags)
        return WorkingSearchResponse(entries=[_out(e, value=False) for e in listing.entries])
    hits = working.search(body.query, body.prefix, category=body.category, tags=body.tags)
    return WorkingSearchResponse(entries=[_out(e) for e, _ in hits], scores=[s for _, s in hits])


@router.post(
    "/conversations/{session}/turns", response_model=TurnOut, status_code=201, openapi_extra=WRITE
)
async def add_turn(agent_id: str, session: str, body: TurnRequest, state: State) -> TurnOut:
    turn = state.agent(agent_id, write=True).conversations.add_turn(
        session, body.role, body.content
    )
    return TurnOut(role=turn.role, content=turn.content, at=turn.at)


@router.get("/conversations/{session}", response_model=ConversationResponse, openapi_extra=READ)
async def conversation(agent_id: str, session: str, state: State) -> ConversationResponse:
    found = state.agent(agent_id).conversations.conversation(session)
    turns = [TurnOut(role=t.role, content=t.content, at=t.at) for t in found.turns]
    return ConversationResponse(session=session, turns=turns)


@router.get("/tools", tags=["tools"], openapi_extra=READ)
async def list_tools(agent_id: str, state: State) -> list[dict]:
    """The tools' OpenAI function-calling definitions (the same for every agent: nothing
    of the agent is opened, so an agent before its first save may ask too)."""
    state.answers_for(agent_id)
    return tool_specs()


@router.post(
    "/sessions/{session}/tools/{name}",
    response_model=ToolResult,
    tags=["tools"],
    openapi_extra=needs(Need.TOOL),
)
async def call_tool(
    agent_id: str, session: str, name: str, body: ToolCallRequest, state: State
) -> ToolResult:
    """Run one memory tool for this session; every outcome, bad input included, is the
    tool's text (as the model would see it). A read-only tool is a read: for an agent
    with no store here it is unknown."""
    tools = state.tools(agent_id, session, body.kind, write=name not in READ_ONLY_TOOLS)
    state.metrics.tool_calls.labels(name if name in tools.names else "unknown").inc()
    return ToolResult(text=await tools.call(name, body.arguments))
