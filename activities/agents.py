"""Which agents have a store: the dream sweep's work list."""

from __future__ import annotations

from pathlib import Path

from temporalio import activity

from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.contract.backend import StoreBackend


class AgentActivities:
    def __init__(self, backend: StoreBackend | Path) -> None:
        # A data directory is its settings' backend, as the switch chooses it.
        self._backend = (
            open_backend(StoreSettings(data_dir=Path(backend)))
            if isinstance(backend, Path | str)
            else backend
        )

    @activity.defn(name="list_agents")
    def list_agents(self) -> list[str]:
        return self._backend.agents()
