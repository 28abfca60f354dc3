"""ArchiveMemory, RestoreMemory, UpdateMemoryImportance: one activity each, so every
mutation of long-term memory has a history an operator can read."""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.entry_ops import EntryActivities
    from dreamkeeper.activities.payloads import EntryOpInput, EntryOpResult
    from dreamkeeper.workflows.options import STORE_STEP


async def _one(
    activity: Callable[[EntryActivities, EntryOpInput], EntryOpResult],
    inp: EntryOpInput,
    what: str,
) -> EntryOpResult:
    workflow.set_current_details(f"{what} {inp.entry_id}")
    result = await workflow.execute_activity_method(
        activity, inp, summary=f"{what} {inp.entry_id}", **STORE_STEP
    )
    workflow.set_current_details(f"done: {what} {inp.entry_id}")
    return result


@workflow.defn(name="ArchiveMemory")
class ArchiveMemory:
    @workflow.run
    async def run(self, inp: EntryOpInput) -> EntryOpResult:
        return await _one(EntryActivities.archive_memory, inp, "archive")


@workflow.defn(name="RestoreMemory")
class RestoreMemory:
    @workflow.run
    async def run(self, inp: EntryOpInput) -> EntryOpResult:
        return await _one(EntryActivities.restore_memory, inp, "restore")


@workflow.defn(name="UpdateMemoryImportance")
class UpdateMemoryImportance:
    @workflow.run
    async def run(self, inp: EntryOpInput) -> EntryOpResult:
        return await _one(EntryActivities.update_memory_importance, inp, "re-score")
