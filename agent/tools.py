"""The memory tools an agent loop offers its model, with OpenAI function-calling schemas
and plain-text results.

Reads go straight to the stores; writes to long-term memory go through a `MemoryWriter`
(`MemoryClient`: a workflow per write). Working memory is written directly: it is
scratch space, bound to the caller's namespace.

The recall family (`search_memory`, `search_working_memory`) follows `agent.recall`:
descriptions lead with their headline and name the sibling; an empty result for a real
query names the sibling and never suggests the tool that just came back empty.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Protocol

from dreamkeeper.agent.context import describe_entry, format_expiry
from dreamkeeper.agent.recall import (
    SEARCH_MEMORY,
    SEARCH_MEMORY_HEADLINE,
    SEARCH_MEMORY_SCOPE,
    SEARCH_WORKING_MEMORY,
    SEARCH_WORKING_MEMORY_HEADLINE,
    SEARCH_WORKING_MEMORY_SCOPE,
    empty_result,
)
from dreamkeeper.agent.session import SessionContext
from dreamkeeper.agent.stash import ToolResultStash
from dreamkeeper.core.errors import DreamkeeperError, InvalidInput
from dreamkeeper.core.payloads import EntryOpResult, SaveAck
from dreamkeeper.core.validation import validate_entry_id, validate_importance
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.memory_store import FileMemoryStore
from dreamkeeper.stores.search import format_hit, format_taxonomy, search
from dreamkeeper.stores.working_memory import (
    PREVIEW_CHARS,
    STASH_ROOT,
    WorkingEntry,
    WorkingMemoryStore,
    resolve_ttl,
)

SAVE_MEMORY = "save_memory"
DELETE_MEMORY = "delete_memory"
UPDATE_MEMORY_IMPORTANCE = "update_memory_importance"
SAVE_TO_WORKING_MEMORY = "save_to_working_memory"
GET_FROM_WORKING_MEMORY = "get_from_working_memory"
MAX_SEARCH_LIMIT = 50

MAX_ARGUMENT_BYTES = 4 * 1_048_576  # a tool call's JSON: the longest working-memory value, escaped


class MemoryWriter(Protocol):
    """What the tools need to change long-term memory (`MemoryClient` provides it)."""

    async def save_memory(
        self,
        agent_id: str,
        content: str,
        *,
        category: str | None,
        tags: list[str] | None,
        source: str | None,
        importance: float,
    ) -> SaveAck: ...

    async def delete_memory(self, agent_id: str, entry_id: str) -> EntryOpResult: ...

    async def update_memory_importance(
        self, agent_id: str, entry_id: str, importance: float
    ) -> EntryOpResult: ...


def _string(description: str) -> dict:
    return {"type": "string", "description": description}


_TAGS = {"type": "array", "items": {"type": "string"}, "description": "every tag must match"}
_CATEGORY_PREFIX = "category prefix, e.g. user-preferences (whole segments)"


def _function(name: str, description: str, properties: dict, required: list[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


def tool_specs() -> list[dict]:
    """The tools' OpenAI function-calling definitions (`tools=` of a chat request)."""
    return [
        _function(
            SEARCH_MEMORY,
            f"{SEARCH_MEMORY_HEADLINE}. Searches {SEARCH_MEMORY_SCOPE}: facts, preferences and "
            "lessons saved in earlier sessions, ranked by keyword relevance and importance. "
            "Omit query to browse the most recently reinforced entries and see the category "
            f"taxonomy. For what a tool returned in this session use {SEARCH_WORKING_MEMORY} "
            f"({SEARCH_WORKING_MEMORY_HEADLINE}).",
            {
                "query": _string("what to look for; omit to browse"),
                "category": _string(_CATEGORY_PREFIX),
                "tags": _TAGS,
                "metadata": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "only entries whose metadata has every one of these keys "
                    'with exactly this value, e.g. {"source": "user"}',
                },
                "created_after": _string(
                    "only entries first seen at or after this ISO 8601 "
                    "date or time, e.g. 2026-03-01"
                ),
                "created_before": _string(
                    "only entries first seen at or before this ISO 8601 "
                    "date or time (a date alone means its midnight UTC)"
                ),
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT},
            },
            [],
        ),
        _function(
            SEARCH_WORKING_MEMORY,
            f"{SEARCH_WORKING_MEMORY_HEADLINE}. Searches {SEARCH_WORKING_MEMORY_SCOPE}: your "
            "own working-memory namespace and this run's stashed tool results, with a "
            f"{PREVIEW_CHARS}-character preview per hit. Omit query to list entries (newest "
            "first, no preview). namespace looks elsewhere: 'patrol', 'subagent/<task>', or "
            "'stash' for tool results elided from this run's context. For conclusions kept "
            f"across sessions use {SEARCH_MEMORY} ({SEARCH_MEMORY_HEADLINE}).",
            {
                "query": _string("what to look for; omit to list"),
                "category": _string(_CATEGORY_PREFIX),
                "tags": _TAGS,
                "namespace": _string("a key prefix such as patrol or subagent/t1, or 'stash'"),
            },
            [],
        ),
        _function(
            SAVE_MEMORY,
            "Save a durable fact, preference or lesson to long-term memory. It is kept at once; "
            "enrichment and deduplication run in the background.",
            {
                "content": _string("the fact, self-contained"),
                "category": _string("e.g. user-preferences/timezone or project-context/x"),
                "tags": {"type": "array", "items": {"type": "string"}},
                "source": _string("user (the user said it), tool:<name>, or inferred"),
                "importance": {"type": "number", "minimum": 0, "maximum": 1},
            },
            ["content"],
        ),
        _function(
            DELETE_MEMORY,
            "Archive a long-term memory by id: hidden from search, recoverable until it is "
            "purged after the retention period. Use for facts that are wrong or obsolete. "
            "The reply quotes what was archived, so you can tell the user.",
            {"id": _string("the 12-character id shown in search results")},
            ["id"],
        ),
        _function(
            UPDATE_MEMORY_IMPORTANCE,
            "Re-score a long-term memory's importance (0 to 1); higher ranks it first and "
            "protects it from pruning at 0.8 and above.",
            {
                "id": _string("the memory's id"),
                "importance": {"type": "number", "minimum": 0, "maximum": 1},
            },
            ["id", "importance"],
        ),
        _function(
            SAVE_TO_WORKING_MEMORY,
            "Keep data for this session in working memory (your own namespace), e.g. a large "
            "payload to come back to. Expires after ttl_minutes (default 5).",
            {
                "key": _string("a plain key such as emails_inbox"),
                "data": _string("the text to keep"),
                "ttl_minutes": {"type": "number", "exclusiveMinimum": 0, "maximum": 10080},
                "category": _string("optional category"),
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            ["key", "data"],
        ),
        _function(
            GET_FROM_WORKING_MEMORY,
            "Read a working-memory entry: a plain key from your namespace, or a full key "
            "(patrol/..., subagent/..., stash/...) from anywhere.",
            {"key": _string("plain or full key")},
            ["key"],
        ),
    ]


