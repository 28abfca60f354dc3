"""The long-term memory entry, exactly as it lies on disk (camelCase JSON)."""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

SOURCE_KEY = "source"
"""Metadata key holding an entry's provenance (see policies.provenance)."""

MAX_APPLIED_OPS = 128
"""Operation ids an entry remembers (oldest dropped first): far more than the writes a
retried activity can see land on one entry between its crash and its retry."""


def content_fingerprint(content: str) -> str:
    """First 8 bytes of SHA-256 of the UTF-8 content, hex: the review and change stamp."""
    return hashlib.sha256(content.encode("utf-8")).digest()[:8].hex()


def utc_now() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """Naive datetimes from older files are taken as UTC; everything else is converted.
    A time that has no UTC equivalent (`0001-01-01T00:00+05:00`) is a ValueError — which
    a model turns into a validation error — never an OverflowError."""
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{value.isoformat()} is out of range in UTC") from None


UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]
"""A datetime field read from a file: always aware and in UTC (naive is taken as UTC), so
it compares with `utc_now()` instead of raising TypeError."""


class MemoryEntry(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="ignore"
    )

    id: str
    content: str
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    created_at: datetime
    updated_at: datetime | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    importance_score: float = 0.5
    last_seen_at: datetime
    reinforcement_count: int = 1
    archived_at: datetime | None = None
    archive_reason: str | None = None
    retired_into: list[str] = Field(default_factory=list)  # live replacements when archived
    consolidation_reviewed_hash: str | None = None
    # Validity (when the fact was true), apart from when it was saved: `valid_from` unset
    # means "since it was saved" (files from before validity existed have none). A
    # superseded entry is history, not garbage: it stays live, unchanged in content, with
    # the time it stopped being true and the entry that replaced it.
    valid_from: datetime | None = None
    invalid_at: datetime | None = None
    superseded_by: str | None = None
    # Bookkeeping of the store, not of the memory: the write that produced this file
    # (matched against the journal) and the operations applied to it, so a retried
    # operation applies exactly once (see stores.files.memory_store).
    revision: int = 0
    applied_ops: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _legacy_defaults(cls, data: Any) -> Any:
        # Files written before lastSeenAt / reinforcementCount existed load as a single
        # observation last seen when it was created: no migration needed.
        if isinstance(data, dict):
            if data.get("lastSeenAt") is None and data.get("last_seen_at") is None:
                data = {**data, "lastSeenAt": data.get("createdAt", data.get("created_at"))}
            if data.get("reinforcementCount") is None and data.get("reinforcement_count") is None:
                data = {**data, "reinforcementCount": 1}
            if data.get("metadata") is None:
                data = {**data, "metadata": {}}
            if data.get("tags") is None:
                data = {**data, "tags": []}
        return data

    @field_validator(
        "created_at", "last_seen_at", "updated_at", "archived_at", "valid_from", "invalid_at"
    )
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else as_utc(value)

    @model_validator(mode="after")
    def _validity(self) -> MemoryEntry:
        # Half a supersede (an end without a successor, or one replacing itself) would
        # hide a fact from recall with no way to find what replaced it.
        if (self.invalid_at is None) != (self.superseded_by is None):
            raise ValueError("invalidAt and supersededBy are set together or not at all")
        if self.superseded_by == self.id:
            raise ValueError("an entry cannot supersede itself")
        return self

    @field_validator("importance_score")
    @classmethod
    def _importance(cls, value: float) -> float:
        # NaN compares false with everything: it would sit below every floor, prunable.
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise ValueError(f"importanceScore {value!r} is not a number from 0 to 1")
        return value

    @field_validator("reinforcement_count", "revision")
    @classmethod
    def _count(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"{value!r} is negative")
        return value

    @property
    def is_archived(self) -> bool:
        return self.archived_at is not None

    @property
    def is_superseded(self) -> bool:
        return self.superseded_by is not None

    @property
    def is_current(self) -> bool:
        """Live and not replaced by a newer fact: what default recall returns."""
        return not self.is_archived and not self.is_superseded

    @property
    def valid_since(self) -> datetime:
        """When the fact became true: its validFrom, else the subject time its metadata
        gives (`subjectTimeStart`, `subjectTime`: what the fact is about, when known),
        else when it was saved."""
        if self.valid_from is not None:
            return self.valid_from
        for key in ("subjectTimeStart", "subjectTime"):
            text = self.metadata.get(key)
            if text:
                try:
                    return as_utc(datetime.fromisoformat(text))
                except ValueError:
                    continue  # not a date: the save time stands
        return self.created_at

    def valid_at(self, moment: datetime) -> bool:
        """Was this fact the valid one at `moment` (by validity time, not save time)?"""
        if self.valid_since > moment:
            return False
        return self.invalid_at is None or moment < self.invalid_at

    @property
    def fingerprint(self) -> str:
        return content_fingerprint(self.content)

    @property
    def source(self) -> str | None:
        return self.metadata.get(SOURCE_KEY)

    @property
    def top_level_category(self) -> str | None:
        return None if self.category is None else self.category.split("/", 1)[0]

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)

    @classmethod
    def from_json(cls, text: str | bytes) -> MemoryEntry:
        return cls.model_validate_json(text)
