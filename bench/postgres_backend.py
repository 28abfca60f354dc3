"""A durable throwaway PostgreSQL server for the benches' `--backend postgres`
(tests/harness/postgres.py, fsync on: the numbers are for a database that keeps what it
acknowledges), a database in it with Dreamkeeper's schema, and a long-term store on it."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

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


def kept_cluster(root: Path):  # noqa: ANN201 - tests.harness is imported late (sys.path)
    """A durable cluster whose files stay under `root` between runs (initdb only when
    `root` holds none yet), on a free port each start: for a bench whose data takes
    long to build (bench/fleet.py). Stop it with `.stop()`; `root` is never deleted."""
    from tests.harness.postgres import PostgresCluster, find_bindir, free_port

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL server binaries (install postgresql)")

    class KeptCluster(PostgresCluster):
        def __init__(self) -> None:  # not the parent's: it makes a temporary directory
            self.bindir = bindir
            self.durable = True
            self.root = root
            self.data = root / "data"
            self.port = free_port()
            self._as_root = os.geteuid() == 0
            if (self.data / "PG_VERSION").exists():
                return
            root.mkdir(parents=True, exist_ok=True)
            if self._as_root:
                shutil.chown(root, "postgres", "postgres")
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8")

        def destroy(self) -> None:  # the point of the class: the files stay
            self.stop()

    return KeptCluster()
