"""Workflow and activity payloads: ids, counts and times — never memory content."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class PurgeInput(BaseModel):
    agent_id: str
    retention_days: float | None = None  # None: the worker's configured retention
    as_of: datetime | None = None  # None: workflow.now()


class PurgeResult(BaseModel):
    agent_id: str
    as_of: datetime
    considered: int = 0
    purged: list[str] = Field(default_factory=list)
    kept_high_value: list[str] = Field(default_factory=list)
    kept_in_retention: int = 0


class DecayInput(BaseModel):
    agent_id: str
    as_of: datetime | None = None  # None: workflow.now()


class DecayResult(BaseModel):
    agent_id: str
    as_of: datetime
    considered: int = 0
    decayed: int = 0


class DreamInput(BaseModel):
    agent_id: str
    as_of: datetime | None = None


class DreamResult(BaseModel):
    agent_id: str
    as_of: datetime
    purge: PurgeResult
    decay: DecayResult


class SweepInput(BaseModel):
    pass


class SweepResult(BaseModel):
    started: list[str] = Field(default_factory=list)
    already_running: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)


class EntryOpInput(BaseModel):
    """Archive, restore or re-score one entry."""

    agent_id: str
    entry_id: str
    importance: float | None = None  # for UpdateMemoryImportance
    reason: str = "deleted by agent tool"  # for ArchiveMemory


class EntryOpResult(BaseModel):
    agent_id: str
    entry_id: str
    archived: bool
    archive_reason: str | None = None
    importance: float
