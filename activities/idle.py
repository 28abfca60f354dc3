"""The idle check: which passes of a dream cycle have anything to do, per agent.

One activity for a whole batch of agents, so a sweep over mostly idle agents costs a
few activities instead of a cycle of child workflows per agent; the batch's idle marks
are read at once (one statement on a database), and only an agent whose mark does not
hold has its store opened and counted.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity

from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.dream_payloads import WorkInput, WorkResult
from dreamkeeper.core.settings import DecayParams, HighValueFloor, LLMSettings
from dreamkeeper.stores.dream_state.workload import dream_work, next_work_at, settings_key


class IdleCheckActivities:
    def __init__(
        self,
        stores: StoreRegistry,
        llm: LLMSettings,
        *,
        retention: timedelta,
        decay: DecayParams,
        floor: HighValueFloor,
    ) -> None:
        self._stores = stores
        self._llm = llm
        self._retention = retention
        self._decay = decay
        self._floor = floor

    @activity.defn(name="dream_work")
    def dream_work(self, inp: WorkInput) -> WorkResult:
        result = WorkResult()
        embedder = self._stores.embeddings
        llm = self._llm.configured
        settings = settings_key(
            retention=self._retention,
            decay=self._decay,
            floor=self._floor,
            llm_configured=llm,
            model_key=embedder.model_key if embedder else None,
        )
        # A cycle for a named store checks it is that store: it opens the store.
        marks = None if inp.store_id else self._stores.backend.idle_marks()
        checked = (
            marks.check(inp.agent_ids, inp.as_of, settings)
            if marks is not None
            else [(None, None)] * len(inp.agent_ids)
        )
        for done, (agent, (state, marked)) in enumerate(
            zip(inp.agent_ids, checked, strict=True), start=1
        ):
            if marked is not None:
                result.agents.append(marked)
                activity.heartbeat(done, len(inp.agent_ids))
                continue
            # `state` was taken before the store is read: a write since makes it stale.
            with self._stores.using(agent, store_id=inp.store_id) as store:
                work = dream_work(
                    store,
                    inp.as_of,
                    retention=self._retention,
                    decay=self._decay,
                    floor=self._floor,
                    llm_configured=llm,
                )
                if work.idle and state is not None and marks is not None:
                    until = next_work_at(
                        store,
                        retention=self._retention,
                        decay=self._decay,
                        floor=self._floor,
                        llm_configured=llm,
                    )
                    marks.mark(agent, state, until, work)
            result.agents.append(work)
            activity.heartbeat(done, len(inp.agent_ids))
        return result
