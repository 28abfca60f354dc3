"""Reversible dreams: a dry run's plan, applying a plan, undoing a cycle, and the
recall gate's canaries — payloads only.

A plan names what a cycle would do, each part with the revisions of the entries it reads
(optimistic concurrency: a part whose entries moved on is refused, never applied over
newer state). Merged text is in the plan (it is what would be saved); source texts are
not — the CLI reads them from the store to print the diff.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

Revisions = dict[str, int]  # entry id -> revision as planned


class PlannedMerge(BaseModel):
    new_id: str
    sources: list[str]
    shown: dict[str, str] = Field(default_factory=dict)  # id -> fingerprint
    revisions: Revisions = Field(default_factory=dict)
    content: str
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    importance: float | None = None


class PlannedFold(BaseModel):
    survivor: str
    copies: list[str]
    revisions: Revisions = Field(default_factory=dict)  # survivor and copies


class PlannedPrune(BaseModel):
    id: str
    fingerprint: str
    revision: int = 0


class PlannedSupersede(BaseModel):
    """An outdated entry the cycle would mark as replaced by a newer one (kept, as
    history), as it was shown."""

    id: str
    by: str
    fingerprint: str


class PlannedDecay(BaseModel):
    id: str
    revision: int
    before: float
    after: float


class Refusal(BaseModel):
    ids: list[str]
    reason: str


class DreamPlan(BaseModel):
    agent_id: str
    as_of: datetime
    folds: list[PlannedFold] = Field(default_factory=list)
    merges: list[PlannedMerge] = Field(default_factory=list)
    prunes: list[PlannedPrune] = Field(default_factory=list)
    supersedes: list[PlannedSupersede] = Field(default_factory=list)
    refusals: list[Refusal] = Field(default_factory=list)
    purge: list[str] = Field(default_factory=list)  # archived ids a purge would delete
    purge_revisions: Revisions = Field(default_factory=dict)
    decay: list[PlannedDecay] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)  # passes a dry run does not plan

    def summary(self) -> str:
        return (
            f"plan: fold {sum(len(f.copies) for f in self.folds)} duplicate(s), "
            f"{len(self.merges)} merge(s), {len(self.prunes)} prune(s), "
            f"{len(self.supersedes)} supersede(s), "
            f"{len(self.refusals)} refusal(s), purge {len(self.purge)}, "
            f"decay {len(self.decay)}"
        )


class PlanCheckInput(BaseModel):
    agent_id: str
    revisions: Revisions


class PlanCheckResult(BaseModel):
    changed: dict[str, str] = Field(default_factory=dict)  # id -> what changed


class PlanDetailInput(BaseModel):
    agent_id: str
    ids: list[str]


class PlanDetailResult(BaseModel):
    revisions: Revisions = Field(default_factory=dict)


class ApplyPlanInput(BaseModel):
    plan: DreamPlan
    store_id: str | None = None


class ApplyPlanResult(BaseModel):
    agent_id: str
    cycle_id: str = ""
    folded: list[str] = Field(default_factory=list)
    merged: list[str] = Field(default_factory=list)  # new ids saved
    archived: list[str] = Field(default_factory=list)
    pruned: list[str] = Field(default_factory=list)
    superseded: list[str] = Field(default_factory=list)
    purged: list[str] = Field(default_factory=list)
    decayed: int = 0
    refused: list[Refusal] = Field(default_factory=list)


class ApplyDecayInput(BaseModel):
    agent_id: str
    as_of: datetime
    decay: list[PlannedDecay]
    cycle_id: str | None = None


class ApplyPurgeInput(BaseModel):
    agent_id: str
    as_of: datetime
    revisions: Revisions


class ApplyFoldInput(BaseModel):
    agent_id: str
    as_of: datetime
    fold: PlannedFold
    cycle_id: str | None = None


class ApplyCountResult(BaseModel):
    done: list[str] = Field(default_factory=list)
    refused: dict[str, str] = Field(default_factory=dict)


# -- undo ------------------------------------------------------------------------------


class UndoInput(BaseModel):
    agent_id: str
    cycle_id: str  # the Dream's (or ApplyDreamPlan's) workflow run id
    store_id: str | None = None


class UndoResult(BaseModel):
    agent_id: str
    cycle_id: str
    found: bool = True  # False: no record of that cycle in this store
    restored: list[str] = Field(default_factory=list)  # put back as before the cycle
    archived: list[str] = Field(default_factory=list)  # entries the cycle created
    already_undone: list[str] = Field(default_factory=list)
    touched: dict[str, str] = Field(default_factory=dict)  # changed since: left alone
    gone: list[str] = Field(default_factory=list)  # purged since: nothing to restore

    def summary(self) -> str:
        if not self.found:
            return f"no record of cycle {self.cycle_id} for agent {self.agent_id}"
        return (
            f"undo of {self.cycle_id}: restored {len(self.restored)}, archived "
            f"{len(self.archived)} created, {len(self.touched)} changed since (left alone), "
            f"{len(self.already_undone)} already undone, {len(self.gone)} gone"
        )


# -- recall gate -----------------------------------------------------------------------


class Canary(BaseModel):
    source: str
    merge: str  # the merged entry's id
    query: str
    terms: list[str]  # index tokens a hit must carry
    anchors: list[str] = Field(default_factory=list)  # its rarest specifics, in the query
    rank: int  # the source's rank for the query before the merge (1-based)


class CanaryInput(BaseModel):
    agent_id: str
    merges: dict[str, list[str]]  # planned new id -> its sources
    top_k: int = 5


class CanaryResult(BaseModel):
    canaries: list[Canary] = Field(default_factory=list)
    seconds: float = 0.0


class RecallCheckInput(BaseModel):
    agent_id: str
    canaries: list[Canary]
    merged: dict[str, list[str]]  # saved new id -> sources retired into it
    top_k: int = 5
    as_of: datetime
    cycle_id: str | None = None


class RecallCheckResult(BaseModel):
    regressed: dict[str, list[str]] = Field(default_factory=dict)  # new id -> sources
    reverted: list[str] = Field(default_factory=list)  # merges undone
    checked: int = 0
    seconds: float = 0.0


# -- approval --------------------------------------------------------------------------


class PendingItem(BaseModel):
    key: str  # "merge:{new id}" or "prune:{id}"
    kind: str  # merge | prune
    ids: list[str]  # the entries it would archive
    why: str  # what made it risky


class ApprovalDecision(BaseModel):
    keys: list[str] = Field(default_factory=list)  # empty: every pending item


class ApprovalState(BaseModel):
    pending: list[PendingItem] = Field(default_factory=list)
    approved: list[str] = Field(default_factory=list)
    rejected: list[str] = Field(default_factory=list)
    timed_out: list[str] = Field(default_factory=list)
