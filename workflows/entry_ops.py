"""ArchiveMemory, RestoreMemory, UpdateMemoryImportance: one activity each, so every
mutation of long-term memory has a history an operator can read."""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.entry_ops import EntryActivities
    from dreamkeeper.core import names
    from dreamkeeper.core.payloads import EntryOpInput, EntryOpResult
    from dreamkeeper.workflows.options import STORE_STEP, with_summary


async def _one(
    activity: Callable[[EntryActivities, EntryOpInput], EntryOpResult],
    inp: EntryOpInput,
    what: str,
) -> EntryOpResult:
    workflow.set_current_details(f"{what} {inp.entry_id}")
    result = await workflow.execute_activity_method(
        activity, inp, **with_summary(STORE_STEP, f"{what} {inp.entry_id}")
    )
    workflow.set_current_details(f"done: {what} {inp.entry_id}")
    return result


@workflow.defn(name=names.ARCHIVE_MEMORY)
class ArchiveMemory:
    @workflow.run
    async def run(self, inp: EntryOpInput) -> EntryOpResult:
        return await _one(EntryActivities.archive_memory, inp, "archive")


@workflow.defn(name=names.RESTORE_MEMORY)
class RestoreMemory:
    @workflow.run
    async def run(self, inp: EntryOpInput) -> EntryOpResult:
        return await _one(EntryActivities.restore_memory, inp, "restore")


@workflow.defn(name=names.UPDATE_MEMORY_IMPORTANCE)
class UpdateMemoryImportance:
    @workflow.run
    async def run(self, inp: EntryOpInput) -> EntryOpResult:
        return await _one(EntryActivities.update_memory_importance, inp, "re-score")
