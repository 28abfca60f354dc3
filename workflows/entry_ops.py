"""ArchiveMemory, RestoreMemory, UpdateMemoryImportance: one activity each, so every
mutation of long-term memory has a history an operator can read."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.payloads import EntryOpInput, EntryOpResult
    from dreamkeeper.workflows.maintenance import STORE_RETRY


async def _one(activity_name: str, inp: EntryOpInput, what: str) -> EntryOpResult:
    workflow.set_current_details(f"{what} {inp.entry_id}")
    return await workflow.execute_activity(
        activity_name,
        inp,
        result_type=EntryOpResult,
        start_to_close_timeout=timedelta(minutes=2),
        retry_policy=STORE_RETRY,
        summary=f"{what} {inp.entry_id}",
    )


@workflow.defn(name="ArchiveMemory")
class ArchiveMemory:
    @workflow.run
    async def run(self, inp: EntryOpInput) -> EntryOpResult:
        return await _one("archive_memory", inp, "archive")


@workflow.defn(name="RestoreMemory")
class RestoreMemory:
    @workflow.run
    async def run(self, inp: EntryOpInput) -> EntryOpResult:
        return await _one("restore_memory", inp, "restore")


@workflow.defn(name="UpdateMemoryImportance")
class UpdateMemoryImportance:
    @workflow.run
    async def run(self, inp: EntryOpInput) -> EntryOpResult:
        return await _one("update_memory_importance", inp, "re-score")
