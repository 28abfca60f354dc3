"""Maintenance activities: archive purge and importance decay.

Both are idempotent under retries: purge deletes only what is still archived past the
cutoff, and decay measures from `as_of` (fixed by the workflow) and stamps updatedAt,
so a second pass with the same `as_of` finds nothing to do.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.dream_plan import PlannedDecay
from dreamkeeper.core.payloads import DecayInput, DecayResult, PurgeInput, PurgeResult
from dreamkeeper.core.settings import DecayParams, HighValueFloor
from dreamkeeper.policies.decay import decayed_importance
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.dream_state.dream_ledger import ledger_for, prune_ledgers
from dreamkeeper.stores.longterm import snapshot


class MaintenanceActivities:
    def __init__(
        self,
        stores: StoreRegistry,
        *,
        retention: timedelta,
        decay: DecayParams,
        floor: HighValueFloor,
    ) -> None:
        self._stores = stores
        self._retention = retention
        self._decay = decay
        self._floor = floor

    @activity.defn(name="purge_archived")
    def purge_archived(self, inp: PurgeInput) -> PurgeResult:
        if inp.as_of is None:
            raise ApplicationError("purge needs as_of from the workflow", non_retryable=True)
        retention = (
            self._retention if inp.retention_days is None else timedelta(days=inp.retention_days)
        )
        with self._stores.using(inp.agent_id, store_id=inp.store_id) as store:
            report = store.purge(
                retention,
                keep=self._floor.protects,
                now=inp.as_of,
                on_progress=lambda done, total: activity.heartbeat(done, total),
                dry_run=inp.dry_run,
            )
            revisions = {}
            if inp.dry_run:
                revisions = {i: e.revision for i in report.purged if (e := store.get(i))}
            elif retention > timedelta(0):
                prune_ledgers(store.documents, inp.as_of - retention)
        activity.logger.info(
            "purge %s: %d of %d archived purged, %d kept above the high-value floor",
            inp.agent_id,
            len(report.purged),
            report.considered,
            len(report.kept_high_value),
        )
        return PurgeResult(
            agent_id=inp.agent_id,
            as_of=inp.as_of,
            considered=report.considered,
            purged=report.purged,
            kept_high_value=report.kept_high_value,
            kept_in_retention=report.kept_in_retention,
            revisions=revisions,
        )

    @activity.defn(name="decay_importance")
    def decay_importance(self, inp: DecayInput) -> DecayResult:
        if inp.as_of is None:
            raise ApplicationError("decay needs as_of from the workflow", non_retryable=True)
        as_of = inp.as_of
        decayed = 0
        planned: list[PlannedDecay] = []
        with self._stores.using(inp.agent_id, store_id=inp.store_id) as store:
            excluded = set(inp.exclude)
            # History does not decay: a superseded entry keeps the importance it had
            # while current, so unsuperseding brings the fact back as it was.
            live = [e for e in store.entries() if e.id not in excluded and e.is_current]
            if inp.dry_run or inp.cycle_id:
                for entry in live:
                    new = decayed_importance(entry, as_of, self._decay)
                    if new is not None:
                        planned.append(
                            PlannedDecay(
                                id=entry.id,
                                revision=entry.revision,
                                before=entry.importance_score,
                                after=new,
                            )
                        )
            if inp.dry_run:
                return DecayResult(
                    agent_id=inp.agent_id,
                    as_of=as_of,
                    considered=len(live),
                    decayed=len(planned),
                    planned=planned,
                )
            by_id = {e.id: e for e in live}
            ledger_for(store.documents, inp.cycle_id).note(
                "decay", [(p.id, by_id[p.id]) for p in planned]
            )
            for done, entry in enumerate(live, start=1):
                new = decayed_importance(entry, as_of, self._decay)
                if new is not None:
                    store.mutate(
                        entry.id,
                        # Re-decided on the current entry, under the store's lock.
                        lambda cur: _decayed(cur, as_of, self._decay),
                        action=JournalAction.DECAYED,
                        reason=f"decayed as of {as_of.isoformat()}",
                    )
                    decayed += 1
                if done % 500 == 0:
                    activity.heartbeat(done, len(live))
            # The dream cycle's last store pass: refresh the index snapshot of a large
            # store, so its next cold open replays only what comes after this cycle.
            if len(live) >= snapshot.MIN_ENTRIES:
                store.save_snapshot()
        activity.logger.info(
            "decay %s: %d of %d live entries decayed", inp.agent_id, decayed, len(live)
        )
        return DecayResult(
            agent_id=inp.agent_id, as_of=as_of, considered=len(live), decayed=decayed
        )


def _decayed(entry, as_of, params):
    new = decayed_importance(entry, as_of, params)
    if new is None:
        return entry
    return entry.model_copy(update={"importance_score": new, "updated_at": as_of})