class MemoryTools:
    def __init__(
        self,
        agent_id: str,
        session: SessionContext,
        *,
        memory: FileMemoryStore,
        working: WorkingMemoryStore,
        writer: MemoryWriter | None = None,
        stash: ToolResultStash | None = None,
        retention_days: float = 90,
    ) -> None:
        self.agent_id = agent_id
        self.session = session
        self.memory = memory
        self.working = working
        self.writer = writer
        self.stash = stash
        self.retention_days = retention_days
        self._handlers: dict[str, Callable[..., Awaitable[str]]] = {
            SEARCH_MEMORY: self.search_memory,
            SEARCH_WORKING_MEMORY: self.search_working_memory,
            SAVE_MEMORY: self.save_memory,
            DELETE_MEMORY: self.delete_memory,
            UPDATE_MEMORY_IMPORTANCE: self.update_memory_importance,
            SAVE_TO_WORKING_MEMORY: self.save_to_working_memory,
            GET_FROM_WORKING_MEMORY: self.get_from_working_memory,
        }

    @property
    def names(self) -> list[str]:
        return list(self._handlers)

    def specs(self) -> list[dict]:
        return tool_specs()

    async def call(self, name: str, arguments: str | dict[str, Any] | None) -> str:
        """Run a tool call; every outcome, bad input included, is a text result."""
        handler = self._handlers.get(name)
        if handler is None:
            return f"Error: unknown tool {name!r}; the memory tools are {', '.join(self.names)}."
        try:
            args = (
                safe_json.loads(arguments or "{}", max_bytes=MAX_ARGUMENT_BYTES, max_depth=8)
                if isinstance(arguments, str)
                else (arguments or {})
            )
            if not isinstance(args, dict):
                raise InvalidInput("arguments must be a JSON object")
            return await handler(**args)
        except safe_json.UnsafeJSON as exc:
            return f"Error: the arguments are not usable JSON ({exc}); nothing was done."
        except TypeError as exc:
            return f"Error: bad arguments for {name}: {exc}; nothing was done."
        except DreamkeeperError as exc:
            return f"Error: {exc}; nothing was done."

    # -- long-term memory --------------------------------------------------------------

    async def search_memory(
        self,
        query: str | None = None,
        category: str | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, str] | None = None,
        created_after: str | None = None,
        created_before: str | None = None,
        limit: int = 20,
    ) -> str:
        if not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
            raise InvalidInput(f"limit must be 1 to {MAX_SEARCH_LIMIT}")
        hits = search(
            self.memory,
            query,
            category=category,
            tags=tags,
            metadata=metadata,
            limit=limit,
            created_after=created_after,
            created_before=created_before,
        )
        now = self.memory.now()
        lines = [format_hit(h.entry, now) for h in hits]
        if query is None or not query.strip():
            # A browse answers "how is knowledge organised here?", matches or not.
            header = "Most recently reinforced entries:" if lines else "No entries in scope."
            return "\n".join([header, *lines, "", format_taxonomy(self.memory.categories())])
        if not lines:
            return empty_result(SEARCH_MEMORY, query)
        return "\n".join(lines)

    def _writer(self) -> MemoryWriter:
        if self.writer is None:
            raise InvalidInput(
                "long-term memory writes need a Dreamkeeper worker; none is connected"
            )
        return self.writer

    async def save_memory(
        self,
        content: str,
        category: str | None = None,
        tags: list[str] | None = None,
        source: str | None = None,
        importance: float = 0.5,
    ) -> str:
        ack = await self._writer().save_memory(
            self.agent_id,
            content,
            category=category,
            tags=tags,
            source=source,
            importance=importance,
        )
        text = (
            f"Saved to long-term memory as [{ack.entry_id}]. Enrichment and deduplication "
            "continue in the background."
        )
        return f"{text} Note: {ack.note}." if ack.note else text

    async def delete_memory(self, id: str) -> str:  # noqa: A002 — the tool's parameter name
        validate_entry_id(id)
        entry = self.memory.require(id)
        result = await self._writer().delete_memory(self.agent_id, id)
        content = " ".join(entry.content.split())
        return (
            f'Archived [{result.entry_id}] ({result.archive_reason}): "{content}". It is hidden '
            f"from search but not deleted: it can be restored until it is purged, "
            f"{self.retention_days:g} days after archiving."
        )

    async def update_memory_importance(self, id: str, importance: float) -> str:  # noqa: A002
        validate_entry_id(id)
        value = validate_importance(importance)
        self.memory.require(id)
        result = await self._writer().update_memory_importance(self.agent_id, id, value)
        return f"Importance of [{result.entry_id}] is now {result.importance:.2f}."

    # -- working memory ----------------------------------------------------------------

    async def save_to_working_memory(
        self,
        key: str,
        data: str,
        ttl_minutes: float | None = None,
        category: str | None = None,
        tags: list[str] | None = None,
    ) -> str:
        if ttl_minutes is not None and not isinstance(ttl_minutes, int | float):
            raise InvalidInput("ttl_minutes must be a number")
        asked = None if ttl_minutes is None else timedelta(minutes=ttl_minutes)
        entry = self.working.save(
            self.session.namespace,
            key,
            data,
            ttl=asked,
            background=self.session.background,
            category=category,
            tags=tags,
        )
        text = f"Saved {entry.key} ({format_expiry(entry.expires_at, entry.stored_at)})."
        granted = entry.expires_at - entry.stored_at
        if granted > resolve_ttl(asked, background=False):
            text += " Background work keeps working memory at least 4 hours."
        return text

    async def get_from_working_memory(self, key: str) -> str:
        own = self.working.resolve(self.session.namespace, key)
        entry = self.working.get(own) or self.working.get(key)
        if entry is None:
            return (
                f"No live working-memory entry at {key!r} (entries expire). "
                f"{SEARCH_WORKING_MEMORY} lists what exists."
            )
        return f"{entry.key} ({self._describe(entry)}):\n{entry.value}"

    async def search_working_memory(
        self,
        query: str | None = None,
        category: str | None = None,
        tags: list[str] | None = None,
        namespace: str | None = None,
    ) -> str:
        scopes = self._scopes(namespace)
        if isinstance(scopes, str):
            return scopes
        where = " and ".join(scopes)
        if query is None or not query.strip():
            found: list[WorkingEntry] = []
            total = 0
            for prefix in scopes:
                listing = self.working.list(prefix, category=category, tags=tags)
                found += listing.entries
                total += listing.total
            found.sort(key=lambda e: (e.stored_at, e.key), reverse=True)
            if not found:
                return f"No live entries in working memory under {where}."
            shown = found[:500]
            lines = [f"- {e.key}: {self._describe(e)}" for e in shown]
            head = f"Working memory under {where}, newest first:"
            if total > len(shown):
                head += f" (showing {len(shown)} of {total}; narrow it with a namespace or query)"
            return "\n".join([head, *lines])
        hits: list[tuple[WorkingEntry, float]] = []
        for prefix in scopes:
            hits += self.working.search(query, prefix, category=category, tags=tags)
        hits.sort(key=lambda h: (-h[1], h[0].key))
        if not hits:
            return empty_result(SEARCH_WORKING_MEMORY, query)
        lines = [f"- {e.key}: {self._describe(e)}\n  {_preview(e.value)}" for e, _ in hits[:20]]
        return "\n".join([f"Working memory under {where}:", *lines])

    def _scopes(self, namespace: str | None) -> list[str] | str:
        if namespace is None or not namespace.strip():
            scopes = [self.session.namespace]
            if self.stash is not None:
                scopes.append(self.stash.prefix)
            return scopes
        namespace = namespace.strip().strip("/")
        if namespace.lower() == STASH_ROOT:
            # The bare word is this run's stash, not every run's.
            if self.stash is None:
                return "No stash is reachable: no agent loop run has stashed tool results here."
            return [self.stash.prefix]
        return [namespace]

    def _describe(self, entry: WorkingEntry) -> str:
        return describe_entry(entry, self.working.now())


def _preview(value: str) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"
