"""Consolidation: an LLM proposes merges and prunes; deterministic code decides.

The order is this workflow's, and each step is an activity:
  fold exact duplicates → gate candidates → LLM batches → validate → one repair per
  rejected merge (bounded) → save merged entries → archive exactly the sources whose
  replacement persisted → archive the prunes that survive the rules → stamp reviewed
  fingerprints and settled clusters.
Nothing is archived before its replacement is saved (the archive step runs only for a
save that reported `persisted`), an id the LLM was not shown in that batch resolves to
nothing, and a rejected merge's sources can never reach the prune path.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.dream_payloads import (
        ArchiveResult,
        ArchiveSourcesInput,
        ConsolidationInput,
        ConsolidationResult,
        CycleInput,
        FoldResult,
        GateInput,
        GateResult,
        MergeCheck,
        MergeOutcome,
        ProposeInput,
        ProposeResult,
        PruneInput,
        PruneResult,
        RejectedMerge,
        RepairInput,
        RepairResult,
        ReviewInput,
        ReviewResult,
        SaveMergedInput,
        SaveMergedResult,
        StampInput,
        StampResult,
    )
    from dreamkeeper.policies.consolidation import (
        Verdict,
        merge_id,
        prune_candidates,
        resolve_ids,
        without_overlaps,
    )
    from dreamkeeper.policies.gating import pack_batches, shown_hints
    from dreamkeeper.workflows.maintenance import STORE_RETRY
    from dreamkeeper.workflows.save import LLM_RETRY

MAX_IGNORED_REPORTED = 50
SCAN_STEP = {"start_to_close_timeout": timedelta(minutes=10), "retry_policy": STORE_RETRY}
# Short writes: a heartbeat timeout lets a worker's death be noticed in seconds.
WRITE_STEP = {
    "start_to_close_timeout": timedelta(minutes=5),
    "heartbeat_timeout": timedelta(seconds=20),
    "retry_policy": STORE_RETRY,
}
LLM_STEP = {
    "start_to_close_timeout": timedelta(minutes=10),
    "heartbeat_timeout": timedelta(seconds=30),
    "retry_policy": LLM_RETRY,
}


@workflow.defn(name="Consolidation")
class Consolidation:
    @workflow.run
    async def run(self, inp: ConsolidationInput) -> ConsolidationResult:
        as_of = inp.as_of or workflow.now()
        agent = inp.agent_id
        log = workflow.logger
        res = ConsolidationResult(agent_id=agent, as_of=as_of)
        cycle = CycleInput(agent_id=agent, as_of=as_of)

        self._details("step 1/7: folding exact duplicates")
        fold: FoldResult = await workflow.execute_activity(
            "fold_exact_duplicates", cycle, result_type=FoldResult, summary="fold exact duplicates",
            **SCAN_STEP,
        )  # fmt: skip
        res.folded = len(fold.archived)

        self._details("step 2/7: candidate gating")
        gate: GateResult = await workflow.execute_activity(
            "gate_candidates", GateInput(agent_id=agent, as_of=as_of, max_eligible=inp.max_eligible,
                                         embedding_dim=inp.embedding_dim),
            result_type=GateResult, summary="candidate gating", **SCAN_STEP,
        )  # fmt: skip
        eligible = [i for g in gate.groups for i in g]
        res.total, res.reviewed, res.withheld = gate.total, len(eligible), gate.withheld
        res.deferred, res.reopened_clusters = gate.deferred, gate.reopened
        res.clustering_failed = gate.clustering_failed
        log.info(
            "consolidation reviewing %d of %d entries (%d withheld as reviewed-and-unchanged, "
            "%d deferred to the next cycle)", len(eligible), gate.total, gate.withheld, gate.deferred,
        )  # fmt: skip
        if not gate.llm_configured:
            res.llm_skipped = "no LLM configured: merges and prunes skipped (fold and gating ran)"
            log.info("consolidation %s: %s", agent, res.llm_skipped)
            return self._done(res)
        if not eligible:
            return self._done(res)

        # -- LLM batches: proposals, with ids resolved against what each batch showed --
        merges: list[MergeCheck] = []
        to_delete: list[str] = []
        shown: dict[str, str] = {}
        in_cluster = {m: tuple(c) for c in gate.clusters for m in c}
        batches = pack_batches([tuple(g) for g in gate.groups], inp.batch_size)
        res.batches = len(batches)
        for number, batch in enumerate(batches, start=1):
            self._details(f"step 3/7: LLM batch {number}/{len(batches)} ({len(batch)} entries)")
            clusters = list(dict.fromkeys(in_cluster[m] for m in batch if m in in_cluster))
            hints = [list(h) for c in clusters for h in shown_hints(c)]
            try:
                proposal: ProposeResult = await workflow.execute_activity(
                    "propose_consolidation", ProposeInput(agent_id=agent, ids=batch, hints=hints),
                    result_type=ProposeResult, summary=f"LLM batch {number}", **LLM_STEP,
                )  # fmt: skip
            except ActivityError as exc:
                res.batches_failed += 1
                log.warning("consolidation batch %d failed, nothing changed for it: %s",
                            number, exc.cause or exc)  # fmt: skip
                continue
            res.prompt_tokens += proposal.prompt_tokens
            shown.update(proposal.shown)
            kept, ignored = resolve_ids(proposal.to_delete, proposal.shown)
            to_delete += kept
            self._ignore(res, ignored)
            for merge in proposal.to_save:
                sources, ignored = resolve_ids(merge.source_ids, proposal.shown)
                self._ignore(res, ignored)
                merges.append(MergeCheck(
                    merge=merge.model_copy(update={"source_ids": sources}),
                    shown={s: proposal.shown[s] for s in sources},
                ))  # fmt: skip
        res.merges_proposed = len(merges)

        # -- validation, and one repair call per rejected merge (bounded per cycle) --
        self._details(f"step 4/7: validating {len(merges)} proposed merge(s)")
        reviews = (await self._review(agent, merges, gate)).reviews if merges else []
        repairs_left = inp.max_repairs
        for index, review in enumerate(reviews):
            if review.verdict != Verdict.REJECTED or repairs_left <= 0:
                continue
            repairs_left -= 1
            check = merges[index]
            try:
                repair: RepairResult = await workflow.execute_activity(
                    "repair_merge", RepairInput(agent_id=agent, merge=check.merge, missing=review.missing),
                    result_type=RepairResult, summary=f"repair merge {index + 1}", **LLM_STEP,
                )  # fmt: skip
            except ActivityError as exc:
                log.warning("repair of merge %d failed: %s", index + 1, exc.cause or exc)
                continue
            res.prompt_tokens += repair.prompt_tokens
            repaired = check.model_copy(
                update={"merge": check.merge.model_copy(update={"content": repair.content})}
            )
            again = (await self._review(agent, [repaired], gate)).reviews[0]
            if again.verdict == Verdict.ACCEPTED:
                res.repaired += 1
                merges[index] = repaired
            reviews[index] = again
        accepted = []
        for index, (check, review) in enumerate(zip(merges, reviews, strict=True)):
            if review.verdict == Verdict.ACCEPTED:
                accepted.append(index)
            elif review.verdict == Verdict.REJECTED:
                res.rejected.append(RejectedMerge(sources=check.merge.source_ids,
                                                  dropped=len(review.missing)))  # fmt: skip
                log.info("rejected merge of [%s] — dropped %d specific(s)",
                         ", ".join(check.merge.source_ids), len(review.missing))  # fmt: skip
                log.debug("rejected merge of [%s] dropped: %s",
                          ", ".join(check.merge.source_ids), ", ".join(review.missing))  # fmt: skip
            else:
                res.left_alone += 1
                log.info("merge of [%s] left alone: %s", ", ".join(check.merge.source_ids),
                         review.verdict)  # fmt: skip
        keep = without_overlaps([merges[i].merge.source_ids for i in accepted])
        res.left_alone += len(accepted) - len(keep)
        accepted = [accepted[k] for k in keep]

        # -- save first ... --
        self._details(f"step 5/7: saving {len(accepted)} merged entr(ies)")
        persisted: list[tuple[str, MergeCheck]] = []
        for index in accepted:
            check = merges[index]
            new_id = merge_id(check.merge.source_ids, check.merge.content)
            saved: SaveMergedResult = await workflow.execute_activity(
                "save_merged_entry",
                SaveMergedInput(agent_id=agent, new_id=new_id, check=check, merged_at=as_of),
                result_type=SaveMergedResult, summary=f"save merge {new_id}", **WRITE_STEP,
            )  # fmt: skip
            if saved.persisted:
                persisted.append((new_id, check))
            else:
                res.left_alone += 1
                log.info("merge %s not saved, sources kept: %s", new_id, saved.detail)

        # -- ... then archive exactly the sources whose replacement persisted --
        self._details(f"step 6/7: archiving the sources of {len(persisted)} merge(s)")
        consumed: set[str] = set()
        for new_id, check in persisted:
            archived: ArchiveResult = await workflow.execute_activity(
                "archive_merged_sources",
                ArchiveSourcesInput(agent_id=agent, replacement_id=new_id, expected=check.shown,
                                    as_of=as_of),
                result_type=ArchiveResult, summary=f"archive sources of {new_id}", **WRITE_STEP,
            )  # fmt: skip
            consumed.update(check.merge.source_ids)
            res.merged.append(MergeOutcome(new_id=new_id, sources=check.merge.source_ids))
            res.archived_with_replacement += len(archived.archived)

        allowed, refused = prune_candidates(
            to_delete, shown=shown, merge_only=gate.merge_only,
            merge_sources=[s for m in merges for s in m.merge.source_ids],
        )  # fmt: skip
        res.refused_prunes = {i: str(r) for i, r in list(refused.items())[:MAX_IGNORED_REPORTED]}
        if allowed:
            pruned: PruneResult = await workflow.execute_activity(
                "prune_ephemeral",
                PruneInput(agent_id=agent, expected={i: shown[i] for i in allowed}, as_of=as_of),
                result_type=PruneResult, summary=f"prune {len(allowed)} ephemeral", **WRITE_STEP,
            )  # fmt: skip
            res.pruned = pruned.archived
            res.protected = [p.id for p in pruned.protected]

        # -- stamp what was reviewed, and the clusters the LLM saw and left alone --
        self._details("step 7/7: stamping reviewed fingerprints")
        seen = [c for c in gate.clusters if all(m in shown for m in c)]
        stamp: StampResult = await workflow.execute_activity(
            "stamp_reviewed",
            StampInput(
                agent_id=agent, as_of=as_of, reviewed=shown,
                merged_clusters=[c for c in seen if consumed.intersection(c)],
                declined_clusters=[c for c in seen if not consumed.intersection(c)],
            ),
            result_type=StampResult, summary="stamp reviewed", **WRITE_STEP,
        )  # fmt: skip
        res.stamped = stamp.stamped
        if res.rejected or res.protected:
            log.info("consolidation safeguards fired — %d merge(s) rejected for dropping "
                     "specifics, %d entr(ies) protected from pruning",
                     len(res.rejected), len(res.protected))  # fmt: skip
        return self._done(res)

    async def _review(self, agent: str, checks: list[MergeCheck], gate: GateResult) -> ReviewResult:
        return await workflow.execute_activity(
            "review_merges", ReviewInput(agent_id=agent, checks=checks, vocabulary=gate.vocabulary),
            result_type=ReviewResult, summary=f"validate {len(checks)} merge(s)", **SCAN_STEP,
        )  # fmt: skip

    @staticmethod
    def _ignore(res: ConsolidationResult, ids: list[str]) -> None:
        room = MAX_IGNORED_REPORTED - len(res.ignored_ids)
        if ids:
            workflow.logger.info("ignored id(s) not shown in this batch: %s", ", ".join(ids[:20]))
        res.ignored_ids += ids[: max(0, room)]

    @staticmethod
    def _details(text: str) -> None:
        workflow.set_current_details(text)

    def _done(self, res: ConsolidationResult) -> ConsolidationResult:
        workflow.logger.info("consolidation cycle complete — %s", res.summary())
        self._details(
            f"done: {res.summary()}" + (f"; {res.llm_skipped}" if res.llm_skipped else "")
        )
        return res
