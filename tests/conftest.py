from __future__ import annotations

import os

# Imported up front: hypothesis's pytest plugin importing it at session end (with the
# Temporal runtime's threads alive) trips a CPython 3.11 "AST constructor recursion depth
# mismatch" SystemError.
import hypothesis
import pytest

# The suite installs the local-embeddings extra, which `auto` would pick up in every
# worker and client the tests start (subprocesses inherit this). Tests that want
# embeddings configure them explicitly.
os.environ["DREAMKEEPER_EMBEDDING_BACKEND"] = "none"

from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.testing.clock import FakeClock

# No per-example deadline: on a loaded 2-core CI machine an example's wall time says
# nothing about the code, and a deadline there only makes a property test flaky.
hypothesis.settings.register_profile("dreamkeeper", deadline=None)
hypothesis.settings.load_profile("dreamkeeper")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path, clock) -> FileMemoryStore:
    return FileMemoryStore(tmp_path, "agent-1", clock=clock)


@pytest.fixture
def embedder():
    from dreamkeeper.testing.scripted_embeddings import ScriptedEmbeddings

    server = ScriptedEmbeddings()
    yield server
    server.close()


@pytest.fixture
def embedding_client(embedder):
    from dreamkeeper.core.settings import EmbeddingSettings
    from dreamkeeper.stores.vectors.embedding_client import EmbeddingClient

    client = EmbeddingClient(
        EmbeddingSettings(
            base_url=embedder.base_url,
            model="scripted-embed",
            timeout_seconds=5,
            query_timeout_seconds=5,
        )
    )
    yield client
    client.close()


@pytest.fixture(scope="session")
def postgres_cluster():
    """One throwaway PostgreSQL server for the session (tests/harness/postgres.py). CI
    must have one: there a missing server fails the tests that need it, never skips."""
    from tests.harness.postgres import PostgresCluster, find_bindir

    bindir = find_bindir()
    if bindir is None:
        message = (
            "PostgreSQL server binaries not found (install `postgresql`, or set "
            "DREAMKEEPER_PG_BINDIR): the PostgreSQL backend's tests need a server"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    cluster = PostgresCluster(bindir)
    cluster.start()
    yield cluster
    cluster.destroy()


_database_count = 0


@pytest.fixture
def database_url(postgres_cluster) -> str:
    """The URL of a fresh database with Dreamkeeper's schema, one per test."""
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.migrations import upgrade

    global _database_count
    _database_count += 1
    url = postgres_cluster.create_database(f"dk_test_{os.getpid()}_{_database_count}")
    db = Database(url, max_size=2)
    try:
        upgrade(db)
    finally:
        db.close()
    return url
