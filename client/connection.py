"""One way to connect to Temporal: the pydantic data converter, with the payload codec
when a key is configured (client.codec); TLS, a client certificate and an API key for a
production service (TEMPORAL_TLS*, TEMPORAL_API_KEY; docs/scale.md).

Also how a process lets go of the SDK in order. The SDK answers each call from one of
its runtime's threads, which enters Python to hand the result to the event loop
(`loop.call_soon_threadsafe`), and gives the GIL away while it writes to the loop's
wake-up socket. The caller can have the result, finish, and begin interpreter shutdown
before that thread has taken the GIL back; it then takes it from a finalizing
interpreter and the process aborts (`PyGILState_Release`, exit 134) after the work is
done. `settle_runtime` waits, releasing the GIL, until no thread Python did not start is
inside Python; `MemoryClient.aclose` calls it, and every process that connected calls
it once more at exit (atexit runs before finalization), for a client never closed.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import sys
import threading
import time
from pathlib import Path

from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.service import TLSConfig

from dreamkeeper.client.agent_keys import AgentKeyStoreFactory
from dreamkeeper.client.codec import PayloadKeys, data_converter
from dreamkeeper.core.settings import TemporalSettings

log = logging.getLogger(__name__)

# How long to wait for the SDK's threads to leave Python: each needs only the GIL back to
# finish what it started, so this bounds a wait that is normally a millisecond or none.
SETTLE_LIMIT_SECONDS = 5.0
_SETTLE_PAUSE = 0.0005
_exit_hook = threading.Lock()
_exit_hook_registered = False


def _foreign_thread_in_python() -> bool:
    """Whether a thread that Python did not start (the SDK's runtime threads) is running
    Python code now: one holding a frame is between entering Python and leaving it."""
    started = {thread.ident for thread in threading.enumerate()}
    return any(ident not in started for ident in sys._current_frames())


def settle_runtime_at_exit() -> None:
    """`settle_runtime` for a process ending (no event loop): sleeps to give the GIL."""
    deadline = time.monotonic() + SETTLE_LIMIT_SECONDS
    while _foreign_thread_in_python():
        if time.monotonic() > deadline:
            log.debug("the Temporal runtime's threads are still in Python; exiting anyway")
            return
        time.sleep(_SETTLE_PAUSE)


async def settle_runtime() -> None:
    """Wait until the SDK's runtime threads have left Python (the module's docstring):
    after it, a process may end without aborting. Yields to the event loop meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_LIMIT_SECONDS
    while _foreign_thread_in_python():
        if loop.time() > deadline:
            log.debug("the Temporal runtime's threads are still in Python; closing anyway")
            return
        await asyncio.sleep(_SETTLE_PAUSE)


def _settle_at_exit_once() -> None:
    global _exit_hook_registered
    with _exit_hook:
        if not _exit_hook_registered:
            atexit.register(settle_runtime_at_exit)
            _exit_hook_registered = True


def tls_config(temporal: TemporalSettings) -> TLSConfig | bool:
    """TLS for a production service: a client certificate (mTLS), a private CA, or
    plain TLS (an API key implies it). False: a plaintext connection (the dev server)."""
    wanted = temporal.tls or temporal.tls_cert or temporal.tls_ca or temporal.api_key
    if not wanted:
        return False

    def read(path: Path | None) -> bytes | None:
        return path.read_bytes() if path is not None else None

    if not (temporal.tls_cert or temporal.tls_ca or temporal.tls_server_name):
        return True
    return TLSConfig(
        server_root_ca_cert=read(temporal.tls_ca),
        client_cert=read(temporal.tls_cert),
        client_private_key=read(temporal.tls_key),
        domain=temporal.tls_server_name,
    )


async def connect(
    temporal: TemporalSettings,
    data_dir: Path | None = None,
    *,
    runtime: Runtime | None = None,
    key_store: AgentKeyStoreFactory | None = None,
) -> Client:
    """`key_store`: where per-agent data keys live (the store backend's,
    `StoreBackend.agent_keys`); without one every payload is sealed with the payload key
    itself, and `forget` cannot make the agent's histories undecodable."""
    converter = data_converter(PayloadKeys.from_env(data_dir=data_dir, key_store=key_store))
    _settle_at_exit_once()
    return await Client.connect(
        temporal.address,
        namespace=temporal.namespace,
        data_converter=converter,
        tls=tls_config(temporal),
        api_key=temporal.api_key,
        runtime=runtime,
    )
