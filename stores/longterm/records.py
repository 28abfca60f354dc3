"""The store's small records and pure helpers: what a purge, a retirement or a bulk
write reports, an operation recorded in an entry, and how an entry
becomes a new or imported one. Backend-neutral: the store contract (`stores.contract`)
speaks in these."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.validation import (
    new_entry_id,
    validate_category,
    validate_content,
    validate_entry_id,
    validate_importance,
    validate_metadata,
    validate_tags,
)


def document_text(entry: MemoryEntry) -> str:
    """What BM25 indexes: content, tags, and the category with / and - as spaces."""
    category = (entry.category or "").replace("/", " ").replace("-", " ")
    return " ".join([entry.content, " ".join(entry.tags), category])


@dataclass(frozen=True)
class StoredVector:
    """An entry's stored vector and the model (key) that made it."""

    model_key: bytes
    values: np.ndarray


@dataclass
class PurgeReport:
    considered: int = 0
    purged: list[str] = field(default_factory=list)
    kept_high_value: list[str] = field(default_factory=list)
    kept_in_retention: int = 0


@dataclass(frozen=True)
class Retirement:
    """What `retire_into` did: archived the entry into live replacements, or nothing."""

    retired: bool
    detail: str | None = None  # why nothing was done (or "already retired into them")
    missing: tuple[str, ...] = ()  # specifics the replacements lack (debug logs only)


@dataclass(frozen=True)
class AppliedOp:
    """An operation recorded in the entry it changed: what it did, and any detail a
    retry needs (a fold's copies)."""

    entry_id: str
    action: str
    detail: str = ""

    @classmethod
    def parse(cls, entry_id: str, value: str) -> AppliedOp:
        action, _, detail = value.partition(":")
        return cls(entry_id, action, detail)


_LEGACY_INTO = re.compile(r"^(?:merged into ([0-9a-f]{12})|enriched into \[([0-9a-f, ]+)\])$")


def retired_into(entry: MemoryEntry) -> list[str]:
    """The entries this one was archived into (legacy files: read from the reason)."""
    if entry.retired_into:
        return list(entry.retired_into)
    match = _LEGACY_INTO.match(entry.archive_reason or "")
    if match is None:
        return []
    return [match[1]] if match[1] else [i.strip() for i in match[2].split(",") if i.strip()]


@dataclass
class BulkReport:
    entries: list[MemoryEntry] = field(default_factory=list)  # as they are now, in order
    created: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # already here, same content
    conflicts: list[str] = field(default_factory=list)  # already here, other content


def imported_entry(entry: MemoryEntry) -> MemoryEntry:
    """An entry from elsewhere, checked by the store's rules; its store bookkeeping
    (revision, applied ops) is this store's own, so it starts afresh."""
    validate_entry_id(entry.id)
    validate_content(entry.content)
    validate_category(entry.category)
    validate_tags(entry.tags)
    validate_metadata(entry.metadata)
    validate_importance(entry.importance_score)
    if entry.superseded_by is not None:
        validate_entry_id(entry.superseded_by)
    return entry.model_copy(update={"revision": 0, "applied_ops": {}})


@dataclass(frozen=True)
class NewEntry:
    """One entry for `create_many`: what `create` takes."""

    content: str
    category: str | None = None
    tags: tuple[str, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    importance: float = 0.5
    entry_id: str | None = None


def new_entry(item: NewEntry, at: datetime) -> MemoryEntry:
    return MemoryEntry(
        id=validate_entry_id(item.entry_id) if item.entry_id is not None else new_entry_id(),
        content=validate_content(item.content),
        category=validate_category(item.category),
        tags=validate_tags(item.tags),
        metadata=validate_metadata(item.metadata),
        importance_score=validate_importance(item.importance),
        created_at=at,
        last_seen_at=at,
    )


def entry_version(entry: MemoryEntry) -> tuple[int, datetime, datetime]:
    return (entry.revision, entry.updated_at or entry.created_at, entry.last_seen_at)
