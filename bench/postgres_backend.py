"""A durable throwaway PostgreSQL server for the benches' `--backend postgres`
(tests/harness/postgres.py, fsync on: the numbers are for a database that keeps what it
acknowledges), a database in it with Dreamkeeper's schema, and a long-term store on it."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import _repo_root  # noqa: F401  (puts the repo root on sys.path for tests.harness)

from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
from dreamkeeper.stores.postgres.migrations import upgrade


@contextlib.contextmanager
def database_url() -> Iterator[str]:
    """A fresh database with the schema on a durable cluster started for this run."""
    from tests.harness.postgres import PostgresCluster, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL server binaries (install postgresql)")
    cluster = PostgresCluster(bindir, durable=True)
    cluster.start()
    try:
        url = cluster.create_database(f"dk_bench_{uuid.uuid4().hex[:8]}")
        db = Database(url, max_size=2)
        upgrade(db)
        db.close()
        yield url
    finally:
        cluster.destroy()


def open_store(url: str, agent: str, **kw) -> PostgresMemoryStore:
    return PostgresMemoryStore(Database(url), agent, **kw)
