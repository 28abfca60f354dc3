"""The idle check: which passes of a dream cycle have anything to do, per agent.

One activity for a whole batch of agents, so a sweep over mostly idle agents costs a
few activities instead of a cycle of child workflows per agent.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity

from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.dream_payloads import WorkInput, WorkResult
from dreamkeeper.core.settings import DecayParams, HighValueFloor, LLMSettings
from dreamkeeper.stores.dream_state.workload import dream_work


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
        for done, agent in enumerate(inp.agent_ids, start=1):
            with self._stores.using(agent, store_id=inp.store_id) as store:
                result.agents.append(
                    dream_work(
                        store,
                        inp.as_of,
                        retention=self._retention,
                        decay=self._decay,
                        floor=self._floor,
                        llm_configured=self._llm.configured,
                    )
                )
            activity.heartbeat(done, len(inp.agent_ids))
        return result
