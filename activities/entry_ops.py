"""Single-entry writes: archive, restore (or make a superseded entry current again),
re-score. Each is idempotent by nature (archive
keeps the first reason, restore of a live entry and a repeated score change nothing)."""

from __future__ import annotations

from collections.abc import Callable

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.payloads import EntryOpInput, EntryOpResult
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.longterm.supersede import restore_or_unsupersede


class EntryActivities:
    def __init__(self, stores: StoreRegistry) -> None:
        self._stores = stores

    def _run(self, inp: EntryOpInput, op: Callable[[MemoryStore], MemoryEntry]) -> EntryOpResult:
        with self._stores.using(inp.agent_id, store_id=inp.store_id) as store:
            entry = op(store)
        return EntryOpResult(
            agent_id=inp.agent_id,
            entry_id=entry.id,
            archived=entry.is_archived,
            archive_reason=entry.archive_reason,
            importance=entry.importance_score,
        )

    @activity.defn(name="archive_memory")
    def archive_memory(self, inp: EntryOpInput) -> EntryOpResult:
        return self._run(inp, lambda s: s.archive(inp.entry_id, inp.reason))

    @activity.defn(name="restore_memory")
    def restore_memory(self, inp: EntryOpInput) -> EntryOpResult:
        return self._run(inp, lambda s: restore_or_unsupersede(s, inp.entry_id, force=inp.force))

    @activity.defn(name="update_memory_importance")
    def update_memory_importance(self, inp: EntryOpInput) -> EntryOpResult:
        importance = inp.importance
        if importance is None:
            raise ApplicationError(
                "importance is required",
                type=InvalidInput.failure_type,
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,  # a caller's mistake: logged quietly
            )
        return self._run(inp, lambda s: s.update_importance(inp.entry_id, importance))
