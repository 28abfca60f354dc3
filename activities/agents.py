"""Which agents have a store: the dream sweep's work list."""

from __future__ import annotations

from pathlib import Path

from temporalio import activity

from dreamkeeper.stores.backends import FileBackend
from dreamkeeper.stores.contract.backend import StoreBackend


class AgentActivities:
    def __init__(self, backend: StoreBackend | Path) -> None:
        self._backend = FileBackend(backend) if isinstance(backend, Path | str) else backend

    @activity.defn(name="list_agents")
    def list_agents(self) -> list[str]:
        return self._backend.agents()
