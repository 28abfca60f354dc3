"""Workflow and activity payloads: ids, counts and times — never memory content."""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field

from dreamkeeper.core.api import Hit
from dreamkeeper.core.dream_plan import PlannedDecay


class DedupOutcome(StrEnum):
    """What save-time dedup did with a fact (the value travels as this string)."""

    CREATED = "created"
    REINFORCED = "reinforced"
    EXTENDED = "extended"


class SaveOutcome(StrEnum):
    """What became of a saved note."""

    ENRICHED = "enriched"  # split into facts that cover it; the original retired
    KEPT = "kept"  # the original stays as it was saved
    DEDUPLICATED = "deduplicated"  # an existing entry absorbed it
    REFUSED = "refused"  # nothing saved: what it said it replaces could not be replaced


class PurgeInput(BaseModel):
    agent_id: str
    store_id: str | None = None
    retention_days: float | None = None  # None: the worker's configured retention
    as_of: datetime | None = None  # None: workflow.now()
    dry_run: bool = False  # report what would be purged, delete nothing


class PurgeResult(BaseModel):
    agent_id: str
    as_of: datetime
    considered: int = 0
    purged: list[str] = Field(default_factory=list)
    kept_high_value: list[str] = Field(default_factory=list)
    kept_in_retention: int = 0
    revisions: dict[str, int] = Field(default_factory=dict)  # dry runs: of `purged`


class DecayInput(BaseModel):
    agent_id: str
    store_id: str | None = None
    as_of: datetime | None = None  # None: workflow.now()
    dry_run: bool = False  # plan the decay, write nothing
    cycle_id: str | None = None  # the dream cycle whose ledger records the writes
    exclude: list[str] = Field(default_factory=list)  # dry runs: planned to be archived


class DecayResult(BaseModel):
    agent_id: str
    as_of: datetime
    considered: int = 0
    decayed: int = 0
    planned: list[PlannedDecay] = Field(default_factory=list)  # dry runs only


class SweepInput(BaseModel):
    # Dream cycles run at once (None: the default, DEFAULT_SWEEP_PARALLELISM). The
    # schedule carries the worker's DREAMKEEPER_SWEEP_PARALLELISM.
    parallelism: int | None = Field(default=None, ge=1, le=10_000)


DEFAULT_SWEEP_PARALLELISM = 8


class SweepResult(BaseModel):
    started: list[str] = Field(default_factory=list)
    already_running: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)
    idle: list[str] = Field(default_factory=list)  # nothing to do: no cycle started


class EntryOpInput(BaseModel):
    """Archive, restore or re-score one entry."""

    agent_id: str
    entry_id: str
    importance: float | None = None  # for UpdateMemoryImportance
    reason: str = "deleted by agent tool"  # for ArchiveMemory
    force: bool = False  # for RestoreMemory: restore even if what it went into is live
    store_id: str | None = None  # the caller's store; None: whichever the worker has


class EntryOpResult(BaseModel):
    agent_id: str
    entry_id: str
    archived: bool
    archive_reason: str | None = None
    importance: float


def content_sha256(content: str) -> str:
    """How a save's update names the content it means (SaveMemory refuses another)."""
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


class SaveInput(BaseModel):
    agent_id: str
    entry_id: str  # chosen by the client: it names the workflow
    content: str
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    source: str | None = None
    importance: float = 0.5
    store_id: str | None = None  # the caller's store; None: whichever the worker has
    # Entries this save replaces (a changed fact): superseded by it when it is persisted,
    # each only if still current then and about the same subject (`force_replace`: even
    # if not, journaled as forced). Older clients send nothing.
    replaces: list[str] = Field(default_factory=list)
    force_replace: bool = False
    # When the fact became true, if not when it is saved ("moved here last week").
    valid_from: datetime | None = None


