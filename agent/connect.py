"""`connect_memory`: the client the configuration names — remote when DREAMKEEPER_URL is
set, the local `MemoryClient` otherwise — typed as the interface both implement. Apart
from `agent.remote` so the remote client never imports the local one (and its stores)."""

from __future__ import annotations

from dreamkeeper.agent.api import MemoryBackend
from dreamkeeper.agent.remote import RemoteMemoryClient
from dreamkeeper.core.settings import ServiceSettings


async def connect_memory(service: ServiceSettings | None = None) -> MemoryBackend:
    """A `RemoteMemoryClient` when DREAMKEEPER_URL (or `service.url`) is set, else the
    local `MemoryClient.connect()`: the same calls either way."""
    service = service or ServiceSettings.from_env()
    if service.url:
        return RemoteMemoryClient(service.url, token=service.sent_token)
    # Here, not at the top: a remote agent never loads Temporal and the file store.
    from dreamkeeper.agent.client import MemoryClient

    return await MemoryClient.connect()
