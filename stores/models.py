"""The long-term memory entry, exactly as it lies on disk (camelCase JSON)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

SOURCE_KEY = "source"
"""Metadata key holding an entry's provenance (see policies.provenance)."""


def content_fingerprint(content: str) -> str:
    """First 8 bytes of SHA-256 of the UTF-8 content, hex: the review and change stamp."""
    return hashlib.sha256(content.encode("utf-8")).digest()[:8].hex()


def utc_now() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """Naive datetimes from older files are taken as UTC; everything else is converted."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


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
    consolidation_reviewed_hash: str | None = None

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

    @field_validator("created_at", "last_seen_at", "updated_at", "archived_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else as_utc(value)

    @property
    def is_archived(self) -> bool:
        return self.archived_at is not None

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
