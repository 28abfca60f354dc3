"""Consolidation and preference-inference payloads: ids, fingerprints, counts and bounded
proposals — never the corpus."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from dreamkeeper.activities.payloads import DecayResult, EmbedResult, PurgeResult, SaveFactResult
from dreamkeeper.policies.coverage import Vocabulary

Fingerprints = dict[str, str]  # entry id -> content fingerprint as shown / expected


class VocabularyPayload(BaseModel):
    """The vocabulary read at the top of a cycle, used unchanged for the whole cycle."""

    extra_common: list[str] = Field(default_factory=list)
    always_specific: list[str] = Field(default_factory=list)
    numeric_exempt_categories: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, vocabulary: Vocabulary) -> VocabularyPayload:
        return cls(
            extra_common=sorted(vocabulary.extra_common),
            always_specific=sorted(vocabulary.always_specific),
            numeric_exempt_categories=list(vocabulary.numeric_exempt_categories),
        )

    def build(self) -> Vocabulary:
        return Vocabulary.build(
            self.extra_common, self.always_specific, self.numeric_exempt_categories
        )


class CycleInput(BaseModel):
    agent_id: str
    as_of: datetime


class FoldResult(BaseModel):
    groups: int = 0
    archived: list[str] = Field(default_factory=list)


class GateInput(BaseModel):
    agent_id: str
    as_of: datetime
    max_eligible: int = 400
    embedding_dim: int | None = None  # vectors of this size cluster by cosine


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


class ProposeResult(BaseModel):
    shown: Fingerprints = Field(default_factory=dict)  # what the LLM saw
    to_delete: list[str] = Field(default_factory=list)
    to_save: list[ProposedMerge] = Field(default_factory=list)
    prompt_tokens: int = 0


class MergeCheck(BaseModel):
    merge: ProposedMerge
    shown: Fingerprints


class ReviewInput(BaseModel):
    agent_id: str
    checks: list[MergeCheck]
    vocabulary: VocabularyPayload


class MergeReviewPayload(BaseModel):
    verdict: str
    missing: list[str] = Field(default_factory=list)


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


class SaveMergedResult(BaseModel):
    new_id: str
    persisted: bool
    detail: str | None = None


class ArchiveSourcesInput(BaseModel):
    agent_id: str
    replacement_id: str
    expected: Fingerprints
    as_of: datetime


class ArchiveResult(BaseModel):
    archived: list[str] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)  # changed or gone: left alone


class PruneInput(BaseModel):
    agent_id: str
    expected: Fingerprints
    as_of: datetime


class ProtectedEntry(BaseModel):
    id: str
    category: str | None
    importance: float
    reinforcement: int


class PruneResult(ArchiveResult):
    protected: list[ProtectedEntry] = Field(default_factory=list)


class StampInput(BaseModel):
    agent_id: str
    as_of: datetime
    reviewed: Fingerprints
    declined_clusters: list[list[str]] = Field(default_factory=list)
    merged_clusters: list[list[str]] = Field(default_factory=list)


class StampResult(BaseModel):
    stamped: int = 0


class ConsolidationOptions(BaseModel):
    max_eligible: int = Field(default=400, ge=1, le=2_000)  # entries shown per cycle
    batch_size: int = Field(default=40, ge=1, le=200)  # entries per LLM call
    max_repairs: int = Field(default=5, ge=0, le=50)  # repair calls per cycle


class ConsolidationInput(ConsolidationOptions):
    agent_id: str
    as_of: datetime | None = None
    embedding_dim: int | None = None  # from the cycle's backfill: cluster by cosine too


class MergeOutcome(BaseModel):
    new_id: str
    sources: list[str]


class RejectedMerge(BaseModel):
    sources: list[str]
    dropped: int = 0  # how many specifics the merge lost; which ones only in DEBUG logs


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
    ignored_ids: list[str] = Field(default_factory=list)  # outside the shown set
    protected: list[str] = Field(default_factory=list)  # prunes refused by the floor
    refused_prunes: dict[str, str] = Field(default_factory=dict)
    pruned: list[str] = Field(default_factory=list)
    archived_with_replacement: int = 0
    stamped: int = 0
    prompt_tokens: int = 0

    def summary(self) -> str:
        return (
            f"reviewed {self.reviewed} of {self.total} ({self.withheld} withheld), "
            f"folded {self.folded}, merged {len(self.merged)}, rejected {len(self.rejected)}, "
            f"protected {len(self.protected)}, archived {self.archived_with_replacement} "
            f"with a replacement and {len(self.pruned)} without"
        )


class PreferenceInput(BaseModel):
    agent_id: str
    as_of: datetime | None = None


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
    facts: list[InferredFact] = Field(default_factory=list)
    skipped: str | None = None


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


class DreamResult(BaseModel):
    agent_id: str
    as_of: datetime
    purge: PurgeResult
    consolidation: ConsolidationResult
    preferences: PreferenceResult
    decay: DecayResult
    embeddings: EmbedResult = Field(default_factory=EmbedResult)
