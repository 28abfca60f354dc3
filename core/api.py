"""The memory service's request and response bodies (`dreamkeeper serve`, worker.service),
shared by the server and the remote client (agent.remote) so both read one schema.

Entries travel as `MemoryEntry` in its on-disk camelCase JSON; acknowledgements as the
workflow payloads (`SaveAck`, `EntryOpResult`). Errors are problem JSON (RFC 9457) whose
`category` is a `core.errors` failure type, mapped back to the same exception with
`error_for`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dreamkeeper.core.models import MemoryEntry

API_PREFIX = "/v1"
MAX_API_SEARCH_LIMIT = 200


class _Body(BaseModel):
    # Unknown fields are refused: a misspelt filter must not silently widen a search.
    model_config = ConfigDict(extra="forbid")


class SearchRequest(_Body):
    query: str | None = None
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, str] = Field(default_factory=dict)
    created_after: str | None = None
    created_before: str | None = None
    limit: int = Field(20, ge=1, le=MAX_API_SEARCH_LIMIT)  # stores.search.query.DEFAULT_LIMIT
    include_archived: bool = False
    include_superseded: bool = False
    as_of: str | None = None
    history: str | None = None


class Hit(BaseModel):
    entry: MemoryEntry
    score: float | None = None  # None for a query-less browse


class SearchResponse(BaseModel):
    hits: list[Hit]


class EntriesResponse(BaseModel):
    entries: list[MemoryEntry]


class SaveRequest(_Body):
    content: str
    category: str | None = None
    tags: list[str] | None = None
    source: str | None = None
    importance: float = 0.5
    entry_id: str | None = None
    idempotency_key: str | None = None
    replaces: list[str] | None = None
    force_replace: bool = False  # replace even what the subject check refuses (journaled)
    valid_from: str | None = None  # ISO 8601: when the fact became true, if not now


class RestoreRequest(_Body):
    force: bool = False


class ImportanceRequest(_Body):
    importance: float


SessionKind = Literal["user", "patrol", "subagent"]


class ContextRequest(_Body):
    session: str
    kind: SessionKind = "user"
    message: str


class ContextResponse(BaseModel):
    messages: list[dict[str, str]]
    recalled: list[str] = Field(default_factory=list)
    timings: dict[str, float] = Field(default_factory=dict)


class WorkingSaveRequest(_Body):
    namespace: str  # e.g. session/s1
    key: str
    value: str
    ttl_seconds: float | None = Field(None, gt=0, le=7 * 86_400)
    background: bool = False
    category: str | None = None
    tags: list[str] | None = None


class WorkingEntryOut(BaseModel):
    key: str
    value: str | None = None  # omitted in listings
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    stored_at: datetime
    expires_at: datetime


class WorkingSearchRequest(_Body):
    query: str | None = None
    prefix: str | None = None
    category: str | None = None
    tags: list[str] | None = None


class WorkingSearchResponse(BaseModel):
    entries: list[WorkingEntryOut]
    scores: list[float] | None = None


class TurnRequest(_Body):
    role: str  # user or assistant: checked by the conversation store
    content: str


class TurnOut(BaseModel):
    role: str
    content: str
    at: datetime | None = None


class ConversationResponse(BaseModel):
    session: str
    turns: list[TurnOut]


class ToolCallRequest(_Body):
    arguments: dict = Field(default_factory=dict)
    kind: SessionKind = "user"


class ToolResult(BaseModel):
    text: str


class DreamStarted(BaseModel):
    workflow_id: str
    run_id: str | None = None


class DreamStatus(BaseModel):
    workflow_id: str
    status: str  # RUNNING, COMPLETED, FAILED, ... or NONE
    result: dict | None = None


class Problem(BaseModel):
    """An error, as problem JSON: `category` is the core.errors failure type."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    category: str
