"""StoreClaim: which store a task queue serves.

The first worker on a task queue starts `dreamkeeper-store-{queue}` with its store id and
location in the memo; the workflow only waits (an idle workflow costs nothing). A worker
whose data directory has another store refuses to start on that queue, and a client
compares its own store with the memo: two data directories behind one queue would split
an agent's memories between them, silently. `release` (or terminating it) frees the
queue for another store — `dreamkeeper worker --reclaim` does that.
"""

from __future__ import annotations

from temporalio import workflow

from dreamkeeper.core import names


@workflow.defn(name=names.STORE_CLAIM)
class StoreClaim:
    def __init__(self) -> None:
        self._released = False

    @workflow.run
    async def run(self, store_id: str, location: str) -> None:
        workflow.set_current_details(f"this task queue serves store {store_id} at {location}")
        await workflow.wait_condition(lambda: self._released)

    @workflow.signal
    def release(self) -> None:
        self._released = True
