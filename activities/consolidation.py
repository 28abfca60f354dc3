"""Consolidation activities: one durable step each, in the order the workflow enforces.

Every write is check-then-write: a merged entry's id is derived from its sources and
text, so a retry finds the entry it already wrote; archiving checks the expected
fingerprint, so a source edited after it was shown is left alone; the fold writes a
ledger before its survivor, so a retry never sums reinforcement twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter

from temporalio import activity
from temporalio.exceptions import ApplicationError

from dreamkeeper.activities.dream_payloads import (
    ArchiveResult,
    ArchiveSourcesInput,
    CycleInput,
    FoldResult,
    GateInput,
    GateResult,
    MergeReviewPayload,
    ProposedMerge,
    ProposeInput,
    ProposeResult,
    ProtectedEntry,
    PruneInput,
    PruneResult,
    RepairInput,
    RepairResult,
    ReviewInput,
    ReviewResult,
    SaveMergedInput,
    SaveMergedResult,
    StampInput,
    StampResult,
    VocabularyPayload,
)
from dreamkeeper.activities.dream_prompts import (
    consolidation_messages,
    parse_consolidation,
    parse_repair,
    prompt_tokens,
    repair_messages,
)
from dreamkeeper.activities.llm import LLMSettings, ask_llm
from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.policies.consolidation import EPHEMERAL_REASON, review_merge
from dreamkeeper.policies.dedup import content_tokens
from dreamkeeper.policies.gating import (
    GateEntry,
    SettledCluster,
    cluster_key,
    cosine_pairs,
    gate,
    near_duplicate_clusters,
)
from dreamkeeper.policies.high_value import HighValueFloor
from dreamkeeper.policies.merge import MergeProposal, exact_duplicate_folds, merged_entry
from dreamkeeper.stores.consolidation_state import ClusterState
from dreamkeeper.stores.files import atomic_write_text
from dreamkeeper.stores.journal import JournalAction
from dreamkeeper.stores.memory_store import FileMemoryStore
from dreamkeeper.stores.models import MemoryEntry
from dreamkeeper.stores.validation import InvalidInput, validate_category, validate_tags
from dreamkeeper.stores.vocabulary import load_vocabulary

FEEDBACK_SHOWN = 5


class ConsolidationActivities:
    def __init__(self, stores: StoreRegistry, llm: LLMSettings, floor: HighValueFloor) -> None:
        self._stores = stores
        self._llm = llm
        self._floor = floor
        self._tokens: dict[str, tuple[str, frozenset[str]]] = {}  # id -> (fingerprint, tokens)

    # -- deterministic steps -----------------------------------------------------------

    @activity.defn(name="fold_exact_duplicates")
    def fold_exact_duplicates(self, inp: CycleInput) -> FoldResult:
        result = FoldResult()
        with self._stores.using(inp.agent_id) as store, store.writing():
            for fold in exact_duplicate_folds(store.entries()):
                key = hashlib.sha256(
                    f"{fold.survivor.id}\n{','.join(sorted(fold.copies))}".encode()
                ).hexdigest()[:16]
                ledger = store.root / "ops" / f"fold-{key}.json"
                # The ledger says this fold's arithmetic is already on the survivor: a
                # retry after a crash before the copies were archived must not add it twice.
                if not ledger.exists():
                    atomic_write_text(ledger, json.dumps({"survivor": fold.survivor.id,
                                                          "copies": sorted(fold.copies)}))  # fmt: skip
                    store.put(fold.survivor, action=JournalAction.MERGED,
                              reason=f"folded exact duplicates {sorted(fold.copies)}")  # fmt: skip
                for copy in fold.copies:
                    store.archive(copy, f"merged into {fold.survivor.id}", now=inp.as_of)
                    result.archived.append(copy)
                result.groups += 1
        if result.groups:
            activity.logger.info(
                "consolidation %s: folded %d exact duplicate(s) in %d group(s)",
                inp.agent_id, len(result.archived), result.groups,
            )  # fmt: skip
        return result

    def _gate_entry(self, entry: MemoryEntry) -> GateEntry:
        cached = self._tokens.get(entry.id)
        if cached is None or cached[0] != entry.fingerprint:
            cached = (entry.fingerprint, content_tokens(entry.content))
            self._tokens[entry.id] = cached
        return GateEntry(
            entry.id, entry.category, entry.fingerprint, entry.consolidation_reviewed_hash,
            cached[1],
        )  # fmt: skip

    @activity.defn(name="gate_candidates")
    def gate_candidates(self, inp: GateInput) -> GateResult:
        with self._stores.using(inp.agent_id) as store:
            loaded = load_vocabulary(store.root)  # re-read every cycle; logs what it loaded
            activity.logger.info("consolidation %s: %s", inp.agent_id, loaded.summary)
            live = [self._gate_entry(e) for e in store.entries()]
            state = ClusterState(store.root)
            settled = state.load()
            index = store.vectors(inp.embedding_dim) if inp.embedding_dim else None
            vectors = {}
            if index is not None:
                vectors = {e.id: v for e in live if (v := index.get(e.id)) is not None}

            def clusters(entries):
                # Cosine where both have a vector, Jaccard otherwise; inside gate()'s
                # fallback, so a failure here means unreviewed-only, never everything.
                pairs = cosine_pairs(entries, vectors) if vectors else []
                return near_duplicate_clusters(entries, extra_pairs=pairs,
                                               embedded=frozenset(vectors))  # fmt: skip

            decided = gate(live, settled, inp.as_of, max_eligible=inp.max_eligible,
                           clusters=clusters)  # fmt: skip
            current = {r.key: r for r in decided.settled}
            if current.keys() != settled.keys():
                state.save(current.values())  # forget clusters that no longer exist
        if decided.clustering_failed:
            activity.logger.warning(
                "consolidation %s: clustering failed (%s); reviewing unreviewed entries only",
                inp.agent_id, decided.clustering_failed,
            )  # fmt: skip
        return GateResult(
            total=decided.total,
            groups=[list(g) for g in decided.groups],
            merge_only=sorted(decided.merge_only),
            clusters=[list(c) for c in decided.clusters],
            withheld=decided.withheld,
            deferred=decided.deferred,
            reopened=decided.reopened,
            clustering_failed=decided.clustering_failed,
            vocabulary=VocabularyPayload.of(loaded.vocabulary),
            vocabulary_summary=loaded.summary,
            llm_configured=self._llm.configured,
        )

    @activity.defn(name="review_merges")
    def review_merges(self, inp: ReviewInput) -> ReviewResult:
        vocabulary = inp.vocabulary.build()
        reviews = []
        with self._stores.using(inp.agent_id) as store:
            for check in inp.checks:
                ids = check.merge.source_ids
                review = review_merge(
                    check.merge.content, ids, {i: store.get(i) for i in ids}, check.shown,
                    vocabulary,
                )  # fmt: skip
                reviews.append(MergeReviewPayload(verdict=str(review.verdict),
                                                  missing=list(review.missing)))  # fmt: skip
        return ReviewResult(reviews=reviews)

    @activity.defn(name="save_merged_entry")
    def save_merged_entry(self, inp: SaveMergedInput) -> SaveMergedResult:
        merge = inp.check.merge
        with self._stores.using(inp.agent_id) as store, store.writing():
            if store.get(inp.new_id) is not None:
                return SaveMergedResult(new_id=inp.new_id, persisted=True, detail="already saved")
            sources = []
            for sid in merge.source_ids:
                entry = store.get(sid)
                if entry is None or entry.is_archived or entry.fingerprint != inp.check.shown[sid]:
                    return SaveMergedResult(new_id=inp.new_id, persisted=False,
                                            detail=f"source {sid} changed since it was shown")  # fmt: skip
                sources.append(entry)
            proposal = MergeProposal(
                content=merge.content,
                category=_category(merge.category, sources),
                tags=tuple(_tags(merge.tags)),
                importance=merge.importance,
            )
            entry = merged_entry(inp.new_id, proposal, sources, inp.merged_at)
            # The merge is the review's own output: stamped, so it is not re-shown next cycle.
            entry = entry.model_copy(update={"consolidation_reviewed_hash": entry.fingerprint})
            store.put(entry, action=JournalAction.MERGED,
                      reason=f"merge of {sorted(merge.source_ids)}")  # fmt: skip
        return SaveMergedResult(new_id=inp.new_id, persisted=True)

    @activity.defn(name="archive_merged_sources")
    def archive_merged_sources(self, inp: ArchiveSourcesInput) -> ArchiveResult:
        reason = f"merged into {inp.replacement_id}"
        result = ArchiveResult()
        with self._stores.using(inp.agent_id) as store, store.writing():
            replacement = store.get(inp.replacement_id)
            if replacement is None or replacement.is_archived:
                # Save first, then archive — checked here too, not only in the workflow.
                raise ApplicationError(
                    f"replacement {inp.replacement_id} is not a live entry; sources kept",
                    type="ReplacementMissing", non_retryable=True,
                )  # fmt: skip
            for sid, fingerprint in inp.expected.items():
                if _archive_if_unchanged(store, sid, fingerprint, reason, inp.as_of):
                    result.archived.append(sid)
                else:
                    result.skipped.append(sid)
        activity.logger.info(
            "consolidation %s: archived %s %s", inp.agent_id, result.archived, reason
        )
        return result

    @activity.defn(name="prune_ephemeral")
    def prune_ephemeral(self, inp: PruneInput) -> PruneResult:
        result = PruneResult()
        with self._stores.using(inp.agent_id) as store, store.writing():
            for sid, fingerprint in inp.expected.items():
                entry = store.get(sid)
                if entry is not None and not entry.is_archived and self._floor.protects(entry):
                    result.protected.append(ProtectedEntry(
                        id=sid, category=entry.category, importance=entry.importance_score,
                        reinforcement=entry.reinforcement_count,
                    ))  # fmt: skip
                    activity.logger.info(
                        "refused to prune %s (%s, importance=%.2f, reinforced=%d×) — above "
                        "the high-value floor", sid, entry.category, entry.importance_score,
                        entry.reinforcement_count,
                    )  # fmt: skip
                elif _archive_if_unchanged(store, sid, fingerprint, EPHEMERAL_REASON, inp.as_of):
                    result.archived.append(sid)
                    activity.logger.info("archived %s (%s): %s", sid,
                                         entry.category if entry else None, EPHEMERAL_REASON)  # fmt: skip
                    activity.logger.debug("archived %s was: %r", sid,
                                          entry.content[:200] if entry else "")  # fmt: skip
                else:
                    result.skipped.append(sid)
        return result

    @activity.defn(name="stamp_reviewed")
    def stamp_reviewed(self, inp: StampInput) -> StampResult:
        stamped = 0
        with self._stores.using(inp.agent_id) as store, store.writing():
            for sid, fingerprint in inp.reviewed.items():
                entry = store.get(sid)
                if entry is None or entry.is_archived or entry.fingerprint != fingerprint:
                    continue  # changed since shown: it must be reviewed again
                if entry.consolidation_reviewed_hash != fingerprint:
                    store.put(entry.model_copy(update={"consolidation_reviewed_hash": fingerprint}),
                              action=JournalAction.REVIEWED, reason="consolidation review")  # fmt: skip
                    stamped += 1
            state = ClusterState(store.root)
            records = state.load()
            for members in inp.merged_clusters:
                records.pop(cluster_key(members), None)
            for members in inp.declined_clusters:
                key = cluster_key(members)
                previous = records.get(key)
                if previous is not None and previous.settled_at == inp.as_of:
                    continue  # a retry of this very stamp
                declines = (previous.declines if previous else 0) + 1
                records[key] = SettledCluster(tuple(sorted(members)), declines, inp.as_of)
            if inp.merged_clusters or inp.declined_clusters:
                state.save(records.values())
        return StampResult(stamped=stamped)

    # -- LLM steps ---------------------------------------------------------------------

    @activity.defn(name="propose_consolidation")
    async def propose_consolidation(self, inp: ProposeInput) -> ProposeResult:
        def read() -> tuple[list[MemoryEntry], list[MemoryEntry]]:
            with self._stores.using(inp.agent_id) as store:
                shown = [e for e in (store.get(i) for i in inp.ids) if e and not e.is_archived]
                wanted = set(inp.ids)
                feedback = sorted(
                    (e for e in store.entries()
                     if e.top_level_category == "feedback" and e.id not in wanted),
                    key=lambda e: e.last_seen_at, reverse=True,
                )[:FEEDBACK_SHOWN]  # fmt: skip
            return shown, feedback

        shown, feedback = await asyncio.to_thread(read)
        if not shown:
            return ProposeResult()
        messages = consolidation_messages(shown, inp.hints, feedback)
        reply = await ask_llm(
            self._llm, messages, parse_consolidation, f"consolidation of {inp.agent_id}"
        )
        return ProposeResult(
            shown={e.id: e.fingerprint for e in shown},
            to_delete=reply.to_delete,
            to_save=[
                ProposedMerge(
                    content=m.content,
                    category=m.category,
                    tags=m.tags,
                    source_ids=m.source_ids,
                    importance=m.importance,
                )
                for m in reply.to_save
            ],  # fmt: skip
            prompt_tokens=prompt_tokens(messages),
        )

    @activity.defn(name="repair_merge")
    async def repair_merge(self, inp: RepairInput) -> RepairResult:
        def read() -> list[MemoryEntry]:
            with self._stores.using(inp.agent_id) as store:
                return [e for e in (store.get(i) for i in inp.merge.source_ids) if e]

        sources = await asyncio.to_thread(read)
        messages = repair_messages(sources, inp.merge.content, inp.missing)
        reply = await ask_llm(self._llm, messages, parse_repair, f"merge repair of {inp.agent_id}")
        return RepairResult(content=reply.content, prompt_tokens=prompt_tokens(messages))


def _archive_if_unchanged(
    store: FileMemoryStore, entry_id: str, fingerprint: str, reason: str, as_of
) -> bool:
    """Archive unless the entry changed since it was shown. True when it is archived for
    this reason now (a retry finds it already done)."""
    entry = store.get(entry_id)
    if entry is None:
        return False
    if entry.is_archived:
        return entry.archive_reason == reason
    if entry.fingerprint != fingerprint:
        return False
    store.archive(entry_id, reason, now=as_of)
    return True


def _category(proposed: str | None, sources: list[MemoryEntry]) -> str | None:
    """The LLM's category when valid, else the sources' most common one."""
    if proposed:
        try:
            return validate_category(proposed)
        except InvalidInput:
            pass
    counts = Counter(s.category for s in sources)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0] or ""))[0][0]


def _tags(tags: list[str]) -> list[str]:
    kept = []
    for tag in tags:
        try:
            kept.extend(validate_tags([tag]))
        except InvalidInput:
            continue
    return list(dict.fromkeys(kept))
