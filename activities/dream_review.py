"""Reversible-dream activities: a plan's revisions, checking and applying a plan's
parts, and the recall gate's canaries. Every write records its intent in the cycle's
ledger first (`stores.dream_state.dream_ledger`), so the cycle can be undone."""

from __future__ import annotations

import time
from datetime import timedelta

import numpy as np
from temporalio import activity

from dreamkeeper.activities.consolidation import fold_duplicates
from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.dream_plan import (
    ApplyCountResult,
    ApplyDecayInput,
    ApplyFoldInput,
    ApplyPurgeInput,
    Canary,
    CanaryInput,
    CanaryResult,
    PlanCheckInput,
    PlanCheckResult,
    PlanDetailInput,
    PlanDetailResult,
    RecallCheckInput,
    RecallCheckResult,
)
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.settings import DecayParams, HighValueFloor
from dreamkeeper.policies.coverage import DEFAULT_VOCABULARY, Source, extract_specifics
from dreamkeeper.policies.decay import decayed_importance
from dreamkeeper.policies.merge import Fold, exact_duplicate_folds
from dreamkeeper.policies.recall_gate import (
    canary_terms,
    carrier_rank,
    matching_token,
    ordinary_terms,
)
from dreamkeeper.stores.contract import IntentLog, MemoryStore
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.dream_state.dream_ledger import ledger_for
from dreamkeeper.stores.longterm.records import document_text, retired_into
from dreamkeeper.stores.search.bm25 import tokenize

RECALL_REJECTED = "rejected: recall regression"
# The source's rarest specifics join its canary query, as a user's query would name the
# person or project: the query is about this memory, not every memory sharing a habit.
ANCHOR_TERMS = 2


def _ranked(store: MemoryStore, terms: list[str], top_k: int) -> list[tuple[str, frozenset]]:
    """The top k live entries for the terms by BM25, each with its index terms."""
    index = store.index()
    scores = index.scores(terms)
    if not len(scores):
        return []
    order = np.argsort(-scores, kind="stable")[:top_k]
    out = []
    for slot in order:
        if scores[slot] <= 0:
            break
        key = index.key_at(int(slot))
        entry = store.get(key) if key is not None else None
        if entry is not None and not entry.is_archived:
            out.append((entry.id, frozenset(tokenize(document_text(entry)))))
    return out


def _specific_tokens(entry: MemoryEntry) -> set[str]:
    found = extract_specifics(Source(entry.content, entry.category), DEFAULT_VOCABULARY)
    return set(tokenize(" ".join(found.words | found.numbers | found.exact)))


