"""Undoing one dream cycle from its ledger (`stores.dream_state.dream_ledger`).

Per entry the cycle wrote: as the cycle left it (its revision is the one the cycle's last
write produced) → put back as it was before the cycle (an archive restored, importance
and counts as they were) or, for an entry the cycle created, archived; changed since
(another revision) → reported and left alone, and so are the sources retired into a
created entry that changed since (restoring them would count their content twice).
Each write records `undo-{cycle}` in the entry, so running the undo again does nothing.
"""

from __future__ import annotations

from temporalio import activity

from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.dream_plan import UndoInput, UndoResult
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.dream_state.dream_ledger import DreamLedger, EntryHistory
from dreamkeeper.stores.longterm.records import retired_into

# What an undo puts back: the memory, not the store's bookkeeping.
_KEPT = {"id", "revision", "applied_ops"}


def undo_op(cycle_id: str) -> str:
    return f"undo-{cycle_id}"


def _untouched(current: MemoryEntry, history: EntryHistory) -> bool:
    # last_revision + 1: the cycle's last write landed; last_revision: its intent was
    # recorded but the write never happened (a crash) — either way nobody else wrote.
    return current.revision in (history.last_revision, history.last_revision + 1)


def _same_memory(a: MemoryEntry, b: MemoryEntry) -> bool:
    return a.model_dump(exclude=_KEPT) == b.model_dump(exclude=_KEPT)


class UndoActivities:
    def __init__(self, stores: StoreRegistry) -> None:
        self._stores = stores

    @activity.defn(name="undo_dream")
    def undo_dream(self, inp: UndoInput) -> UndoResult:
        result = UndoResult(agent_id=inp.agent_id, cycle_id=inp.cycle_id)
        with self._stores.using(inp.agent_id, store_id=inp.store_id) as store, store.writing():
            ledger = DreamLedger(store.documents, inp.cycle_id)
            if not ledger.exists():
                result.found = False
                return result
            histories = ledger.histories()
            op = undo_op(inp.cycle_id)
            # Created entries first: once archived, their sources may come back.
            created = [h for h in histories if h.first is None]
            blocked: set[str] = set()
            for history in created:
                current = store.get(history.id)
                if current is None:
                    result.gone.append(history.id)
                elif op in current.applied_ops:
                    result.already_undone.append(history.id)
                elif not _untouched(current, history):
                    result.touched[history.id] = "changed since the cycle created it"
                    blocked.add(history.id)
                elif current.is_archived:
                    continue  # the cycle itself undid it (the recall gate)
                else:
                    self._write(
                        store,
                        current.model_copy(
                            update={
                                "archived_at": store.now(),
                                "archive_reason": f"undone: dream {inp.cycle_id}",
                            }
                        ),
                        op,
                        JournalAction.ARCHIVED,
                    )
                    result.archived.append(history.id)
            for history in histories:
                if history.first is not None:
                    self._put_back(store, history, history.first, op, blocked, result)
        activity.logger.info("%s", result.summary())
        return result

    def _put_back(
        self,
        store: MemoryStore,
        history: EntryHistory,
        before: MemoryEntry,
        op: str,
        blocked: set[str],
        result: UndoResult,
    ) -> None:
        current = store.get(history.id)
        if current is None:
            result.gone.append(history.id)
            return
        if op in current.applied_ops:
            result.already_undone.append(history.id)
            return
        if not _untouched(current, history):
            result.touched[history.id] = "changed since the cycle"
            return
        into = set(retired_into(current)) & blocked
        if into:
            result.touched[history.id] = f"retired into {', '.join(sorted(into))}, changed since"
            return
        if _same_memory(current, before):
            return  # the cycle's intent never landed, or it put back the same state
        restored = before.model_copy(
            update={"revision": current.revision, "applied_ops": current.applied_ops}
        )
        self._write(store, restored, op, JournalAction.RESTORED)
        result.restored.append(history.id)

    @staticmethod
    def _write(store: MemoryStore, entry: MemoryEntry, op: str, action: JournalAction) -> None:
        store.put(entry, action=action, reason="dream undone", op=op)
