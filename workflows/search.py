"""SearchMemory: one search, run on the task queue of the worker that owns the agent.

A short workflow around one local activity, so a client without the agent's files (a
sharded deployment: the files are on the owning host) searches where they are. It runs
unsandboxed, like SaveMemory: one step, no I/O of its own.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from dreamkeeper.activities.search import SearchActivities
    from dreamkeeper.core import names
    from dreamkeeper.core.payloads import SearchInput, SearchOutput
    from dreamkeeper.workflows.options import STORE_RETRY


@workflow.defn(name=names.SEARCH_MEMORY, sandboxed=False)
class SearchMemory:
    @workflow.run
    async def run(self, inp: SearchInput) -> SearchOutput:
        return await workflow.execute_local_activity_method(
            SearchActivities.search_memory,
            inp,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=STORE_RETRY,
            summary="search",
        )
