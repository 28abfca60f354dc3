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
from dreamkeeper.stores.backends import FileBackend
from dreamkeeper.stores.dream_state.workload import (
    dream_work,
    idle_by_mark,
    mark_idle,
    next_work_at,
    settings_key,
    state_key,
)
from dreamkeeper.stores.files import AgentFiles


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
        backend = self._stores.backend
        for done, agent in enumerate(inp.agent_ids, start=1):
            # The idle mark stands on a file store's own state (its journal's size and
            # time); a database store is counted every time, from its cached index.
            files = (
                AgentFiles(backend.data_dir, agent) if isinstance(backend, FileBackend) else None
            )
            # A cycle for a named store checks it is that store: it opens the store.
            marked = (
                idle_by_mark(files, inp.as_of, settings)
                if files is not None and not inp.store_id
                else None
            )
            if marked is not None:
                result.agents.append(marked)
                activity.heartbeat(done, len(inp.agent_ids))
                continue
            # Taken before the store is read.
            state = state_key(files.root, settings) if files is not None else None
            with self._stores.using(agent, store_id=inp.store_id) as store:
                work = dream_work(
                    store,
                    inp.as_of,
                    retention=self._retention,
                    decay=self._decay,
                    floor=self._floor,
                    llm_configured=llm,
                )
                if work.idle and state is not None:
                    until = next_work_at(
                        store,
                        retention=self._retention,
                        decay=self._decay,
                        floor=self._floor,
                        llm_configured=llm,
                    )
                    assert files is not None  # a state key exists only for a file store
                    mark_idle(files.root, state, until, work)
            result.agents.append(work)
            activity.heartbeat(done, len(inp.agent_ids))
        return result
