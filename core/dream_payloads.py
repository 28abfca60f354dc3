"""Consolidation and preference-inference payloads: ids, fingerprints, counts and bounded
proposals — never the corpus."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from dreamkeeper.core.dream_plan import DreamPlan, PlannedFold
from dreamkeeper.core.payloads import DecayResult, EmbedResult, PurgeResult, SaveFactResult

Fingerprints = dict[str, str]  # entry id -> content fingerprint as shown / expected


class VocabularyPayload(BaseModel):
    """The vocabulary read at the top of a cycle, used unchanged for the whole cycle
    (policies.coverage converts it to and from its `Vocabulary`)."""

    extra_common: list[str] = Field(default_factory=list)
    always_specific: list[str] = Field(default_factory=list)
    numeric_exempt_categories: list[str] = Field(default_factory=list)


class CycleInput(BaseModel):
    agent_id: str
    as_of: datetime
    store_id: str | None = None  # the store the cycle was started for


class FoldInput(CycleInput):
    archive_share: float = 0.2
    min_archive_budget: int = 4
    dry_run: bool = False  # plan the folds, write nothing
    cycle_id: str | None = None  # whose ledger records the writes


class FoldResult(BaseModel):
    groups: int = 0
    archived: list[str] = Field(default_factory=list)
    live: int = 0  # live entries before the fold: the cycle's archive budget is a share
    deferred: int = 0  # copies left for a later cycle by the budget
    planned: list[PlannedFold] = Field(default_factory=list)  # dry runs only


class GateInput(BaseModel):
    agent_id: str
    as_of: datetime
    max_eligible: int = 400
    embedding_dim: int | None = None  # vectors of this size cluster by cosine
    dry_run: bool = False  # leave the settled-cluster file as it is
    exclude: list[str] = Field(default_factory=list)  # a dry run's planned fold copies


class GateResult(BaseModel):
    total: int
    groups: list[list[str]] = Field(default_factory=list)
    merge_only: list[str] = Field(default_factory=list)
    clusters: list[list[str]] = Field(default_factory=list)
    withheld: int = 0
    deferred: int = 0
    reopened: int = 0
    clustering_failed: str | None = None
    vocabulary: VocabularyPayload = Field(default_factory=VocabularyPayload)
    vocabulary_summary: str = ""
    llm_configured: bool = False
    held_back: int = 0  # saves still in flight, or text that reads as an instruction
    approval: str | None = None  # the agent's own setting (stores.dream_state.dream_settings)
    recent_prunes: int = 0  # standalone prunes in the week up to as_of (policies.prune_cap)


class ProposeInput(BaseModel):
    agent_id: str
    ids: list[str]
    hints: list[list[str]] = Field(default_factory=list)


class ProposedMerge(BaseModel):
    content: str
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    source_ids: list[str] = Field(default_factory=list)
    importance: float | None = None


class SupersedePair(BaseModel):
    """`id` is outdated: `by` states its current value."""

    id: str
    by: str


class ProposeResult(BaseModel):
    shown: Fingerprints = Field(default_factory=dict)  # what the LLM saw
    to_delete: list[str] = Field(default_factory=list)
    to_save: list[ProposedMerge] = Field(default_factory=list)
    prompt_tokens: int = 0
    superseded: list[SupersedePair] = Field(default_factory=list)


class SupersedeInput(BaseModel):
    agent_id: str
    pairs: list[SupersedePair]
    expected: Fingerprints  # each pair's entries, as the LLM saw them
    as_of: datetime
    max_applied: int  # what the cycle's budget leaves
    dry_run: bool = False
    cycle_id: str | None = None
    why: str = "outdated"  # what the journal says made it history (ids follow)


class ConflictsInput(BaseModel):
    """Unsettled conflicts (`stores.longterm.conflicts`) a cycle may settle."""

    agent_id: str
    exclude: list[str] = Field(default_factory=list)  # planned to be folded (dry runs)
    limit: int = Field(default=200, ge=1, le=5_000)


class ConflictsResult(BaseModel):
    pairs: list[SupersedePair] = Field(default_factory=list)  # older `id`, newer `by`
    shown: Fingerprints = Field(default_factory=dict)  # both entries of each, as found


class SupersedeResult(BaseModel):
    applied: list[SupersedePair] = Field(default_factory=list)  # planned, in a dry run
    refused: dict[str, str] = Field(default_factory=dict)  # old id -> why not
    deferred: list[str] = Field(default_factory=list)  # past the budget


class MergeCheck(BaseModel):
    merge: ProposedMerge
    shown: Fingerprints


class ReviewInput(BaseModel):
    agent_id: str
    checks: list[MergeCheck]
    vocabulary: VocabularyPayload
    max_sources: int = 16


class MergeReviewPayload(BaseModel):
    verdict: str
    missing: list[str] = Field(default_factory=list)  # for the repair prompt only
    reason: str | None = None
    high_value: bool = False  # a source is above the high-value floor (approval)


class ReviewResult(BaseModel):
    reviews: list[MergeReviewPayload] = Field(default_factory=list)


class RepairInput(BaseModel):
    agent_id: str
    merge: ProposedMerge
    missing: list[str]


class RepairResult(BaseModel):
    content: str
    prompt_tokens: int = 0


class SaveMergedInput(BaseModel):
    agent_id: str
    new_id: str
    check: MergeCheck
    merged_at: datetime
    cycle_id: str | None = None


class SaveMergedResult(BaseModel):
    new_id: str
    persisted: bool
    detail: str | None = None


class ArchiveSourcesInput(BaseModel):
    agent_id: str
    replacement_id: str
    expected: Fingerprints
    as_of: datetime
    cycle_id: str | None = None


class ArchiveResult(BaseModel):
    archived: list[str] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)  # changed or gone: left alone


class PruneInput(BaseModel):
    agent_id: str
    expected: Fingerprints
    as_of: datetime
    max_archived: int = 1_000_000  # the cycle's remaining archive budget
    dry_run: bool = False  # decide, archive nothing
    cycle_id: str | None = None


class ProtectedEntry(BaseModel):
    id: str
    category: str | None
    importance: float
    reinforcement: int


class PruneResult(ArchiveResult):
    protected: list[ProtectedEntry] = Field(default_factory=list)
    deferred: list[str] = Field(default_factory=list)  # past the budget: a later cycle


class StampInput(BaseModel):
    agent_id: str
    as_of: datetime
    reviewed: Fingerprints
    declined_clusters: list[list[str]] = Field(default_factory=list)
    merged_clusters: list[list[str]] = Field(default_factory=list)
    cycle_id: str | None = None


class StampResult(BaseModel):
    stamped: int = 0


class ConsolidationOptions(BaseModel):
    max_eligible: int = Field(default=400, ge=1, le=2_000)  # entries shown per cycle
    batch_size: int = Field(default=40, ge=1, le=200)  # entries per LLM call
    max_repairs: int = Field(default=5, ge=0, le=50)  # repair calls per cycle
    # Bounded damage: one cycle archives at most this share of the live entries (folds,
    # merge sources and prunes together; never fewer than the minimum), the rest waits.
    archive_share: float = Field(default=0.2, gt=0.0, le=1.0)
    min_archive_budget: int = Field(default=4, ge=0, le=1_000)
    max_merge_sources: int = Field(default=16, ge=2, le=50)
    # Reversible dreams: plan only; check each merge's canary queries after it.
    dry_run: bool = False
    recall_gate: bool = True
    recall_top_k: int = Field(default=5, ge=1, le=50)
    # Approval: off | risky (merges archiving a high-value source or with many sources,
    # prunes above a count wait for an operator) | all (every merge and prune waits).
    approval: Literal["off", "risky", "all"] = "off"
    approval_timeout_minutes: float = Field(default=60.0, gt=0.0, le=24 * 60)
    risky_sources: int = Field(default=5, ge=2, le=50)
    risky_prunes: int = Field(default=10, ge=0, le=10_000)
    # Across cycles: standalone prunes over a rolling week beyond this share of the live
    # entries (never fewer than the minimum) wait for an operator (policies.prune_cap).
    weekly_prune_share: float = Field(default=0.25, gt=0.0, le=1.0)
    min_weekly_prunes: int = Field(default=4, ge=0, le=100_000)


class ConsolidationInput(ConsolidationOptions):
    agent_id: str
    as_of: datetime | None = None
    embedding_dim: int | None = None  # from the cycle's backfill: cluster by cosine too
    store_id: str | None = None
    cycle_id: str | None = None  # the Dream's run id (None: this workflow's own)


class MergeOutcome(BaseModel):
    new_id: str
    sources: list[str]


class RejectedMerge(BaseModel):
    """Ids and a count only: the specifics themselves never go into a workflow result."""

    sources: list[str]
    dropped: int = 0  # how many specifics the merge lost; which ones only in DEBUG logs
    reason: str | None = None


class ConsolidationResult(BaseModel):
    agent_id: str
    as_of: datetime
    folded: int = 0
    total: int = 0
    reviewed: int = 0
    withheld: int = 0
    deferred: int = 0
    reopened_clusters: int = 0
    clustering_failed: str | None = None
    llm_skipped: str | None = None
    batches: int = 0
    batches_failed: int = 0
    merges_proposed: int = 0
    merged: list[MergeOutcome] = Field(default_factory=list)
    rejected: list[RejectedMerge] = Field(default_factory=list)
    repaired: int = 0
    left_alone: int = 0  # merges skipped: blank, a source changed, overlap, too long
    unsafe: int = 0  # refused: would archive a high-value source out of context
    deferred_by_budget: int = 0  # archives the cycle's budget left for later cycles
    held_back: int = 0
    ignored_ids: list[str] = Field(default_factory=list)  # outside the shown set
    protected: list[str] = Field(default_factory=list)  # prunes refused by the floor
    refused_prunes: dict[str, str] = Field(default_factory=dict)
    pruned: list[str] = Field(default_factory=list)
    superseded: list[str] = Field(default_factory=list)  # marked outdated, kept as history
    refused_supersedes: dict[str, str] = Field(default_factory=dict)
    # Of `superseded`: conflicts found at save time that this cycle settled, and those it
    # left as visible conflicts (the floor, a changed entry), each with why.
    settled_conflicts: list[str] = Field(default_factory=list)
    unsettled_conflicts: dict[str, str] = Field(default_factory=dict)
    archived_with_replacement: int = 0
    stamped: int = 0
    prompt_tokens: int = 0
    plan: DreamPlan | None = None  # dry runs: what the cycle would do, applied nothing
    gate_checked: int = 0  # canary queries checked by the recall gate
    gate_seconds: float = 0.0  # the gate's activity time this cycle
    cycle_id: str | None = None

    def summary(self) -> str:
        text = (
            f"reviewed {self.reviewed} of {self.total} ({self.withheld} withheld), "
            f"folded {self.folded}, merged {len(self.merged)}, rejected {len(self.rejected)}, "
            f"protected {len(self.protected)}, archived {self.archived_with_replacement} "
            f"with a replacement and {len(self.pruned)} without"
        )
        if self.superseded:
            text += f", {len(self.superseded)} superseded by a newer entry"
        if self.settled_conflicts:
            text += f" ({len(self.settled_conflicts)} of them conflicts found at save time)"
        if self.deferred_by_budget:
            text += f", {self.deferred_by_budget} left for later cycles by the archive budget"
        return text


class PreferenceInput(BaseModel):
    agent_id: str
    as_of: datetime | None = None
    store_id: str | None = None


class RotateResult(BaseModel):
    path: str | None = None  # the rotated log, or None when there was nothing to read
    turns: int = 0


class InferInput(BaseModel):
    agent_id: str
    path: str


class InferredFact(BaseModel):
    content: str
    tags: list[str] = Field(default_factory=list)
    importance: float = 0.6
    requires_user_permission: bool = False


class InferResult(BaseModel):
    facts: list[InferredFact] = Field(default_factory=list)  # each valid by the store's rules
    skipped: str | None = None
    dropped: int = 0  # preferences of the reply the store would refuse (never saved)
    ignored: int = 0  # preferences past the per-reply cap (never saved)


class PreferenceResult(BaseModel):
    agent_id: str
    turns: int = 0
    rotated_to: str | None = None
    saved: list[SaveFactResult] = Field(default_factory=list)
    skipped: str | None = None


class DreamInput(BaseModel):
    agent_id: str
    as_of: datetime | None = None
    consolidation: ConsolidationOptions = Field(default_factory=ConsolidationOptions)
    store_id: str | None = None  # the store the cycle is for; None: the worker's
    dry_run: bool = False  # plan everything, apply nothing: the plan is the result


class DreamResult(BaseModel):
    agent_id: str
    as_of: datetime
    purge: PurgeResult
    consolidation: ConsolidationResult
    preferences: PreferenceResult
    decay: DecayResult
    embeddings: EmbedResult = Field(default_factory=EmbedResult)
    cycle_id: str | None = None  # the run id `dreamkeeper dream undo` takes
    plan: DreamPlan | None = None  # dry runs only
    idle: list[str] = Field(default_factory=list)  # passes skipped: nothing to do


class WorkInput(BaseModel):
    """Which passes of a cycle have anything to do for these agents as of `as_of`."""

    agent_ids: list[str]
    as_of: datetime
    store_id: str | None = None  # one agent's cycle for a given store; None: the worker's


class DreamWork(BaseModel):
    """One agent's work per pass, counted from state the store already keeps. A pass
    whose count is zero has nothing to do and is skipped."""

    agent_id: str
    live: int = 0  # live entries (a skipped consolidation's total)
    held_back: int = 0  # live entries no dream may touch (flagged, save in flight)
    purge: int = 0  # archived past retention and not protected, plus ledgers past it
    vectors: int = 0  # live entries without a current vector (0 without a model)
    consolidation: int = 0  # exact-duplicate copies, plus unreviewed entries and due
    # settled clusters when an LLM is configured
    preferences: int = 0  # bytes in the live conversation log
    decay: int = 0  # live entries whose decay step is due
    embeddings_configured: bool = False

    @property
    def idle(self) -> bool:
        return not (
            self.purge or self.vectors or self.consolidation or self.preferences or self.decay
        )


class WorkResult(BaseModel):
    agents: list[DreamWork] = Field(default_factory=list)