class DreamReviewActivities:
    def __init__(
        self,
        stores: StoreRegistry,
        *,
        floor: HighValueFloor,
        decay: DecayParams,
        retention: timedelta,
    ) -> None:
        self._stores = stores
        self._floor = floor
        self._decay = decay
        self._retention = retention

    @activity.defn(name="plan_details")
    def plan_details(self, inp: PlanDetailInput) -> PlanDetailResult:
        with self._stores.using(inp.agent_id) as store:
            return PlanDetailResult(
                revisions={i: e.revision for i in inp.ids if (e := store.get(i)) is not None}
            )

    @activity.defn(name="check_plan_sources")
    def check_plan_sources(self, inp: PlanCheckInput) -> PlanCheckResult:
        changed = {}
        with self._stores.using(inp.agent_id) as store:
            for entry_id, revision in inp.revisions.items():
                entry = store.get(entry_id)
                if entry is None:
                    changed[entry_id] = "gone"
                elif entry.revision != revision:
                    changed[entry_id] = f"revision {entry.revision}, planned at {revision}"
        return PlanCheckResult(changed=changed)

    # -- applying a plan's parts -------------------------------------------------------

    @activity.defn(name="apply_fold")
    def apply_fold(self, inp: ApplyFoldInput) -> ApplyCountResult:
        with self._stores.using(inp.agent_id) as store, store.writing():
            members = [store.get(i) for i in [inp.fold.survivor, *inp.fold.copies]]
            live = [e for e in members if e is not None and not e.is_archived]
            folds: list[Fold] = exact_duplicate_folds(live)
            fold = next((f for f in folds if f.survivor.id == inp.fold.survivor), None)
            if fold is None or sorted(fold.copies) != sorted(inp.fold.copies):
                return ApplyCountResult(refused={inp.fold.survivor: "no longer exact duplicates"})
            done = fold_duplicates(
                store, fold, inp.as_of, ledger_for(store.documents, inp.cycle_id)
            )
        return ApplyCountResult(done=done)

    @activity.defn(name="apply_decay")
    def apply_decay(self, inp: ApplyDecayInput) -> ApplyCountResult:
        result = ApplyCountResult()
        with self._stores.using(inp.agent_id) as store, store.writing():
            ledger = ledger_for(store.documents, inp.cycle_id)
            for planned in inp.decay:
                entry = store.get(planned.id)
                if entry is None or entry.is_archived or entry.revision != planned.revision:
                    result.refused[planned.id] = "changed since the plan"
                    continue
                new = decayed_importance(entry, inp.as_of, self._decay)
                if new is None:
                    result.refused[planned.id] = "nothing to decay"
                    continue
                ledger.note("decay", [(entry.id, entry)])
                store.put(
                    entry.model_copy(update={"importance_score": new, "updated_at": inp.as_of}),
                    action=JournalAction.DECAYED,
                    reason=f"decayed as of {inp.as_of.isoformat()}",
                )
                result.done.append(entry.id)
        return result

    @activity.defn(name="apply_purge")
    def apply_purge(self, inp: ApplyPurgeInput) -> ApplyCountResult:
        with self._stores.using(inp.agent_id) as store:
            report = store.purge(
                self._retention,
                keep=self._floor.protects,
                now=inp.as_of,
                only=lambda e: inp.revisions.get(e.id) == e.revision,
            )
        refused = {i: "changed since the plan" for i in inp.revisions if i not in report.purged}
        return ApplyCountResult(done=report.purged, refused=refused)

    # -- the recall gate ---------------------------------------------------------------

    @activity.defn(name="record_canaries")
    def record_canaries(self, inp: CanaryInput) -> CanaryResult:
        began = time.perf_counter()
        canaries = []
        with self._stores.using(inp.agent_id) as store:
            index = store.index()
            for new_id, sources in inp.merges.items():
                for sid in sources:
                    entry = store.get(sid)
                    if entry is None or entry.is_archived:
                        continue
                    specifics = _specific_tokens(entry)
                    tokens = tokenize(entry.content)
                    terms = canary_terms(ordinary_terms(tokens, specifics), index.idf)
                    if not terms:
                        continue
                    anchors = canary_terms(
                        [t for t in tokens if t in specifics], index.idf, ANCHOR_TERMS
                    )
                    query = terms + anchors
                    rank = carrier_rank(_ranked(store, query, inp.top_k), sid, terms)
                    if rank:  # findable now: its merge must be as findable
                        canaries.append(
                            Canary(
                                source=sid,
                                merge=new_id,
                                query=" ".join(query),
                                terms=terms,
                                anchors=anchors,
                                rank=rank,
                            )
                        )
        return CanaryResult(canaries=canaries, seconds=time.perf_counter() - began)

    @activity.defn(name="check_recall")
    def check_recall(self, inp: RecallCheckInput) -> RecallCheckResult:
        began = time.perf_counter()
        result = RecallCheckResult()
        with self._stores.using(inp.agent_id) as store, store.writing():
            for canary in inp.canaries:
                if canary.merge not in inp.merged:
                    continue
                result.checked += 1
                merged = store.get(canary.merge)
                if merged is None or merged.is_archived:
                    continue  # undone already (a retry), or not saved
                # The merged entry's own spelling of each term (an inflection counts),
                # then: is it in the top k for that query?
                carried = frozenset(tokenize(document_text(merged)))
                query = [matching_token(t, carried) for t in canary.terms]
                terms = [q for q in query if q is not None]
                full = terms + canary.anchors
                ranked = _ranked(store, full, inp.top_k) if len(terms) == len(query) else []
                if not carrier_rank(ranked, canary.merge, terms):
                    result.regressed.setdefault(canary.merge, []).append(canary.source)
            for new_id in result.regressed:
                if self._revert(store, new_id, inp, ledger_for(store.documents, inp.cycle_id)):
                    result.reverted.append(new_id)
            # A retry after the revert landed: report the merges already undone too.
            for new_id in inp.merged:
                entry = store.get(new_id)
                if (
                    entry is not None
                    and entry.archive_reason == RECALL_REJECTED
                    and new_id not in result.reverted
                ):
                    result.reverted.append(new_id)
        result.seconds = time.perf_counter() - began
        return result

    @staticmethod
    def _revert(store: MemoryStore, new_id: str, inp: RecallCheckInput, ledger: IntentLog) -> bool:
        """Archive the merged entry, then restore exactly the sources retired into it."""
        merged = store.get(new_id)
        if merged is None or merged.is_archived:
            return False
        ledger.note("recall-gate", [(new_id, merged)])
        store.archive(new_id, RECALL_REJECTED, now=inp.as_of)
        for sid in inp.merged[new_id]:
            source: MemoryEntry | None = store.get(sid)
            if source is not None and source.is_archived and retired_into(source) == [new_id]:
                ledger.note("recall-gate", [(sid, source)])
                store.restore(sid)
        return True
