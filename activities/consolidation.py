"""Consolidation activities: one durable step each, in the order the workflow enforces.

Every write is exactly once and check-then-write: a merged entry's id is derived from
its sources and text, so a retry finds the entry it already wrote; a fold records its op
(and the copies it summed) in the survivor, so a retry never sums twice; sources and
copies are retired by the store's `retire_into`, which archives only into a live
replacement that covers them, and only if they are unchanged since they were shown.
"""

from __future__ import annotations

import asyncio
import contextlib

from temporalio import activity

from dreamkeeper.activities.dream_prompts import (
    ConsolidationReply,
    consolidation_messages,
    parse_consolidation,
    parse_repair,
    prompt_tokens,
    repair_messages,
)
from dreamkeeper.activities.llm import ask_llm
from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.dream_payloads import (
    ArchiveResult,
    ArchiveSourcesInput,
    ConflictsInput,
    ConflictsResult,
    FoldInput,
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
    SupersedeInput,
    SupersedePair,
    SupersedeResult,
)
from dreamkeeper.core.dream_plan import PlannedFold
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.settings import HighValueFloor, LLMSettings
from dreamkeeper.policies.consolidation import (
    EPHEMERAL_REASON,
    archive_budget,
    merged_reason,
    review_merge,
)
from dreamkeeper.policies.coverage import Source, vocabulary_from, vocabulary_payload
from dreamkeeper.policies.dedup import content_tokens
from dreamkeeper.policies.gating import (
    GateEntry,
    cosine_pairs,
    gate,
    near_duplicate_clusters,
    settle_clusters,
)
from dreamkeeper.policies.in_flight import consolidatable
from dreamkeeper.policies.merge import (
    Fold,
    MergeProposal,
    exact_duplicate_folds,
    merge_category,
    merged_entry,
    valid_tags,
)
from dreamkeeper.policies.merge_safety import context_problems
from dreamkeeper.policies.prune_cap import recent_prunes
from dreamkeeper.policies.supersede import judge
from dreamkeeper.stores.contract import IntentLog, MemoryStore
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.dream_state.consolidation_state import ClusterState
from dreamkeeper.stores.dream_state.dream_ledger import ledger_for
from dreamkeeper.stores.dream_state.dream_settings import read_approval
from dreamkeeper.stores.longterm.conflicts import open_conflicts
from dreamkeeper.stores.longterm.readings import Readings, prepare
from dreamkeeper.stores.longterm.supersede import refusal, supersede
from dreamkeeper.stores.search.vocabulary import load_vocabulary

FEEDBACK_SHOWN = 5


def fold_op(as_of, survivor_id: str) -> str:
    """One fold per survivor per cycle: the op a retry finds in the survivor."""
    return f"fold-{as_of:%Y%m%dT%H%M%S}-{survivor_id}"


def fold_duplicates(store: MemoryStore, fold: Fold, as_of, ledger: IntentLog) -> list[str]:
    """The store's exactly-once fold, one op per survivor per cycle (the dream's own fold
    and a reviewed plan's `apply_fold` share it)."""
    return store.fold(
        fold,
        op=fold_op(as_of, fold.survivor.id),
        reason=merged_reason(fold.survivor.id),
        ledger=ledger,
        now=as_of,
    )


