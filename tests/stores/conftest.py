"""One suite for both backends: a test that takes `backend` (or a fixture built on it)
runs once against the file backend and once against PostgreSQL (`database_url`, a fresh
database per test; skipped locally when the machine has no server, failed in CI).

With `DREAMKEEPER_TEST_SEAL_AT_REST=1` the PostgreSQL backend's stores seal their content
at rest (`stores.postgres.sealing`), in this process and in the child processes tests
start: the whole store suite once more, sealed (tests/stores/postgres/test_sealing.py
runs sealed stores in every run)."""

from __future__ import annotations

import base64
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from dreamkeeper.stores import faults
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.contract.documents import AgentDocuments, check_name
from dreamkeeper.stores.files.agent_files import AgentFiles
from dreamkeeper.stores.files.documents import FileDocuments
from dreamkeeper.stores.files.memory_store import FileMemoryStore

BACKENDS = ["file", "postgres"]
SEAL_AT_REST = bool(os.environ.get("DREAMKEEPER_TEST_SEAL_AT_REST"))
if SEAL_AT_REST:
    # What this process and its children find, as every process of a deployment would.
    os.environ["DREAMKEEPER_PAYLOAD_KEY"] = base64.b64encode(os.urandom(32)).decode()
    os.environ["DREAMKEEPER_KEYRING"] = tempfile.mkdtemp(prefix="dk-test-keyring-")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def tier_db(backend: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The PostgreSQL `Database` of this test (None for the file backend)."""
    if backend == "file":
        yield None
        return
    from dreamkeeper.stores.postgres.database import Database

    db = Database(request.getfixturevalue("database_url"), max_size=4)
    yield db
    db.close()


@pytest.fixture
def sealing(tier_db: Any) -> Any:
    """The PostgreSQL stores' sealer in the sealed mode (module docstring), else None."""
    if tier_db is None or not SEAL_AT_REST:
        return None
    from dreamkeeper.stores.postgres.sealing import sealing_for

    return sealing_for(tier_db, None)


@pytest.fixture
def make_documents(tier_db: Any, sealing: Any, tmp_path: Path) -> Callable[[str], AgentDocuments]:
    """An agent's documents on this test's backend (a new instance per call: another
    process's view of the same documents)."""

    def make(agent_id: str = "a1") -> AgentDocuments:
        if tier_db is None:
            return FileDocuments(AgentFiles(tmp_path, agent_id))
        from dreamkeeper.stores.postgres.documents import PostgresDocuments

        return PostgresDocuments(tier_db, agent_id, sealing=sealing)

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
def make_working(tier_db: Any, sealing: Any, tmp_path: Path, clock: Any) -> Callable[..., Any]:
    """A working-memory store on this test's backend (a new instance per call: another
    process's view of the same agent)."""

    def make(agent_id: str = "a1", **options: Any) -> Any:
        options.setdefault("clock", clock)
        if tier_db is None:
            from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore

            return FileWorkingMemoryStore(tmp_path, agent_id, **options)
        from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore

        return PostgresWorkingMemoryStore(tier_db, agent_id, sealing=sealing, **options)

    return make


@pytest.fixture
def store_location(tier_db: Any, tmp_path: Path) -> str:
    """What a child process opens the same stores from: the data directory or the URL."""
    return str(tmp_path) if tier_db is None else str(tier_db.url)


@pytest.fixture
def make_conversations(
    tier_db: Any, sealing: Any, tmp_path: Path, clock: Any
) -> Callable[..., Any]:
    """A conversation store on this test's backend (a new instance per call)."""

    def make(agent_id: str = "a1", **options: Any) -> Any:
        options.setdefault("clock", clock)
        if tier_db is None:
            from dreamkeeper.stores.files.conversation_memory import FileConversationStore

            return FileConversationStore(tmp_path, agent_id, **options)
        from dreamkeeper.stores.postgres.conversation_memory import PostgresConversationStore

        return PostgresConversationStore(tier_db, agent_id, sealing=sealing, **options)

    return make


@dataclass
class Backend:
    kind: str
    open: Callable[..., Any]  # open(agent="agent-1", **store keyword arguments)
    announced: Callable[[str], set[tuple[str, int]]]  # (id, revision) the feed names
    # Where a write has run but not taken effect (a crash there leaves it undone).
    before_commit: str
    spec: str  # for a subprocess: "file:<data dir>" or "postgres:<url>" (`open_spec`)


def _file_backend(root: Path, clock: Any) -> Backend:
    def open_store(agent: str = "agent-1", **kw: Any) -> FileMemoryStore:
        kw.setdefault("clock", clock)
        return FileMemoryStore(root, agent, **kw)

    def announced(agent: str) -> set[tuple[str, int]]:
        journal = open_store(agent).journal
        return {(r.id, r.rev) for r in journal.read_all() if r.rev is not None}

    return Backend("file", open_store, announced, faults.JOURNAL_APPENDED, f"file:{root}")


def _postgres_backend(db: Any, clock: Any, sealing: Any) -> Backend:
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore

    def open_store(agent: str = "agent-1", **kw: Any) -> PostgresMemoryStore:
        kw.setdefault("clock", clock)
        kw.setdefault("sealing", sealing)
        return PostgresMemoryStore(db, agent, **kw)

    def announced(agent: str) -> set[tuple[str, int]]:
        # A row whose last change is below the feed's lowest seq was announced by a feed
        # row that compaction has deleted since (`compact_feed`): it counts as named.
        with db.transaction() as conn:
            rows = conn.execute(
                "SELECT id, rev FROM dk_memory_feed WHERE agent_id = %(a)s AND rev IS NOT NULL "
                "UNION SELECT id, revision FROM dk_memory WHERE agent_id = %(a)s AND seq < "
                "(SELECT coalesce(min(seq), 0) FROM dk_memory_feed WHERE agent_id = %(a)s)",
                {"a": agent},
            ).fetchall()
        return {(i, int(r)) for i, r in rows}

    return Backend("postgres", open_store, announced, faults.TRANSACTION_OPEN, f"postgres:{db.url}")


# What a subprocess runs first to open a backend's store from its `spec`.
OPEN_SPEC = """
def open_spec(spec, agent):
    kind, _, where = spec.partition(":")
    if kind == "file":
        from dreamkeeper.stores.files.memory_store import FileMemoryStore
        return FileMemoryStore(where, agent)
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
    from dreamkeeper.stores.postgres.sealing import sealing_for
    db = Database(where)
    return PostgresMemoryStore(db, agent, sealing=sealing_for(db, None))
"""


@pytest.fixture
def long_term(backend: str, tier_db: Any, sealing: Any, tmp_path: Path, clock: Any) -> Backend:
    """Long-term stores on this test's backend (`open` makes a new instance: another
    process's view of the same agent), with what the suite asks of each backend."""
    if tier_db is None:
        return _file_backend(tmp_path / "data", clock)
    return _postgres_backend(tier_db, clock, sealing)


@pytest.fixture
def any_store(long_term: Backend) -> MemoryStore:
    return long_term.open()
