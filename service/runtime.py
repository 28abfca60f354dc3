"""`dreamkeeper serve`: one process per data directory running the worker and the memory
service (uvicorn) on one event loop, until SIGINT/SIGTERM; then the HTTP server stops
taking requests and the worker lets running activities finish. With `--no-worker` the
memory service alone: the task queue's `dreamkeeper worker` processes run the workflows."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn
from temporalio.client import Client
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from dreamkeeper.agent.client import MemoryClient
from dreamkeeper.client.connection import connect
from dreamkeeper.core.settings import (
    ServiceSettings,
    StoreSettings,
    TemporalSettings,
    embedding_settings,
)
from dreamkeeper.service.app import create_app
from dreamkeeper.service.metrics import ServiceMetrics
from dreamkeeper.service.state import ServiceState
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.vectors.embedding_client import embedding_client
from dreamkeeper.worker.runtime import running_worker

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: it re-raises a caught signal after
    stopping, which would end the process before the worker has shut down."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def temporal_runtime(service: ServiceSettings) -> Runtime | None:
    """A Temporal runtime exporting the SDK's metrics in Prometheus format on its own
    address (the SDK binds it; /metrics appends what it serves)."""
    if not service.temporal_metrics:
        return None
    return Runtime(
        telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=service.temporal_metrics))
    )


async def run_serve(
    store: StoreSettings,
    temporal: TemporalSettings,
    service: ServiceSettings,
    *,
    reclaim: bool = False,
) -> None:
    loop = asyncio.get_running_loop()
    metrics = ServiceMetrics(service.temporal_metrics)
    async with _temporal(store, temporal, service, metrics, reclaim=reclaim) as client:
        memory = MemoryClient(
            client,
            store,
            temporal.task_queue,
            embedding_client(embedding_settings()),
            save_timeout=store.save_timeout,
        )
        state = ServiceState(memory, service, metrics)
        config = uvicorn_config(create_app(state), service)
        server = _Server(config)

        def stop() -> None:
            server.should_exit = True

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        announce = asyncio.create_task(_announce(server, service, state.tokens.issued()))
        try:
            await server.serve()
        finally:
            announce.cancel()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        if not server.started:
            raise OSError(f"cannot listen on {service.host}:{service.port}")


@contextlib.asynccontextmanager
async def _temporal(
    store: StoreSettings,
    temporal: TemporalSettings,
    service: ServiceSettings,
    metrics: ServiceMetrics,
    *,
    reclaim: bool,
) -> AsyncIterator[Client]:
    """serve's Temporal client: with its own worker polling the task queue (the default),
    or, with `--no-worker`, a client only: the store is checked as a worker would (an
    older or newer schema refused), and whatever queue's claim the requests meet is
    checked by the memory client on first use, as any client's is."""
    if service.worker:
        async with running_worker(
            store,
            temporal,
            reclaim=reclaim,
            runtime=temporal_runtime(service),
            interceptors=[metrics.interceptor()],
        ) as client:
            yield client
        return
    backend = open_backend(store)
    backend.check_ready()
    client = await connect(
        temporal, store.data_dir, runtime=temporal_runtime(service), key_store=backend.agent_keys
    )
    log.info(
        "serve: no worker in this process; `dreamkeeper worker` on task queue %s runs the "
        "workflows",
        temporal.task_queue,
    )
    yield client


async def _announce(server: uvicorn.Server, service: ServiceSettings, issued: bool) -> None:
    while not server.started:
        await asyncio.sleep(0.05)
    url = f"http://{service.host}:{service.port}"
    guarded = bool(service.token) or issued
    auth = (
        "bearer token required"
        if guarded
        else "no token (DREAMKEEPER_SERVE_TOKEN, `dreamkeeper token create`)"
    )
    print(
        f"dreamkeeper serve: {url}  (API {url}/docs, MCP {url}/mcp, metrics {url}/metrics; {auth})",
        flush=True,
    )
    if not guarded and service.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "serving on %s without a token: anyone who can reach it reads and writes every "
            "agent's memory (set DREAMKEEPER_SERVE_TOKEN)",
            service.host,
        )
    if service.temporal_metrics:
        print(f"Temporal runtime metrics: http://{service.temporal_metrics}/metrics", flush=True)


KEEP_ALIVE_SECONDS = 75  # above clients' idle-connection expiry (see uvicorn_config)


def uvicorn_config(app: Any, service: ServiceSettings) -> uvicorn.Config:
    """uvicorn with no logging setup of its own (`log_config=None`): its records go
    through Dreamkeeper's handler, which colours only a terminal. uvicorn's formatter
    decides colour from stdout but writes to stderr, so `serve 2>log` from a terminal
    wrote escape codes into the log. An idle connection is kept for longer than a
    client keeps one to reuse (httpx and most pools: 5 s, uvicorn's own default too):
    closing it at the moment the client sends on it fails that request with a read error
    the client cannot tell from a crash (the fleet bench saw 8 in 14,600 requests)."""
    return uvicorn.Config(
        app,
        host=service.host,
        port=service.port,
        log_config=None,
        log_level="warning",
        lifespan="on",
        access_log=False,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
    )
