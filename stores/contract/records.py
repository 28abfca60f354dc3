"""What the long-term store's operations report and take: a purge's report, a
retirement's outcome, an operation recorded in an entry, a bulk write's report, an item
of `create_many`, a stored vector. Backend-neutral values the store contract speaks in
(`stores.contract.memory`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from dreamkeeper.core.models import MemoryEntry


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


@dataclass
class BulkReport:
    entries: list[MemoryEntry] = field(default_factory=list)  # as they are now, in order
    created: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # already here, same content
    conflicts: list[str] = field(default_factory=list)  # already here, other content


@dataclass(frozen=True)
class NewEntry:
    """One entry for `create_many`: what `create` takes, and optionally its own dates:
    `created_at` (first seen: a note from years ago) and `valid_from` (when the fact
    became true). ISO 8601 text or datetimes; naive is UTC."""

    content: str
    category: str | None = None
    tags: tuple[str, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)
    importance: float = 0.5
    entry_id: str | None = None
    created_at: datetime | str | None = None
    valid_from: datetime | str | None = None
