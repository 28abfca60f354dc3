"""The recall gate, as the consolidation workflow runs it: canary queries recorded
for every source a merge is about to retire, checked once the merges are applied; a merge
whose canary no longer finds a live entry carrying that source's terms is undone (merged
entry archived, sources restored) and recorded as `rejected: recall regression`.

Guarded by `workflow.patched(RECALL_GATE_PATCH)`: a history from before the gate replays
without its two activities.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.dream_review import DreamReviewActivities
    from dreamkeeper.core.dream_payloads import (
        ConsolidationInput,
        ConsolidationResult,
        MergeCheck,
        RejectedMerge,
    )
    from dreamkeeper.core.dream_plan import Canary, CanaryInput, RecallCheckInput
    from dreamkeeper.policies.consolidation import merge_id
    from dreamkeeper.workflows.options import SCAN_STEP, with_summary

RECALL_GATE_PATCH = "recall-gate-17"
RECALL_REGRESSION = "recall regression"


class RecallGate:
    def __init__(self) -> None:
        self._top_k = 5
        self._agent = ""
        self._seconds = 0.0

    async def record(
        self, merges: list[MergeCheck], accepted: list[int], inp: ConsolidationInput
    ) -> list[Canary]:
        self._top_k, self._agent = inp.recall_top_k, inp.agent_id
        planned = {
            merge_id(merges[i].merge.source_ids, merges[i].merge.content): list(
                merges[i].merge.source_ids
            )
            for i in accepted
        }
        got = await workflow.execute_activity_method(
            DreamReviewActivities.record_canaries,
            CanaryInput(agent_id=inp.agent_id, merges=planned, top_k=inp.recall_top_k),
            **with_summary(SCAN_STEP, f"recall gate: canaries for {len(planned)} merge(s)"),
        )
        self._seconds = got.seconds
        return got.canaries

    async def check(
        self,
        canaries: list[Canary],
        res: ConsolidationResult,
        as_of: datetime,
        cycle_id: str,
    ) -> set[str]:
        """Check the canaries of the merges saved; undo the ones that regress. Returns
        the sources given back (no longer consumed by a merge)."""
        merged = {m.new_id: m.sources for m in res.merged}
        wanted = [c for c in canaries if c.merge in merged]
        res.gate_seconds += self._seconds
        if not wanted:
            return set()
        workflow.set_current_details(f"recall gate: checking {len(wanted)} canary queries")
        got = await workflow.execute_activity_method(
            DreamReviewActivities.check_recall,
            RecallCheckInput(
                agent_id=self._agent,
                canaries=wanted,
                merged=merged,
                top_k=self._top_k,
                as_of=as_of,
                cycle_id=cycle_id,
            ),
            **with_summary(SCAN_STEP, f"recall gate: {len(wanted)} canary queries"),
        )
        res.gate_checked += got.checked
        res.gate_seconds += got.seconds
        given_back: set[str] = set()
        for new_id in got.reverted:
            sources = merged[new_id]
            res.merged = [m for m in res.merged if m.new_id != new_id]
            res.archived_with_replacement -= len(sources)
            res.rejected.append(RejectedMerge(sources=sources, reason=RECALL_REGRESSION))
            given_back.update(sources)
            workflow.logger.info(
                "recall gate undid merge %s of [%s]: a canary query no longer finds its "
                "source's terms",
                new_id,
                ", ".join(sources),
            )
        return given_back