class ConsolidationActivities:
    def __init__(self, stores: StoreRegistry, llm: LLMSettings, floor: HighValueFloor) -> None:
        self._stores = stores
        self._llm = llm
        self._floor = floor
        self._tokens: dict[str, tuple[str, frozenset[str]]] = {}  # id -> (fingerprint, tokens)

    # -- deterministic steps -----------------------------------------------------------

    @activity.defn(name="fold_exact_duplicates")
    def fold_exact_duplicates(self, inp: FoldInput) -> FoldResult:
        result = FoldResult()
        with (
            self._stores.using(inp.agent_id, store_id=inp.store_id) as store,
            store.writing() if not inp.dry_run else contextlib.nullcontext(),
        ):
            live = store.entries()
            result.live = len(live)
            budget = archive_budget(len(live), inp.archive_share, inp.min_archive_budget)
            for fold in exact_duplicate_folds([e for e in live if consolidatable(e, inp.as_of)]):
                if len(result.archived) + len(fold.copies) > budget:
                    result.deferred += len(fold.copies)
                    continue
                if inp.dry_run:
                    result.planned.append(planned_fold(store, fold))
                    result.archived += list(fold.copies)
                else:
                    ledger = ledger_for(store.documents, inp.cycle_id)
                    result.archived += fold_duplicates(store, fold, inp.as_of, ledger)
                result.groups += 1
        if result.groups:
            activity.logger.info(
                "consolidation %s: folded %d exact duplicate(s) in %d group(s)",
                inp.agent_id,
                len(result.archived),
                result.groups,
            )
        return result

    def _gate_entry(self, entry: MemoryEntry) -> GateEntry:
        cached = self._tokens.get(entry.id)
        if cached is None or cached[0] != entry.fingerprint:
            cached = (entry.fingerprint, content_tokens(entry.content))
            self._tokens[entry.id] = cached
        return GateEntry(
            entry.id,
            entry.category,
            entry.fingerprint,
            entry.consolidation_reviewed_hash,
            cached[1],
        )

    @activity.defn(name="gate_candidates")
    def gate_candidates(self, inp: GateInput) -> GateResult:
        with self._stores.using(inp.agent_id) as store:
            loaded = load_vocabulary(store.documents)  # re-read every cycle
            approval = read_approval(store.documents)
            week_prunes = recent_prunes(store.archived(), inp.as_of)
            if loaded.warning:
                activity.logger.warning("consolidation %s: %s", inp.agent_id, loaded.warning)
            activity.logger.info("consolidation %s: %s", inp.agent_id, loaded.summary)
            entries = store.entries()
            excluded = set(inp.exclude)
            live = [
                self._gate_entry(e)
                for e in entries
                if consolidatable(e, inp.as_of) and e.id not in excluded
            ]
            state = ClusterState(store.documents)
            settled = state.load()
            index = store.vectors(inp.embedding_dim) if inp.embedding_dim else None
            vectors = {}
            if index is not None:
                vectors = {e.id: v for e in live if (v := index.get(e.id)) is not None}

            def clusters(entries):
                # Cosine where both have a vector, Jaccard otherwise; inside gate()'s
                # fallback, so a failure here means unreviewed-only, never everything.
                pairs = cosine_pairs(entries, vectors) if vectors else []
                return near_duplicate_clusters(
                    entries, extra_pairs=pairs, embedded=frozenset(vectors)
                )

            decided = gate(
                live, settled, inp.as_of, max_eligible=inp.max_eligible, clusters=clusters
            )
            current = {r.key: r for r in decided.settled}
            if current.keys() != settled.keys() and not inp.dry_run:
                state.save(current.values())  # forget clusters that no longer exist
        if decided.clustering_failed:
            activity.logger.warning(
                "consolidation %s: clustering failed (%s); reviewing unreviewed entries only",
                inp.agent_id,
                decided.clustering_failed,
            )
        return GateResult(
            total=decided.total,
            groups=[list(g) for g in decided.groups],
            merge_only=sorted(decided.merge_only),
            clusters=[list(c) for c in decided.clusters],
            withheld=decided.withheld,
            deferred=decided.deferred,
            reopened=decided.reopened,
            clustering_failed=decided.clustering_failed,
            vocabulary=vocabulary_payload(loaded.vocabulary),
            vocabulary_summary=loaded.summary,
            llm_configured=self._llm.configured,
            held_back=len(entries) - len(live) - len(excluded),
            approval=approval,
            recent_prunes=week_prunes,
        )

    @activity.defn(name="review_merges")
    def review_merges(self, inp: ReviewInput) -> ReviewResult:
        vocabulary = vocabulary_from(inp.vocabulary)
        reviews = []
        with self._stores.using(inp.agent_id) as store:
            for check in inp.checks:
                ids = check.merge.source_ids
                review = review_merge(
                    check.merge.content,
                    ids,
                    {i: store.get(i) for i in ids},
                    check.shown,
                    vocabulary,
                    high_value=self._floor.protects,
                    max_sources=inp.max_sources,
                )
                reviews.append(
                    MergeReviewPayload(
                        verdict=str(review.verdict),
                        missing=list(review.missing),
                        reason=review.reason,
                        high_value=any(
                            e is not None and self._floor.protects(e)
                            for e in (store.get(i) for i in ids)
                        ),
                    )
                )
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
                    return SaveMergedResult(
                        new_id=inp.new_id,
                        persisted=False,
                        detail=f"source {sid} changed since it was shown",
                    )
                if entry.is_superseded:
                    # History is never merged: a merge of a current and a replaced
                    # version would state both values as one current fact.
                    return SaveMergedResult(
                        new_id=inp.new_id,
                        persisted=False,
                        detail=f"source {sid} was replaced since it was shown",
                    )
                sources.append(entry)
            proposal = MergeProposal(
                content=merge.content,
                category=merge_category(merge.category, sources),
                tags=tuple(valid_tags(merge.tags)),
                importance=merge.importance,
            )
            entry = merged_entry(inp.new_id, proposal, sources, inp.merged_at)
            # The merge is the review's own output: stamped, so it is not re-shown next cycle.
            entry = entry.model_copy(update={"consolidation_reviewed_hash": entry.fingerprint})
            ledger_for(store.documents, inp.cycle_id).note("merge", [(inp.new_id, None)])
            store.put(
                entry, action=JournalAction.MERGED, reason=f"merge of {sorted(merge.source_ids)}"
            )
        return SaveMergedResult(new_id=inp.new_id, persisted=True)

    @activity.defn(name="archive_merged_sources")
    def archive_merged_sources(self, inp: ArchiveSourcesInput) -> ArchiveResult:
        """Retire each source into the merged entry — the store checks, under its lock,
        that the merge is live and covers it, that the source is unchanged since shown,
        and (high-value sources) that its details survive in context."""
        reason = merged_reason(inp.replacement_id)
        result = ArchiveResult()

        with self._stores.using(inp.agent_id) as store:
            siblings = [e for e in (store.get(i) for i in inp.expected) if e is not None]

            def in_context(source: MemoryEntry, into: list[MemoryEntry]) -> str | None:
                if not self._floor.protects(source):
                    return None
                others = [Source(e.content, e.category) for e in siblings if e.id != source.id]
                problems = context_problems(
                    Source(source.content, source.category),
                    "\n\n".join(e.content for e in into),
                    others=others,
                )
                return "; ".join(problems) or None

            ledger = ledger_for(store.documents, inp.cycle_id)
            for sid, fingerprint in inp.expected.items():
                current = store.get(sid)
                if current is not None and current.is_superseded:
                    result.skipped.append(sid)  # history stays where it is
                    continue
                if current is not None and not current.is_archived:
                    ledger.note("merge", [(sid, current)])
                done = store.retire_into(
                    sid,
                    [inp.replacement_id],
                    reason=reason,
                    expected_fingerprint=fingerprint,
                    now=inp.as_of,
                    check=in_context,
                )
                (result.archived if done.retired else result.skipped).append(sid)
        activity.logger.info(
            "consolidation %s: retired %d source(s) into %s (%d kept)",
            inp.agent_id,
            len(result.archived),
            inp.replacement_id,
            len(result.skipped),
        )
        return result

    @activity.defn(name="supersede_outdated")
    def supersede_outdated(self, inp: SupersedeInput) -> SupersedeResult:
        """Mark entries the LLM called outdated as replaced by a newer shown entry — each
        only if it is about the same thing (`policies.supersede`), the replacement is
        not older, and the store finds both live and current and the old one unchanged
        since it was shown. At most `max_applied` (the cycle's budget: a supersede hides
        a fact from default recall). A dry run checks and reports, writing nothing."""
        result = SupersedeResult()
        with self._stores.using(inp.agent_id) as store:
            # An embedding model's readings, before the lock: a pair the vocabulary
            # cannot tell apart is applied only when they name one attribute.
            shown = [e.content for i in inp.expected if (e := store.get(i)) is not None]
            readings = prepare(store.embeddings, shown)
        with (
            self._stores.using(inp.agent_id) as store,
            store.writing() if not inp.dry_run else contextlib.nullcontext(),
        ):
            ledger = ledger_for(store.documents, None if inp.dry_run else inp.cycle_id)
            for pair in inp.pairs:
                old, new = store.get(pair.id), store.get(pair.by)
                why = refusal(old, new, pair.id, pair.by)
                if why is None and old is not None and new is not None:
                    why = self._dream_objection(old, new, inp.expected.get(pair.id), readings)
                if why is None and len(result.applied) >= inp.max_applied:
                    result.deferred.append(pair.id)
                    continue
                if why is None and not inp.dry_run:
                    done = supersede(
                        store,
                        pair.id,
                        pair.by,
                        op=f"dream-{inp.cycle_id}-supersede-{pair.id}",
                        expected_fingerprint=inp.expected[pair.id],
                        reason=f"{inp.why}: replaced by {pair.by} (dream)",
                        ledger=ledger,
                        now=inp.as_of,
                    )
                    why = None if done.applied else done.detail
                if why is None:
                    result.applied.append(pair)
                else:
                    result.refused[pair.id] = why
        activity.logger.info(
            "consolidation %s: %d entr(ies) superseded, %d refused, %d deferred",
            inp.agent_id,
            len(result.applied),
            len(result.refused),
            len(result.deferred),
        )
        return result

    def _dream_objection(
        self, old: MemoryEntry, new: MemoryEntry, shown_as: str | None, readings: Readings
    ) -> str | None:
        """Why the dream may not replace `old` by `new` (both live and current), or None:
        `shown_as` is the fingerprint `old` had when the LLM saw it."""
        if old.fingerprint != shown_as:
            return "changed since it was shown"
        if new.valid_since < old.valid_since:
            return "the replacement is older"
        if self._floor.protects(old):
            # As for a prune: the dream alone never hides a high-value fact; the agent
            # (replaces) or a new save's enrichment may.
            return "above the high-value floor"
        verdict = judge(
            old,
            new.content,
            new.category,
            old_reading=readings.get(old.content),
            new_reading=readings.get(new.content),
        )
        # The dream replaces only what is the same subject; "cannot tell" waits for an
        # agent or a reading.
        return None if verdict.allowed else verdict.reason

    @activity.defn(name="find_conflicts")
    def find_conflicts(self, inp: ConflictsInput) -> ConflictsResult:
        """The likely conflicts saves found and nobody settled, both entries still
        current and still in conflict (`stores.longterm.conflicts.open_conflicts`),
        with the fingerprints the supersede will insist on. Reads only."""
        result = ConflictsResult()
        skip = set(inp.exclude)
        with self._stores.using(inp.agent_id) as store:
            for pair in open_conflicts(store, limit=inp.limit):
                if pair.older.id in skip or pair.newer.id in skip:
                    continue
                result.pairs.append(SupersedePair(id=pair.older.id, by=pair.newer.id))
                result.shown[pair.older.id] = pair.older.fingerprint
                result.shown[pair.newer.id] = pair.newer.fingerprint
        activity.logger.info(
            "consolidation %s: %d unsettled conflict(s)", inp.agent_id, len(result.pairs)
        )
        return result

    @activity.defn(name="prune_ephemeral")
    def prune_ephemeral(self, inp: PruneInput) -> PruneResult:
        """The floor first (a high-value entry is refused whatever the budget), then at
        most `max_archived` archives; the rest is deferred to a later cycle."""
        result = PruneResult()
        with (
            self._stores.using(inp.agent_id) as store,
            store.writing() if not inp.dry_run else contextlib.nullcontext(),
        ):
            ledger = ledger_for(store.documents, inp.cycle_id)
            for sid, fingerprint in inp.expected.items():
                entry = store.get(sid)
                if entry is not None and not entry.is_archived and self._floor.protects(entry):
                    result.protected.append(
                        ProtectedEntry(
                            id=sid,
                            category=entry.category,
                            importance=entry.importance_score,
                            reinforcement=entry.reinforcement_count,
                        )
                    )
                    activity.logger.info(
                        "refused to prune %s (%s, importance=%.2f, reinforced=%d×) — above "
                        "the high-value floor",
                        sid,
                        entry.category,
                        entry.importance_score,
                        entry.reinforcement_count,
                    )
                elif len(result.archived) >= inp.max_archived:
                    result.deferred.append(sid)
                elif inp.dry_run:
                    if (
                        entry is not None
                        and not entry.is_archived
                        and entry.fingerprint == fingerprint
                    ):
                        result.archived.append(sid)
                    else:
                        result.skipped.append(sid)
                elif store.archive_if_unchanged(
                    sid, fingerprint, EPHEMERAL_REASON, ledger=ledger, now=inp.as_of
                ):
                    result.archived.append(sid)
                    activity.logger.info(
                        "archived %s (%s): %s",
                        sid,
                        entry.category if entry else None,
                        EPHEMERAL_REASON,
                    )
                    activity.logger.debug(
                        "archived %s was: %r", sid, entry.content[:200] if entry else ""
                    )
                else:
                    result.skipped.append(sid)
        return result

    @activity.defn(name="stamp_reviewed")
    def stamp_reviewed(self, inp: StampInput) -> StampResult:
        stamped = 0
        with self._stores.using(inp.agent_id) as store, store.writing():
            ledger = ledger_for(store.documents, inp.cycle_id)
            for sid, fingerprint in inp.reviewed.items():
                entry = store.get(sid)
                if entry is None or entry.is_archived or entry.fingerprint != fingerprint:
                    continue  # changed since shown: it must be reviewed again
                if entry.consolidation_reviewed_hash != fingerprint:
                    ledger.note("stamp", [(sid, entry)])
                    store.put(
                        entry.model_copy(update={"consolidation_reviewed_hash": fingerprint}),
                        action=JournalAction.REVIEWED,
                        reason="consolidation review",
                    )
                    stamped += 1
            if inp.merged_clusters or inp.declined_clusters:
                state = ClusterState(store.documents)
                state.save(
                    settle_clusters(
                        state.load(),
                        merged=inp.merged_clusters,
                        declined=inp.declined_clusters,
                        as_of=inp.as_of,
                    ).values()
                )
        return StampResult(stamped=stamped)

    # -- LLM steps ---------------------------------------------------------------------

    @activity.defn(name="propose_consolidation")
    async def propose_consolidation(self, inp: ProposeInput) -> ProposeResult:
        def read() -> tuple[list[MemoryEntry], list[MemoryEntry]]:
            with self._stores.using(inp.agent_id, heartbeat=False) as store:
                shown = [e for e in (store.get(i) for i in inp.ids) if e and not e.is_archived]
                wanted = set(inp.ids)
                feedback = sorted(
                    (
                        e
                        for e in store.entries()
                        if e.top_level_category == "feedback" and e.id not in wanted
                    ),
                    key=lambda e: e.last_seen_at,
                    reverse=True,
                )[:FEEDBACK_SHOWN]
            return shown, feedback

        shown, feedback = await asyncio.to_thread(read)
        if not shown:
            return ProposeResult()
        messages = consolidation_messages(shown, inp.hints, feedback)
        reply = await ask_llm(
            self._llm, messages, parse_consolidation, f"consolidation of {inp.agent_id}"
        )
        return proposal_of(reply, shown, prompt_tokens(messages))

    @activity.defn(name="repair_merge")
    async def repair_merge(self, inp: RepairInput) -> RepairResult:
        def read() -> list[MemoryEntry]:
            with self._stores.using(inp.agent_id, heartbeat=False) as store:
                return [e for e in (store.get(i) for i in inp.merge.source_ids) if e]

        sources = await asyncio.to_thread(read)
        messages = repair_messages(sources, inp.merge.content, inp.missing)
        reply = await ask_llm(self._llm, messages, parse_repair, f"merge repair of {inp.agent_id}")
        return RepairResult(content=reply.content, prompt_tokens=prompt_tokens(messages))


def proposal_of(
    reply: ConsolidationReply, shown: list[MemoryEntry], tokens: int = 0
) -> ProposeResult:
    """The workflow's payload for a parsed consolidation reply: ids and fingerprints of
    what was shown, the proposed prunes and merges, nothing else."""
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
        ],
        prompt_tokens=tokens,
        superseded=[SupersedePair(id=p.id, by=p.by) for p in reply.superseded],
    )


def planned_fold(store: MemoryStore, fold: Fold) -> PlannedFold:
    ids = [fold.survivor.id, *fold.copies]
    return PlannedFold(
        survivor=fold.survivor.id,
        copies=list(fold.copies),
        revisions={i: e.revision for i in ids if (e := store.get(i)) is not None},
    )
