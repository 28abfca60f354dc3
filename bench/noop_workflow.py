"""The baseline for bench/save.py: an update-with-start workflow whose update returns at
once. Kept in its own module because workflows must not be defined in __main__."""

from __future__ import annotations

from temporalio import workflow


@workflow.defn(name="BenchNoop")
class BenchNoop:
    def __init__(self) -> None:
        self._done = False

    @workflow.update
    async def save(self) -> str:
        self._done = True
        return "ok"

    @workflow.run
    async def run(self, _: str) -> None:
        await workflow.wait_condition(lambda: self._done)
