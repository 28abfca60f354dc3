"""ArchivePurge and ImportanceDecay: one activity each, `as_of` fixed by the workflow.

`as_of` comes from the input or `workflow.now()` (replay-stable), so an activity retried
after a crash applies the same pass, not a second one.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.maintenance import MaintenanceActivities
    from dreamkeeper.core import names
    from dreamkeeper.core.payloads import DecayInput, DecayResult, PurgeInput, PurgeResult
    from dreamkeeper.workflows.options import SCAN_STEP, with_summary


@workflow.defn(name=names.ARCHIVE_PURGE)
class ArchivePurge:
    @workflow.run
    async def run(self, inp: PurgeInput) -> PurgeResult:
        as_of = inp.as_of or workflow.now()
        workflow.set_current_details(
            f"purging archived entries older than the retention as of {as_of:%Y-%m-%d %H:%M}"
        )
        result: PurgeResult = await workflow.execute_activity_method(
            MaintenanceActivities.purge_archived,
            inp.model_copy(update={"as_of": as_of}),
            **with_summary(SCAN_STEP, f"purge {inp.agent_id}"),
        )
        workflow.set_current_details(
            f"purged {len(result.purged)} of {result.considered} archived; "
            f"{len(result.kept_high_value)} kept above the high-value floor, "
            f"{result.kept_in_retention} within retention"
        )
        return result


@workflow.defn(name=names.IMPORTANCE_DECAY)
class ImportanceDecay:
    @workflow.run
    async def run(self, inp: DecayInput) -> DecayResult:
        as_of = inp.as_of or workflow.now()
        workflow.set_current_details(f"decaying importance as of {as_of:%Y-%m-%d %H:%M}")
        result: DecayResult = await workflow.execute_activity_method(
            MaintenanceActivities.decay_importance,
            inp.model_copy(update={"as_of": as_of}),
            **with_summary(SCAN_STEP, f"decay {inp.agent_id}"),
        )
        workflow.set_current_details(
            f"decayed {result.decayed} of {result.considered} live entries"
        )
        return result