class SaveAck(BaseModel):
    """What the caller of save_memory gets back once the original is durable."""

    agent_id: str
    entry_id: str
    note: str | None = None  # e.g. an unrecognised source that was dropped
    # An earlier run of this save already finished with the entry (a retried call):
    # nothing more to do.
    already_done: bool = False
    # What the worker that persisted it will do next (older workers: unset, so the
    # workflow asks the activities as before): why enrichment is skipped (no LLM, or
    # text flagged as an instruction), and whether an embedding model is configured.
    enrich_skipped: str | None = None
    embeddings: bool | None = None
    replaced: list[str] = Field(default_factory=list)  # the entries it superseded
    # Entries named in `replaces` that the subject check could not tell apart from
    # another subject: kept current, linked to it as possible changes.
    unconfirmed: list[str] = Field(default_factory=list)
    # Nothing was saved, and why (ids and reasons, no content): what `replaces` named
    # could not be replaced. `refused_type` is the `core.errors` failure type a client
    # raises for it (older workers: unset, their refusals fail the run).
    refused: str | None = None
    refused_type: str | None = None


class FactProposal(BaseModel):
    content: str
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    importance: float = 0.5
    metadata: dict[str, str] = Field(default_factory=dict)
    # Entries the LLM says this fact makes outdated, each with the fingerprint it was
    # shown: only ids it was shown get here; the store checks the rest when it saves.
    replaces: dict[str, str] = Field(default_factory=dict)
    valid_from: datetime | None = None  # the note's, or the LLM's reading of it (checked)


class EnrichResult(BaseModel):
    facts: list[FactProposal] = Field(default_factory=list)  # each valid by the store's rules
    skipped: str | None = None  # why enrichment did not run
    dropped: int = 0  # facts of the reply the store would refuse (never saved)
    ignored: int = 0  # facts past the per-reply cap (never saved)


class SaveFactInput(BaseModel):
    agent_id: str
    new_id: str
    op_id: str
    fact: FactProposal
    exclude: list[str] = Field(default_factory=list)
    touched: list[str] = Field(default_factory=list)  # reinforced by this save already


class RetireInput(BaseModel):
    """Retire the original into the entries its facts landed in."""

    agent_id: str
    entry_id: str
    into: list[str]
    reason: str


class RetireResult(BaseModel):
    retired: bool
    detail: str | None = None
    missing: int = 0  # how many specifics the replacements lack (never which)


class SaveFactResult(BaseModel):
    outcome: DedupOutcome
    entry_id: str
    replaced: list[str] = Field(default_factory=list)  # superseded by this fact
    conflicts: list[str] = Field(default_factory=list)  # current entries it probably changes
    unconfirmed: list[str] = Field(default_factory=list)  # replaces it could not confirm: linked


class MarkInput(BaseModel):
    agent_id: str
    entry_id: str
    enrichment: str  # the status recorded in the original's metadata


class EmbedInput(BaseModel):
    """Vectors for these entries (after a save), or — ids None — every live entry that
    lacks a current one (the dream cycle's backfill), at most `limit` per call."""

    agent_id: str
    ids: list[str] | None = None
    limit: int = Field(default=512, ge=1, le=10_000)


class EmbedResult(BaseModel):
    embedded: int = 0
    failed: int = 0
    fresh: int = 0
    remaining: int = 0
    dim: int | None = None
    skipped: str | None = None


class SaveResult(BaseModel):
    agent_id: str
    entry_id: str
    outcome: SaveOutcome
    replacements: list[SaveFactResult] = Field(default_factory=list)
    detail: str | None = None
    embeddings: EmbedResult | None = None  # None: the step failed (the backfill catches up)


class SearchInput(BaseModel):
    """A search run by the worker that owns the agent (a sharded client has no files)."""

    agent_id: str
    query: str | None = None
    category: str | None = None
    tags: list[str] | None = None
    metadata: dict[str, str] | None = None
    created_after: str | None = None
    created_before: str | None = None
    limit: int = Field(default=20, ge=1, le=1_000)


class SearchOutput(BaseModel):
    hits: list[Hit] = Field(default_factory=list)  # as the HTTP search answers them
    served_by: str = ""  # the worker's store id: where the search ran
