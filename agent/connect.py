"""`connect_memory`: the client the configuration names — remote when DREAMKEEPER_URL is
set, the local `MemoryClient` otherwise — typed as the interface both implement. Apart
from `agent.remote` so the remote client never imports the local one (and its stores)."""

from __future__ import annotations

from dreamkeeper.agent.api import MemoryBackend, Opening
from dreamkeeper.agent.remote import RemoteMemoryClient
from dreamkeeper.core.settings import ServiceSettings


def connect_memory(service: ServiceSettings | None = None) -> Opening[MemoryBackend]:
    """A `RemoteMemoryClient` when DREAMKEEPER_URL (or `service.url`) is set, else the
    local `MemoryClient.connect()`: the same calls either way. `async with
    connect_memory() as memory:` closes it when the block ends; awaited, the caller
    closes it (`aclose`)."""
    return Opening(_connect_memory(service or ServiceSettings.from_env()))


async def _connect_memory(service: ServiceSettings) -> MemoryBackend:
    if service.url:
        return RemoteMemoryClient(service.url, token=service.sent_token)
    # Here, not at the top: a remote agent never loads Temporal and the file store.
    from dreamkeeper.agent.client import MemoryClient

    return await MemoryClient.connect()
