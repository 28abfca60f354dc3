"""One store suite for both backends: `backend` opens long-term stores on files (a data
directory) or on PostgreSQL (a fresh database per test), and `any_store` is a store of
agent-1 on each. A test written against them runs twice; a test about one backend's own
storage (files, journal bytes, symlinks) keeps using `store` or opens its class itself."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dreamkeeper.stores import faults
from dreamkeeper.stores.contract import MemoryStore
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
