"""Working memory's contract: a scratchpad of keys with a TTL, per namespace, and the
values it hands out (`WorkingEntry`, `Listing`). The rules every backend shares are
`stores.working.working_memory`."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dreamkeeper.core.models import UtcDatetime


class WorkingEntry(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    key: str
    value: str
    stored_at: UtcDatetime
    expires_at: UtcDatetime
    category: str | None = None
    tags: list[str] = Field(default_factory=list)

    def expired(self, now: datetime) -> bool:
        return self.expires_at <= now

    @property
    def namespace(self) -> str:
        return namespace_of(self.key)


def namespace_of(key: str) -> str:
    return "/".join(key.split("/", 2)[:2])


@dataclass(frozen=True)
class Listing:
    entries: list[WorkingEntry]
    total: int  # live entries in scope, before the cap

    @property
    def capped(self) -> bool:
        return self.total > len(self.entries)


@runtime_checkable
class WorkingMemoryStore(Protocol):
    """One agent's working memory: keys under namespaces (`session/{id}`, `patrol`,
    `subagent/{name}`, `stash/...`), each with a TTL. Readers see every process's writes;
    a namespace holds a bounded number of keys."""

    agent_id: str

    def now(self) -> datetime: ...

    def get(self, key: str) -> WorkingEntry | None:
        """A live entry by full key, from any namespace."""
        ...

    def list(
        self,
        prefix: str | None = None,
        *,
        category: str | None = None,
        tags: builtins.list[str] | None = None,
        cap: int = ...,
    ) -> Listing:
        """Live entries under `prefix`, most recently stored first, at most `cap`."""
        ...

    def search(
        self,
        query: str,
        prefix: str | None = None,
        *,
        category: str | None = None,
        tags: builtins.list[str] | None = None,
        limit: int = ...,
    ) -> builtins.list[tuple[WorkingEntry, float]]:
        """Ranked live entries under `prefix` (BM25, hybrid with vectors when configured)."""
        ...

    def save(
        self,
        namespace: str,
        key: str,
        value: str,
        *,
        ttl: timedelta | None = None,
        background: bool = False,
        category: str | None = None,
        tags: builtins.list[str] | None = None,
    ) -> WorkingEntry:
        """Store `value` under `key` inside the caller's own `namespace` (a write outside
        it is refused)."""
        ...

    def put_stash(
        self, key: str, value: str, *, ttl: timedelta, tags: builtins.list[str]
    ) -> WorkingEntry:
        """The tool-result stash's write: a full stash namespace drops its oldest entry."""
        ...

    def resolve(self, namespace: str, key: str) -> str:
        """The full key of `key` as seen from `namespace`."""
        ...

    def delete(self, key: str) -> bool: ...

    def clear(self, prefix: str | None = None) -> int:
        """Delete every entry under `prefix` (all with None); how many live ones went."""
        ...

    def sweep(self) -> int:
        """Drop expired entries; how many went."""
        ...

    def wait_for_embeddings(self, timeout: float | None = None) -> None:
        """Block until vectors queued by this process's saves are written."""
        ...

    def erase_matching(self, mentions: Callable[[str], bool]) -> builtins.list[str]:
        """`forget`: delete every entry (expired ones not yet swept too) whose key or
        value `mentions` the forgotten text, with its vector; the keys removed."""
        ...
