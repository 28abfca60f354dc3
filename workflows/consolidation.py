"""Consolidation: an LLM proposes merges and prunes; deterministic code decides.

The order is this workflow's, one method per step, each step an activity:
  fold exact duplicates → gate candidates → propose (LLM batches) → validate and repair
  (one repair per rejected merge, bounded, reviewed by the same rules) → save merged
  entries, then retire exactly their sources → prune what survives the rules → stamp
  reviewed fingerprints and settled clusters.
Nothing is archived before its replacement is saved (sources are retired only into a
merge that persisted, by a store operation that finds it live), an id the LLM was not
shown in that batch resolves to nothing, a rejected merge's sources never reach the
prune path, and one cycle archives at most its budget (a share of the live entries):
what the budget leaves is not stamped, so the next cycle sees it again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.consolidation import ConsolidationActivities
    from dreamkeeper.core import names
    from dreamkeeper.core.dream_payloads import (
        ArchiveSourcesInput,
        ConflictsInput,
        ConsolidationInput,
        ConsolidationResult,
        FoldInput,
        GateInput,
        GateResult,
        MergeCheck,
        MergeOutcome,
        MergeReviewPayload,
        ProposeInput,
        PruneInput,
        RejectedMerge,
        RepairInput,
        ReviewInput,
        ReviewResult,
        SaveMergedInput,
        StampInput,
        SupersedeInput,
        SupersedePair,
    )
    from dreamkeeper.core.dream_plan import (
        ApprovalDecision,
        ApprovalState,
        DreamPlan,
        PlannedPrune,
        PlannedSupersede,
    )
    from dreamkeeper.policies.consolidation import (
        Verdict,
        archive_budget,
        merge_id,
        prune_candidates,
        resolve_ids,
        without_overlaps,
    )
    from dreamkeeper.policies.gating import pack_batches, shown_hints
    from dreamkeeper.workflows.dream_approval import (
        APPROVAL_PATCH,
        WEEKLY_PRUNE_PATCH,
        Approval,
        over_weekly_cap,
        risky_items,
    )
    from dreamkeeper.workflows.dream_gate import RECALL_GATE_PATCH, RecallGate
    from dreamkeeper.workflows.dream_planning import complete_plan, planned_merge
    from dreamkeeper.workflows.options import LLM_STEP, SCAN_STEP, STORE_STEP, with_summary

MAX_IGNORED_REPORTED = 50
# Consolidation may mark outdated entries as superseded (a step histories from before
# it never had): a workflow.patched id.
SUPERSEDE_PATCH = "consolidation-supersedes"
# Conflicts saves found and nobody settled are settled as supersedes, LLM or not (a step
# histories from before it never had).
SETTLE_PATCH = "consolidation-settles-conflicts"
Activities = ConsolidationActivities


@dataclass
class Proposals:
    merges: list[MergeCheck] = field(default_factory=list)
    to_delete: list[str] = field(default_factory=list)
    shown: dict[str, str] = field(default_factory=dict)  # id -> fingerprint the LLM saw
    superseded: list[SupersedePair] = field(default_factory=list)  # both ids shown together


@workflow.defn(name=names.CONSOLIDATION)
class Consolidation:
    @workflow.init
    def __init__(self, inp: ConsolidationInput) -> None:
        # Everything a step or a handler reads exists before either runs (an approval
        # can arrive with the start). `now()` here is the first task's time, as in `run`.
        self._inp = inp
        self._as_of = inp.as_of or workflow.now()
        self._dry = inp.dry_run
        self._cycle = inp.cycle_id or workflow.info().run_id
        self._res = ConsolidationResult(agent_id=inp.agent_id, as_of=self._as_of)
        self._res.cycle_id = self._cycle
        self._plan = DreamPlan(agent_id=inp.agent_id, as_of=self._as_of)
        self._budget = 0  # archives this cycle may still make
        self._live = 0  # live entries when the cycle began (the fold counts them)
        self._unstamped: set[str] = set()  # shown, but left for a later cycle
        self._recall = RecallGate()
        self._approval = Approval()
        self._vetoed: dict[str, str] = {}  # prune id -> why it was not approved
        self._prune_cap: int | None = None  # prunes the rolling week still allows
        self._reviews: list[MergeReviewPayload] = []

    @workflow.update(name="approve")
    async def approve(self, decision: ApprovalDecision) -> ApprovalState:
        return self._approval.decide(decision, approve=True)

    @approve.validator
    def _check_approve(self, decision: ApprovalDecision) -> None:
        self._approval.validate(decision)

    @workflow.update(name="reject")
    async def reject(self, decision: ApprovalDecision) -> ApprovalState:
        return self._approval.decide(decision, approve=False)

    @reject.validator
    def _check_reject(self, decision: ApprovalDecision) -> None:
        self._approval.validate(decision)

    @workflow.query(name="pending")
    def pending(self) -> ApprovalState:
        return self._approval.state

    @workflow.run
    async def run(self, inp: ConsolidationInput) -> ConsolidationResult:
        await self._fold()
        if workflow.patched(SETTLE_PATCH):
            await self._settle_conflicts()
        gate = await self._gate()
        if gate is None:
            return await self._finish()
        proposals = await self._propose(gate)
        accepted = await self._validate_and_repair(proposals.merges, gate)
        accepted = await self._approve(proposals, gate, accepted)
        if self._dry:
            consumed = self._plan_merges(proposals.merges, accepted)
        else:
            consumed = await self._save_then_archive(proposals.merges, accepted)
        if proposals.superseded and workflow.patched(SUPERSEDE_PATCH):
            await self._supersede(proposals, consumed)
        await self._prune(proposals, gate)
        if self._dry:
            return await self._finish()
        await self._stamp(gate, proposals.shown, consumed)
        if self._res.rejected or self._res.protected or self._res.unsafe:
            workflow.logger.info(
                "consolidation safeguards fired — %d merge(s) rejected for dropping specifics, "
                "%d refused as unsafe for high-value entries, %d entr(ies) protected from "
                "pruning",
                len(self._res.rejected),
                self._res.unsafe,
                len(self._res.protected),
            )
        return self._done()

    async def _fold(self) -> None:
        inp, res = self._inp, self._res
        workflow.set_current_details("step 1/7: folding exact duplicates")
        fold = await workflow.execute_activity_method(
            Activities.fold_exact_duplicates,
            FoldInput(
                agent_id=inp.agent_id,
                as_of=self._as_of,
                store_id=inp.store_id,
                archive_share=inp.archive_share,
                min_archive_budget=inp.min_archive_budget,
                dry_run=self._dry,
                cycle_id=self._cycle,
            ),
            **with_summary(SCAN_STEP, "fold exact duplicates"),
        )
        res.folded, res.deferred_by_budget = len(fold.archived), fold.deferred
        self._plan.folds = fold.planned
        budget = archive_budget(fold.live, inp.archive_share, inp.min_archive_budget)
        self._budget = max(0, budget - len(fold.archived))
        self._live = fold.live

    async def _gate(self) -> GateResult | None:
        """Which entries the LLM sees; None when there is nothing to ask it."""
        inp, res = self._inp, self._res
        workflow.set_current_details("step 2/7: candidate gating")
        gate = await workflow.execute_activity_method(
            Activities.gate_candidates,
            GateInput(
                agent_id=inp.agent_id,
                as_of=self._as_of,
                max_eligible=inp.max_eligible,
                embedding_dim=inp.embedding_dim,
                dry_run=self._dry,
                exclude=[c for f in self._plan.folds for c in f.copies],
            ),
            **with_summary(SCAN_STEP, "candidate gating"),
        )
        eligible = sum(len(g) for g in gate.groups)
        res.total, res.reviewed, res.withheld = gate.total, eligible, gate.withheld
        res.deferred, res.reopened_clusters = gate.deferred, gate.reopened
        res.clustering_failed, res.held_back = gate.clustering_failed, gate.held_back
        workflow.logger.info(
            "consolidation reviewing %d of %d entries (%d withheld as reviewed-and-unchanged, "
            "%d deferred to the next cycle, %d held back)",
            eligible,
            gate.total,
            gate.withheld,
            gate.deferred,
            gate.held_back,
        )
        if not gate.llm_configured:
            res.llm_skipped = "no LLM configured: merges and prunes skipped (fold and gating ran)"
            workflow.logger.info("consolidation %s: %s", inp.agent_id, res.llm_skipped)
            return None
        return gate if eligible else None

    async def _propose(self, gate: GateResult) -> Proposals:
        """LLM batches; every id a reply names is resolved against what its batch showed."""
        out = Proposals()
        in_cluster = {m: tuple(c) for c in gate.clusters for m in c}
        batches = pack_batches([tuple(g) for g in gate.groups], self._inp.batch_size)
        self._res.batches = len(batches)
        for number, batch in enumerate(batches, start=1):
            workflow.set_current_details(
                f"step 3/7: LLM batch {number}/{len(batches)} ({len(batch)} entries)"
            )
            clusters = list(dict.fromkeys(in_cluster[m] for m in batch if m in in_cluster))
            hints = [list(h) for c in clusters for h in shown_hints(c)]
            try:
                proposal = await workflow.execute_activity_method(
                    Activities.propose_consolidation,
                    ProposeInput(agent_id=self._inp.agent_id, ids=batch, hints=hints),
                    **with_summary(LLM_STEP, f"LLM batch {number}"),
                )
            except ActivityError as exc:
                self._res.batches_failed += 1
                workflow.logger.warning(
                    "consolidation batch %d failed, nothing changed for it: %s",
                    number,
                    exc.cause or exc,
                )
                continue
            self._res.prompt_tokens += proposal.prompt_tokens
            out.shown.update(proposal.shown)
            kept, ignored = resolve_ids(proposal.to_delete, proposal.shown)
            out.to_delete += kept
            self._ignore(ignored)
            for pair in proposal.superseded:
                # Both ids resolve against this batch: an outdated entry is replaced only
                # by one the LLM saw beside it.
                both, ignored = resolve_ids([pair.id, pair.by], proposal.shown)
                self._ignore(ignored)
                if len(both) == 2:
                    out.superseded.append(pair)
            for merge in proposal.to_save:
                sources, ignored = resolve_ids(merge.source_ids, proposal.shown)
                self._ignore(ignored)
                out.merges.append(
                    MergeCheck(
                        merge=merge.model_copy(update={"source_ids": sources}),
                        shown={s: proposal.shown[s] for s in sources},
                    )
                )
        self._res.merges_proposed = len(out.merges)
        return out

    async def _review(self, checks: list[MergeCheck], gate: GateResult) -> ReviewResult:
        return await workflow.execute_activity_method(
            Activities.review_merges,
            ReviewInput(
                agent_id=self._inp.agent_id,
                checks=checks,
                vocabulary=gate.vocabulary,
                max_sources=self._inp.max_merge_sources,
            ),
            **with_summary(SCAN_STEP, f"validate {len(checks)} merge(s)"),
        )

    async def _validate_and_repair(self, merges: list[MergeCheck], gate: GateResult) -> list[int]:
        """Indexes of the merges to apply: accepted (first pass or after one repair,
        reviewed by the same rules both times) and not overlapping an earlier one."""
        workflow.set_current_details(f"step 4/7: validating {len(merges)} proposed merge(s)")
        reviews = (await self._review(merges, gate)).reviews if merges else []
        repairs_left = self._inp.max_repairs
        for index, review in enumerate(reviews):
            if review.verdict != Verdict.REJECTED or repairs_left <= 0:
                continue
            repairs_left -= 1
            reviews[index] = await self._repair(merges, index, review, gate)
        accepted = []
        for index, (check, review) in enumerate(zip(merges, reviews, strict=True)):
            if review.verdict == Verdict.ACCEPTED:
                accepted.append(index)
                continue
            sources = check.merge.source_ids
            if review.verdict == Verdict.REJECTED:
                self._res.rejected.append(
                    RejectedMerge(sources=sources, dropped=len(review.missing))
                )
                workflow.logger.info(
                    "rejected merge of [%s] — dropped %d specific(s)",
                    ", ".join(sources),
                    len(review.missing),
                )
                workflow.logger.debug(
                    "rejected merge of [%s] dropped: %s",
                    ", ".join(sources),
                    ", ".join(review.missing),
                )
            elif review.verdict == Verdict.UNSAFE:
                self._res.unsafe += 1
                self._res.rejected.append(RejectedMerge(sources=sources, reason=review.reason))
                workflow.logger.info("refused merge of [%s]: %s", ", ".join(sources), review.reason)
            else:
                self._res.left_alone += 1
                workflow.logger.info(
                    "merge of [%s] left alone: %s", ", ".join(sources), review.verdict
                )
        self._reviews = reviews
        keep = without_overlaps([merges[i].merge.source_ids for i in accepted])
        self._res.left_alone += len(accepted) - len(keep)
        return [accepted[k] for k in keep]

    async def _repair(
        self, merges: list[MergeCheck], index: int, review: MergeReviewPayload, gate: GateResult
    ) -> MergeReviewPayload:
        check = merges[index]
        try:
            repair = await workflow.execute_activity_method(
                Activities.repair_merge,
                RepairInput(agent_id=self._inp.agent_id, merge=check.merge, missing=review.missing),
                **with_summary(LLM_STEP, f"repair merge {index + 1}"),
            )
        except ActivityError as exc:
            workflow.logger.warning("repair of merge %d failed: %s", index + 1, exc.cause or exc)
            return review
        self._res.prompt_tokens += repair.prompt_tokens
        repaired = check.model_copy(
            update={"merge": check.merge.model_copy(update={"content": repair.content})}
        )
        again = (await self._review([repaired], gate)).reviews[0]
        if again.verdict == Verdict.ACCEPTED:
            self._res.repaired += 1
            merges[index] = repaired
        return again

    async def _save_then_archive(self, merges: list[MergeCheck], accepted: list[int]) -> set[str]:
        """Save each merged entry first, then retire exactly its sources into it, while
        the cycle's archive budget lasts. Returns the sources consumed."""
        workflow.set_current_details(f"step 5/7: saving {len(accepted)} merged entr(ies)")
        consumed: set[str] = set()
        gate = self._inp.recall_gate and accepted and workflow.patched(RECALL_GATE_PATCH)
        canaries = await self._recall.record(merges, accepted, self._inp) if gate else None
        for index in accepted:
            check = merges[index]
            sources = check.merge.source_ids
            if len(sources) > self._budget:
                self._defer(sources)
                continue
            new_id = merge_id(sources, check.merge.content)
            saved = await workflow.execute_activity_method(
                Activities.save_merged_entry,
                SaveMergedInput(
                    agent_id=self._inp.agent_id,
                    new_id=new_id,
                    check=check,
                    merged_at=self._as_of,
                    cycle_id=self._cycle,
                ),
                **with_summary(STORE_STEP, f"save merge {new_id}"),
            )
            if not saved.persisted:
                self._res.left_alone += 1
                workflow.logger.info("merge %s not saved, sources kept: %s", new_id, saved.detail)
                continue
            workflow.set_current_details(f"step 6/7: retiring the sources of {new_id}")
            archived = await workflow.execute_activity_method(
                Activities.archive_merged_sources,
                ArchiveSourcesInput(
                    agent_id=self._inp.agent_id,
                    replacement_id=new_id,
                    expected=check.shown,
                    as_of=self._as_of,
                    cycle_id=self._cycle,
                ),
                **with_summary(STORE_STEP, f"retire sources into {new_id}"),
            )
            self._budget -= len(archived.archived)
            consumed.update(sources)
            self._res.merged.append(MergeOutcome(new_id=new_id, sources=sources))
            self._res.archived_with_replacement += len(archived.archived)
        if canaries is not None:
            consumed -= await self._recall.check(canaries, self._res, self._as_of, self._cycle)
        return consumed

    async def _settle_conflicts(self) -> None:
        """Conflicts found at save time (`stores.longterm.conflicts`: the same subject
        and attribute, another value, nobody said which replaces which), settled: the
        older of each pair superseded by the newer through the checked store operation
        — both still current and unchanged, about the same thing, the older below the
        high-value floor — within the cycle's budget. What is refused stays a visible,
        dated conflict in recall."""
        found = await workflow.execute_activity_method(
            Activities.find_conflicts,
            ConflictsInput(
                agent_id=self._inp.agent_id,
                exclude=[c for f in self._plan.folds for c in f.copies],
            ),
            **with_summary(SCAN_STEP, "find unsettled conflicts"),
        )
        if not found.pairs:
            return
        workflow.set_current_details(f"step 1/7: settling {len(found.pairs)} conflict(s)")
        done = await workflow.execute_activity_method(
            Activities.supersede_outdated,
            SupersedeInput(
                agent_id=self._inp.agent_id,
                pairs=found.pairs,
                expected=found.shown,
                as_of=self._as_of,
                max_applied=max(0, self._budget),
                dry_run=self._dry,
                cycle_id=self._cycle,
                why="conflict settled",
            ),
            **with_summary(STORE_STEP, f"settle {len(found.pairs)} conflict(s)"),
        )
        self._budget -= len(done.applied)
        self._defer(done.deferred)
        self._res.settled_conflicts = [p.id for p in done.applied]
        self._res.superseded += self._res.settled_conflicts
        self._res.unsettled_conflicts = dict(list(done.refused.items())[:MAX_IGNORED_REPORTED])
        self._plan.supersedes += [
            PlannedSupersede(id=p.id, by=p.by, fingerprint=found.shown[p.id]) for p in done.applied
        ]

    async def _supersede(self, proposals: Proposals, consumed: set[str]) -> None:
        """Outdated entries become history instead of prunes: marked superseded (kept,
        current no more), never archived. Not a merge's source or a merge's product
        this cycle, within the cycle's budget (a supersede
        hides a fact from default recall). An entry the LLM called outdated leaves the
        prune path whether or not its supersede is applied."""
        outdated = {p.id for p in proposals.superseded}
        proposals.to_delete = [i for i in proposals.to_delete if i not in outdated]
        # An entry is either outdated or a replacement in one cycle, never both (no
        # chain whose outcome would depend on the order), and outdated only once.
        old_ids: set[str] = set()
        by_ids: set[str] = set()
        pairs = []
        for pair in proposals.superseded:
            if pair.id == pair.by or {pair.id, pair.by} & consumed:
                continue
            if pair.id in old_ids or pair.id in by_ids or pair.by in old_ids:
                continue
            old_ids.add(pair.id)
            by_ids.add(pair.by)
            pairs.append(pair)
        if not pairs:
            return
        workflow.set_current_details(f"step 6/7: superseding {len(pairs)} outdated entr(ies)")
        done = await workflow.execute_activity_method(
            Activities.supersede_outdated,
            SupersedeInput(
                agent_id=self._inp.agent_id,
                pairs=pairs,
                expected={i: proposals.shown[i] for p in pairs for i in (p.id, p.by)},
                as_of=self._as_of,
                max_applied=max(0, self._budget),
                dry_run=self._dry,
                cycle_id=self._cycle,
            ),
            **with_summary(STORE_STEP, f"supersede {len(pairs)} outdated"),
        )
        self._budget -= len(done.applied)
        self._defer(done.deferred)
        self._res.superseded += [p.id for p in done.applied]
        self._res.refused_supersedes = dict(list(done.refused.items())[:MAX_IGNORED_REPORTED])
        self._plan.supersedes += [
            PlannedSupersede(id=p.id, by=p.by, fingerprint=proposals.shown[p.id])
            for p in done.applied
        ]

    async def _prune(self, proposals: Proposals, gate: GateResult) -> None:
        allowed, refused = prune_candidates(
            proposals.to_delete,
            shown=proposals.shown,
            merge_only=gate.merge_only,
            merge_sources=[s for m in proposals.merges for s in m.merge.source_ids],
        )
        refusals = {i: str(r) for i, r in refused.items()} | self._vetoed
        allowed = [i for i in allowed if i not in self._vetoed]
        self._res.refused_prunes = dict(list(refusals.items())[:MAX_IGNORED_REPORTED])
        if not allowed:
            return
        pruned = await workflow.execute_activity_method(
            Activities.prune_ephemeral,
            PruneInput(
                agent_id=self._inp.agent_id,
                expected={i: proposals.shown[i] for i in allowed},
                as_of=self._as_of,
                max_archived=max(0, self._budget)
                if self._prune_cap is None
                else max(0, min(self._budget, self._prune_cap)),
                dry_run=self._dry,
                cycle_id=self._cycle,
            ),
            **with_summary(STORE_STEP, f"prune {len(allowed)} ephemeral"),
        )
        self._budget -= len(pruned.archived)
        self._defer(pruned.deferred)
        self._res.pruned = pruned.archived
        self._res.protected = [p.id for p in pruned.protected]
        self._plan.prunes = [
            PlannedPrune(id=i, fingerprint=proposals.shown[i]) for i in pruned.archived
        ]

    async def _stamp(self, gate: GateResult, shown: dict[str, str], consumed: set[str]) -> None:
        """Stamp what was reviewed (not what the budget deferred: it comes back next
        cycle), and the clusters the LLM saw and left alone."""
        workflow.set_current_details("step 7/7: stamping reviewed fingerprints")
        seen = [c for c in gate.clusters if all(m in shown for m in c)]
        stamp = await workflow.execute_activity_method(
            Activities.stamp_reviewed,
            StampInput(
                agent_id=self._inp.agent_id,
                as_of=self._as_of,
                reviewed={i: f for i, f in shown.items() if i not in self._unstamped},
                merged_clusters=[c for c in seen if consumed.intersection(c)],
                declined_clusters=[
                    c
                    for c in seen
                    if not consumed.intersection(c) and self._unstamped.isdisjoint(c)
                ],
                cycle_id=self._cycle,
            ),
            **with_summary(STORE_STEP, "stamp reviewed"),
        )
        self._res.stamped = stamp.stamped

    def _defer(self, ids: list[str]) -> None:
        if ids:
            self._res.deferred_by_budget += len(ids)
            self._unstamped.update(ids)
            workflow.logger.info(
                "archive budget reached: %d entr(ies) left for a later cycle", len(ids)
            )

    def _ignore(self, ids: list[str]) -> None:
        room = MAX_IGNORED_REPORTED - len(self._res.ignored_ids)
        if ids:
            workflow.logger.info("ignored id(s) not shown in this batch: %s", ", ".join(ids[:20]))
        self._res.ignored_ids += ids[: max(0, room)]

    async def _approve(
        self, proposals: Proposals, gate: GateResult, accepted: list[int]
    ) -> list[int]:
        """Risky merges and prunes wait for an operator (see workflows.dream_approval)."""
        inp = self._inp
        if inp.approval == "off" and gate.approval in ("risky", "all"):
            inp = inp.model_copy(update={"approval": gate.approval})  # the agent's setting
        prunes, _ = prune_candidates(
            proposals.to_delete,
            shown=proposals.shown,
            merge_only=gate.merge_only,
            merge_sources=[s for m in proposals.merges for s in m.merge.source_ids],
        )
        items = []
        if not (self._dry or inp.approval == "off" or not workflow.patched(APPROVAL_PATCH)):
            items = risky_items(inp, proposals.merges, self._reviews, accepted, prunes)
        # Whatever the approval setting: prunes past the week's cap wait for an operator,
        # so an LLM obeying an injected instruction cannot prune a little every cycle
        # until nothing below the floor is left. Patched: older histories never asked.
        weekly: set[str] = set()
        if not self._dry and prunes and workflow.patched(WEEKLY_PRUNE_PATCH):
            room, over = over_weekly_cap(
                inp, prunes, self._live, gate.recent_prunes, items, self._budget
            )
            # A count, not a list: whichever prunes apply, at most `room` of them
            # without an operator's yes (a protected one ahead of them frees no slot).
            self._prune_cap = room
            weekly = {p.key for p in over}
            items += over
            if over:  # past the budget: not asked about, left for a later cycle
                for i in prunes[self._budget :]:
                    self._vetoed[i] = "left for a later cycle: weekly prune cap"
                    self._unstamped.add(i)
        if not items:
            return accepted
        state = await self._approval.wait(items, inp.approval_timeout_minutes)
        dropped: set[str] = set()
        for item in items:
            if item.key in state.approved:
                if item.key in weekly and self._prune_cap is not None:
                    self._prune_cap += 1
                continue
            timed_out = item.key in state.timed_out
            reason = "approval timed out" if timed_out else "rejected by the operator"
            if item.kind == "merge":
                dropped.add(item.key)
                self._res.rejected.append(RejectedMerge(sources=item.ids, reason=reason))
            else:
                self._vetoed[item.ids[0]] = reason
            if timed_out:  # never decided: the next cycle proposes it again
                self._unstamped.update(item.ids)
            workflow.logger.info("%s %s: %s", item.kind, item.key, reason)
        return [
            i
            for i in accepted
            if f"merge:{merge_id(proposals.merges[i].merge.source_ids, proposals.merges[i].merge.content)}"
            not in dropped
        ]

    def _plan_merges(self, merges: list[MergeCheck], accepted: list[int]) -> set[str]:
        """A dry run's step 5: what would be saved and retired, under the same budget."""
        consumed: set[str] = set()
        for index in accepted:
            check = merges[index]
            sources = check.merge.source_ids
            if len(sources) > self._budget:
                self._defer(sources)
                continue
            new_id = merge_id(sources, check.merge.content)
            self._budget -= len(sources)
            consumed.update(sources)
            self._res.merged.append(MergeOutcome(new_id=new_id, sources=sources))
            self._res.archived_with_replacement += len(sources)
            self._plan.merges.append(planned_merge(new_id, check))
        return consumed

    async def _finish(self) -> ConsolidationResult:
        if self._dry:
            self._res.plan = await complete_plan(self._plan, self._res)
        return self._done()

    def _done(self) -> ConsolidationResult:
        res = self._res
        workflow.logger.info("consolidation cycle complete — %s", res.summary())
        workflow.set_current_details(
            f"done: {res.summary()}" + (f"; {res.llm_skipped}" if res.llm_skipped else "")
        )
        return res
