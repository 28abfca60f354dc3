"""ApplyDreamPlan and UndoDream (#17).

ApplyDreamPlan applies exactly a dry run's plan: first it reads the revision of every
entry the plan names (one activity), and any part naming an entry that moved on is
refused, the rest applied in the cycle's order — folds, merges (save, then retire the
sources), prunes, purge, decay — through the same activities a cycle uses, every write
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
    )
    from dreamkeeper.core.dream_plan import (
        ApplyDecayInput,
        ApplyFoldInput,
        ApplyPlanInput,
        ApplyPlanResult,
        ApplyPurgeInput,
        PlanCheckInput,
        Refusal,
        UndoInput,
        UndoResult,
    )
    from dreamkeeper.workflows.options import SCAN_STEP, STORE_STEP, with_summary

Activities = ConsolidationActivities


@workflow.defn(name=names.APPLY_DREAM_PLAN)
class ApplyDreamPlan:
    @workflow.run
    async def run(self, inp: ApplyPlanInput) -> ApplyPlanResult:
        plan, cycle = inp.plan, workflow.info().run_id
        agent, as_of = plan.agent_id, plan.as_of
        res = ApplyPlanResult(agent_id=agent, cycle_id=cycle)
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
            PlanCheckInput(agent_id=agent, revisions=revisions),
            **with_summary(SCAN_STEP, "check the plan's revisions"),
        )
        changed = check.changed

        def refuse(ids: list[str], what: str) -> bool:
            moved = [i for i in ids if i in changed]
            if moved:
                detail = "; ".join(f"{i}: {changed[i]}" for i in moved)
                res.refused.append(Refusal(ids=ids, reason=f"{what}: changed since ({detail})"))
            return bool(moved)

        for fold in plan.folds:
            if refuse([fold.survivor, *fold.copies], "fold"):
                continue
            got = await workflow.execute_activity_method(
                DreamReviewActivities.apply_fold,
                ApplyFoldInput(agent_id=agent, as_of=as_of, fold=fold, cycle_id=cycle),
                **with_summary(STORE_STEP, f"fold into {fold.survivor}"),
            )
            res.folded += got.done
            res.refused += [Refusal(ids=[i], reason=r) for i, r in got.refused.items()]
        for merge in plan.merges:
            if refuse(merge.sources, f"merge {merge.new_id}"):
                continue
            proposed = ProposedMerge(
                content=merge.content,
                category=merge.category,
                tags=merge.tags,
                source_ids=merge.sources,
                importance=merge.importance,
            )
            check_ = MergeCheck(merge=proposed, shown=merge.shown)
            saved = await workflow.execute_activity_method(
                Activities.save_merged_entry,
                SaveMergedInput(
                    agent_id=agent,
                    new_id=merge.new_id,
                    check=check_,
                    merged_at=as_of,
                    cycle_id=cycle,
                ),
                **with_summary(STORE_STEP, f"save merge {merge.new_id}"),
            )
            if not saved.persisted:
                reason = f"merge {merge.new_id}: {saved.detail}"
                res.refused.append(Refusal(ids=merge.sources, reason=reason))
                continue
            archived = await workflow.execute_activity_method(
                Activities.archive_merged_sources,
                ArchiveSourcesInput(
                    agent_id=agent,
                    replacement_id=merge.new_id,
                    expected=merge.shown,
                    as_of=as_of,
                    cycle_id=cycle,
                ),
                **with_summary(STORE_STEP, f"retire sources into {merge.new_id}"),
            )
            res.merged.append(merge.new_id)
            res.archived += archived.archived
        prunes = [p for p in plan.prunes if not refuse([p.id], "prune")]
        if prunes:
            pruned = await workflow.execute_activity_method(
                Activities.prune_ephemeral,
                PruneInput(
                    agent_id=agent,
                    expected={p.id: p.fingerprint for p in prunes},
                    as_of=as_of,
                    cycle_id=cycle,
                ),
                **with_summary(STORE_STEP, f"prune {len(prunes)}"),
            )
            res.pruned = pruned.archived
            for entry in pruned.protected:
                res.refused.append(Refusal(ids=[entry.id], reason="above the high-value floor"))
        purge = {i: r for i, r in plan.purge_revisions.items() if i not in changed}
        if len(purge) < len(plan.purge_revisions):
            refuse([i for i in plan.purge_revisions if i in changed], "purge")
        if purge:
            got = await workflow.execute_activity_method(
                DreamReviewActivities.apply_purge,
                ApplyPurgeInput(agent_id=agent, as_of=as_of, revisions=purge),
                **with_summary(SCAN_STEP, f"purge {len(purge)}"),
            )
            res.purged = got.done
        decay = [d for d in plan.decay if d.id not in changed]
        if len(decay) < len(plan.decay):
            moved = [d.id for d in plan.decay if d.id in changed]
            res.refused.append(Refusal(ids=moved, reason="decay: changed since the plan"))
        if decay:
            got = await workflow.execute_activity_method(
                DreamReviewActivities.apply_decay,
                ApplyDecayInput(agent_id=agent, as_of=as_of, decay=decay, cycle_id=cycle),
                **with_summary(SCAN_STEP, f"decay {len(decay)}"),
            )
            res.decayed = len(got.done)
        workflow.set_current_details(
            f"done: applied {len(res.merged)} merge(s), {len(res.pruned)} prune(s), "
            f"{len(res.folded)} fold(s), purged {len(res.purged)}, decayed {res.decayed}; "
            f"refused {len(res.refused)} part(s)"
        )
        return res


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
