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
from typing import Any, Protocol, Unpack

from pydantic import ValidationError

from dreamkeeper.agent.context import describe_entry, format_expiry
from dreamkeeper.agent.recall import (
    SEARCH_MEMORY,
    SEARCH_WORKING_MEMORY,
    empty_result,
)
from dreamkeeper.agent.session import SessionContext
from dreamkeeper.agent.stash import ToolResultStash
from dreamkeeper.agent.tool_args import (
    DELETE_MEMORY,
    GET_FROM_WORKING_MEMORY,
    MAX_SEARCH_LIMIT,
    SAVE_MEMORY,
    SAVE_TO_WORKING_MEMORY,
    TOOLS,
    UPDATE_MEMORY_IMPORTANCE,
    tool_specs,
)
from dreamkeeper.core.agent_api import SaveOptions
from dreamkeeper.core.errors import DreamkeeperError, InvalidInput
from dreamkeeper.core.payloads import EntryOpResult, SaveAck
from dreamkeeper.core.validation import (
    PREVIEW_CHARS,
    STASH_ROOT,
    validate_entry_id,
    validate_importance,
)
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract import MemoryStore, WorkingMemoryStore
from dreamkeeper.stores.contract.working import WorkingEntry
from dreamkeeper.stores.search.query import (
    conflict_note,
    format_hit,
    format_taxonomy,
    search,
)
from dreamkeeper.stores.working.working_memory import resolve_ttl

MAX_ARGUMENT_BYTES = 4 * 1_048_576  # a tool call's JSON: the longest working-memory value, escaped


class MemoryWriter(Protocol):
    """What the tools need to change long-term memory (`MemoryClient` provides it)."""

    async def save_memory(
        self, agent_id: str, content: str, **options: Unpack[SaveOptions]
    ) -> SaveAck: ...

    async def delete_memory(self, agent_id: str, entry_id: str) -> EntryOpResult: ...

    async def update_memory_importance(
        self, agent_id: str, entry_id: str, importance: float
    ) -> EntryOpResult: ...


def _problems(exc: ValidationError) -> str:
    """pydantic's errors as one line: `field: message` per problem, input not echoed
    (it may be megabytes, or text the model should not be shown again)."""
    parts = []
    for error in exc.errors(include_url=False, include_input=False)[:5]:
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


class MemoryTools:
    def __init__(
        self,
        agent_id: str,
        session: SessionContext,
        *,
        memory: MemoryStore,
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
            checked = TOOLS[name][1].model_validate(args)
            return await handler(**checked.model_dump(exclude_unset=True))
        except safe_json.UnsafeJSON as exc:
            return f"Error: the arguments are not usable JSON ({exc}); nothing was done."
        except ValidationError as exc:
            return f"Error: bad arguments for {name}: {_problems(exc)}; nothing was done."
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
        include_superseded: bool = False,
        as_of: str | None = None,
        history: str | None = None,
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
            include_superseded=include_superseded,
            as_of=as_of,
            history=history,
        )
        now = self.memory.now()
        validity = include_superseded or as_of is not None or history is not None
        lines = [
            format_hit(
                h.entry, now, validity=validity, conflict=conflict_note(self.memory, h.entry)
            )
            for h in hits
        ]
        if history is not None:
            return "\n".join([f"Versions of [{history}], oldest first:", *lines])
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
        replaces: list[str] | None = None,
        force_replace: bool = False,
        valid_from: str | None = None,
    ) -> str:
        ack = await self._writer().save_memory(
            self.agent_id,
            content,
            category=category,
            tags=tags,
            source=source,
            importance=importance,
            replaces=replaces,
            force_replace=force_replace,
            valid_from=valid_from,
        )
        text = (
            f"Saved to long-term memory as [{ack.entry_id}]. Enrichment and deduplication "
            "continue in the background."
        )
        if ack.replaced:
            text += f" It replaces {', '.join(f'[{i}]' for i in ack.replaced)} (kept as history)."
        if ack.unconfirmed:
            text += (
                f" {', '.join(f'[{i}]' for i in ack.unconfirmed)} stay current beside it: the "
                "subject check cannot tell whether they are older versions of this fact, so "
                "both are linked and dated in recall (force_replace replaces them anyway)."
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
