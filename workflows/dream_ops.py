"""ApplyDreamPlan and UndoDream.

ApplyDreamPlan applies exactly a dry run's plan: first it reads the revision of every
entry the plan names (one activity), and any part naming an entry that moved on is
refused, the rest applied in the cycle's order — folds, merges (save, then retire the
sources), supersedes, prunes, purge, decay — through the same activities a cycle uses, every write
recorded in this run's ledger, so `UndoDream` takes it back like any cycle.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.consolidation import ConsolidationActivities
    from dreamkeeper.activities.dream_review import DreamReviewActivities
    from dreamkeeper.activities.dream_undo import UndoActivities
    from dreamkeeper.core import names
    from dreamkeeper.core.dream_payloads import (
        ArchiveSourcesInput,
        MergeCheck,
        ProposedMerge,
        PruneInput,
        SaveMergedInput,
        SupersedeInput,
        SupersedePair,
    )
    from dreamkeeper.core.dream_plan import (
        ApplyDecayInput,
        ApplyFoldInput,
        ApplyPlanInput,
        ApplyPlanResult,
        ApplyPurgeInput,
        PlanCheckInput,
        PlannedMerge,
        Refusal,
        UndoInput,
        UndoResult,
    )
    from dreamkeeper.workflows.consolidation import SUPERSEDE_PATCH
    from dreamkeeper.workflows.options import SCAN_STEP, STORE_STEP, with_summary

Activities = ConsolidationActivities


@workflow.defn(name=names.APPLY_DREAM_PLAN)
class ApplyDreamPlan:
    """One method per step, in the cycle's order; each refuses the parts of the plan
    whose entries moved on since it was made (`self.changed`)."""

    @workflow.init
    def __init__(self, inp: ApplyPlanInput) -> None:
        self.plan, self.cycle = inp.plan, workflow.info().run_id
        self.res = ApplyPlanResult(agent_id=self.plan.agent_id, cycle_id=self.cycle)
        self.changed: dict[str, str] = {}

    @workflow.run
    async def run(self, inp: ApplyPlanInput) -> ApplyPlanResult:
        await self._check_revisions()
        await self._apply_folds()
        for merge in self.plan.merges:
            if not self._refuse(merge.sources, f"merge {merge.new_id}"):
                await self._apply_merge(merge)
        if self.plan.supersedes and workflow.patched(SUPERSEDE_PATCH):
            await self._apply_supersedes()
        await self._apply_prunes()
        await self._apply_purge()
        await self._apply_decay()
        res = self.res
        workflow.set_current_details(
            f"done: applied {len(res.merged)} merge(s), {len(res.pruned)} prune(s), "
            f"{len(res.folded)} fold(s), purged {len(res.purged)}, decayed {res.decayed}; "
            f"refused {len(res.refused)} part(s)"
        )
        return res

    def _refuse(self, ids: list[str], what: str) -> bool:
        moved = [i for i in ids if i in self.changed]
        if moved:
            detail = "; ".join(f"{i}: {self.changed[i]}" for i in moved)
            self.res.refused.append(Refusal(ids=ids, reason=f"{what}: changed since ({detail})"))
        return bool(moved)

    async def _check_revisions(self) -> None:
        plan = self.plan
        revisions: dict[str, int] = dict(plan.purge_revisions)
        for fold in plan.folds:
            revisions.update(fold.revisions)
        for merge in plan.merges:
            revisions.update(merge.revisions)
        revisions.update({p.id: p.revision for p in plan.prunes})
        revisions.update({d.id: d.revision for d in plan.decay})
        workflow.set_current_details(f"checking {len(revisions)} planned entr(ies)")
        check = await workflow.execute_activity_method(
            DreamReviewActivities.check_plan_sources,
            PlanCheckInput(agent_id=plan.agent_id, revisions=revisions),
            **with_summary(SCAN_STEP, "check the plan's revisions"),
        )
        self.changed = check.changed

    async def _apply_folds(self) -> None:
        for fold in self.plan.folds:
            if self._refuse([fold.survivor, *fold.copies], "fold"):
                continue
            got = await workflow.execute_activity_method(
                DreamReviewActivities.apply_fold,
                ApplyFoldInput(
                    agent_id=self.plan.agent_id,
                    as_of=self.plan.as_of,
                    fold=fold,
                    cycle_id=self.cycle,
                ),
                **with_summary(STORE_STEP, f"fold into {fold.survivor}"),
            )
            self.res.folded += got.done
            self.res.refused += [Refusal(ids=[i], reason=r) for i, r in got.refused.items()]

    async def _apply_merge(self, merge: PlannedMerge) -> None:
        agent, as_of = self.plan.agent_id, self.plan.as_of
        proposed = ProposedMerge(
            content=merge.content,
            category=merge.category,
            tags=merge.tags,
            source_ids=merge.sources,
            importance=merge.importance,
        )
        saved = await workflow.execute_activity_method(
            Activities.save_merged_entry,
            SaveMergedInput(
                agent_id=agent,
                new_id=merge.new_id,
                check=MergeCheck(merge=proposed, shown=merge.shown),
                merged_at=as_of,
                cycle_id=self.cycle,
            ),
            **with_summary(STORE_STEP, f"save merge {merge.new_id}"),
        )
        if not saved.persisted:
            reason = f"merge {merge.new_id}: {saved.detail}"
            self.res.refused.append(Refusal(ids=merge.sources, reason=reason))
            return
        archived = await workflow.execute_activity_method(
            Activities.archive_merged_sources,
            ArchiveSourcesInput(
                agent_id=agent,
                replacement_id=merge.new_id,
                expected=merge.shown,
                as_of=as_of,
                cycle_id=self.cycle,
            ),
            **with_summary(STORE_STEP, f"retire sources into {merge.new_id}"),
        )
        self.res.merged.append(merge.new_id)
        self.res.archived += archived.archived

    async def _apply_supersedes(self) -> None:
        """The plan's supersedes, each checked again by the store (still current, unchanged
        since shown, the replacement live and current)."""
        pairs = [p for p in self.plan.supersedes if not self._refuse([p.id, p.by], "supersede")]
        if not pairs:
            return
        done = await workflow.execute_activity_method(
            Activities.supersede_outdated,
            SupersedeInput(
                agent_id=self.plan.agent_id,
                pairs=[SupersedePair(id=p.id, by=p.by) for p in pairs],
                expected={p.id: p.fingerprint for p in pairs},
                as_of=self.plan.as_of,
                max_applied=len(pairs),
                cycle_id=self.cycle,
            ),
            **with_summary(STORE_STEP, f"supersede {len(pairs)} outdated"),
        )
        self.res.superseded = [p.id for p in done.applied]
        self.res.refused += [Refusal(ids=[i], reason=r) for i, r in done.refused.items()]

    async def _apply_prunes(self) -> None:
        prunes = [p for p in self.plan.prunes if not self._refuse([p.id], "prune")]
        if not prunes:
            return
        pruned = await workflow.execute_activity_method(
            Activities.prune_ephemeral,
            PruneInput(
                agent_id=self.plan.agent_id,
                expected={p.id: p.fingerprint for p in prunes},
                as_of=self.plan.as_of,
                cycle_id=self.cycle,
            ),
            **with_summary(STORE_STEP, f"prune {len(prunes)}"),
        )
        self.res.pruned = pruned.archived
        for entry in pruned.protected:
            self.res.refused.append(Refusal(ids=[entry.id], reason="above the high-value floor"))

    async def _apply_purge(self) -> None:
        planned = self.plan.purge_revisions
        purge = {i: r for i, r in planned.items() if i not in self.changed}
        if len(purge) < len(planned):
            self._refuse([i for i in planned if i in self.changed], "purge")
        if purge:
            got = await workflow.execute_activity_method(
                DreamReviewActivities.apply_purge,
                ApplyPurgeInput(
                    agent_id=self.plan.agent_id, as_of=self.plan.as_of, revisions=purge
                ),
                **with_summary(SCAN_STEP, f"purge {len(purge)}"),
            )
            self.res.purged = got.done

    async def _apply_decay(self) -> None:
        decay = [d for d in self.plan.decay if d.id not in self.changed]
        if len(decay) < len(self.plan.decay):
            moved = [d.id for d in self.plan.decay if d.id in self.changed]
            self.res.refused.append(Refusal(ids=moved, reason="decay: changed since the plan"))
        if decay:
            got = await workflow.execute_activity_method(
                DreamReviewActivities.apply_decay,
                ApplyDecayInput(
                    agent_id=self.plan.agent_id,
                    as_of=self.plan.as_of,
                    decay=decay,
                    cycle_id=self.cycle,
                ),
                **with_summary(SCAN_STEP, f"decay {len(decay)}"),
            )
            self.res.decayed = len(got.done)


@workflow.defn(name=names.UNDO_DREAM)
class UndoDream:
    @workflow.run
    async def run(self, inp: UndoInput) -> UndoResult:
        workflow.set_current_details(f"undoing dream cycle {inp.cycle_id}")
        result = await workflow.execute_activity_method(
            UndoActivities.undo_dream,
            inp,
            **with_summary(SCAN_STEP, f"undo {inp.cycle_id}"),
        )
        workflow.set_current_details(f"done: {result.summary()}")
        return result
