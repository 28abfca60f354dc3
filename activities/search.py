"""Search, run by the worker that owns the agent's files (a sharded client has none)."""

from __future__ import annotations

from temporalio import activity

from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.core.api import Hit
from dreamkeeper.core.payloads import SearchInput, SearchOutput
from dreamkeeper.stores.search.query import search


class SearchActivities:
    def __init__(self, stores: StoreRegistry) -> None:
        self._stores = stores

    @activity.defn(name="search_memory")
    def search_memory(self, inp: SearchInput) -> SearchOutput:
        with self._stores.using(inp.agent_id, heartbeat=False) as store:
            hits = search(
                store,
                inp.query,
                category=inp.category,
                tags=inp.tags,
                metadata=inp.metadata,
                created_after=inp.created_after,
                created_before=inp.created_before,
                limit=inp.limit,
            )
        return SearchOutput(
            hits=[Hit(entry=h.entry, score=h.score) for h in hits],
            served_by=self._stores.identity.store_id,
        )
