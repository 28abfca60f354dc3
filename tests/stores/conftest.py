"""One store suite for both backends: `backend` opens long-term stores on files (a data
directory) or on PostgreSQL (a fresh database per test), and `any_store` is a store of
agent-1 on each. A test written against them runs twice; a test about one backend's own
storage (files, journal bytes, symlinks) keeps using `store` or opens its class itself.
The other tiers' fixtures (`tier_db`, `make_documents`, `make_working`, ...) build on the
same `backend` (skipped locally when the machine has no server, failed in CI)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from dreamkeeper.stores import faults
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.documents import AgentDocuments, FileDocuments, check_name
from dreamkeeper.stores.files import AgentFiles
from dreamkeeper.stores.longterm.memory_store import FileMemoryStore

BACKENDS = ["file", "postgres"]


@dataclass
class Backend:
    kind: str
    open: Callable[..., Any]  # open(agent="agent-1", **store keyword arguments)
    announced: Callable[[str], set[tuple[str, int]]]  # (id, revision) the feed names
    # Where a write has run but not taken effect (a crash there leaves it undone).
    before_commit: str
    spec: str  # for a subprocess: "file:<data dir>" or "postgres:<url>" (`open_spec`)
    closers: list[Callable[[], None]] = field(default_factory=list)


def _file_backend(root: Path, clock: Any) -> Backend:
    def open_store(agent: str = "agent-1", **kw: Any) -> FileMemoryStore:
        kw.setdefault("clock", clock)
        return FileMemoryStore(root, agent, **kw)

    def announced(agent: str) -> set[tuple[str, int]]:
        journal = open_store(agent).journal
        return {(r.id, r.rev) for r in journal.read_all() if r.rev is not None}

    return Backend("file", open_store, announced, faults.JOURNAL_APPENDED, f"file:{root}")


def _postgres_backend(url: str, clock: Any) -> Backend:
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore

    db = Database(url, max_size=8)

    def open_store(agent: str = "agent-1", **kw: Any) -> PostgresMemoryStore:
        kw.setdefault("clock", clock)
        return PostgresMemoryStore(db, agent, **kw)

    def announced(agent: str) -> set[tuple[str, int]]:
        with db.transaction() as conn:
            rows = conn.execute(
                "SELECT id, rev FROM dk_memory_feed WHERE agent_id = %s AND rev IS NOT NULL",
                (agent,),
            ).fetchall()
        return {(i, int(r)) for i, r in rows}

    return Backend(
        "postgres", open_store, announced, faults.TRANSACTION_OPEN, f"postgres:{url}", [db.close]
    )


# What a subprocess runs first to open a backend's store from its `spec`.
OPEN_SPEC = """
def open_spec(spec, agent):
    kind, _, where = spec.partition(":")
    if kind == "file":
        from dreamkeeper.stores.longterm.memory_store import FileMemoryStore
        return FileMemoryStore(where, agent)
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
    return PostgresMemoryStore(Database(where), agent)
"""


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path, clock) -> Iterator[Backend]:
    if request.param == "file":
        made = _file_backend(tmp_path / "data", clock)
    else:
        made = _postgres_backend(request.getfixturevalue("database_url"), clock)
    yield made
    for close in made.closers:
        close()


@pytest.fixture
def any_store(backend) -> MemoryStore:
    return backend.open()


@pytest.fixture
def tier_db(backend: Backend, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The PostgreSQL `Database` of this test (None for the file backend)."""
    if backend.kind == "file":
        yield None
        return
    from dreamkeeper.stores.postgres.database import Database

    db = Database(request.getfixturevalue("database_url"), max_size=4)
    yield db
    db.close()


@pytest.fixture
def make_documents(tier_db: Any, tmp_path: Path) -> Callable[[str], AgentDocuments]:
    """An agent's documents on this test's backend (a new instance per call: another
    process's view of the same documents)."""

    def make(agent_id: str = "a1") -> AgentDocuments:
        if tier_db is None:
            return FileDocuments(AgentFiles(tmp_path, agent_id))
        from dreamkeeper.stores.postgres.documents import PostgresDocuments

        return PostgresDocuments(tier_db, agent_id)

    return make


@pytest.fixture
def documents(make_documents: Callable[[str], AgentDocuments]) -> AgentDocuments:
    return make_documents("a1")


@pytest.fixture
def age_document(tier_db: Any, tmp_path: Path) -> Callable[[str, datetime], None]:
    """Make a1's document look last written at `when` (a file's mtime, a row's time)."""

    def age(name: str, when: datetime) -> None:
        if tier_db is None:
            path = tmp_path.joinpath("agents", "a1", *check_name(name))
            os.utime(path, (when.timestamp(), when.timestamp()))
            return
        with tier_db.transaction() as conn:
            conn.execute(
                "UPDATE dreamkeeper_documents SET written_at = %s WHERE agent_id = %s AND name = %s",
                (when, "a1", name),
            )

    return age


@pytest.fixture
def make_working(tier_db: Any, tmp_path: Path, clock: Any) -> Callable[..., Any]:
    """A working-memory store on this test's backend (a new instance per call: another
    process's view of the same agent)."""

    def make(agent_id: str = "a1", **options: Any) -> Any:
        options.setdefault("clock", clock)
        if tier_db is None:
            from dreamkeeper.stores.working.working_memory import FileWorkingMemoryStore

            return FileWorkingMemoryStore(tmp_path, agent_id, **options)
        from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore

        return PostgresWorkingMemoryStore(tier_db, agent_id, **options)

    return make


@pytest.fixture
def store_location(tier_db: Any, tmp_path: Path) -> str:
    """What a child process opens the same stores from: the data directory or the URL."""
    return str(tmp_path) if tier_db is None else str(tier_db.url)
