"""`forget` on the PostgreSQL backend (`stores.forget`): the same request, steps and
receipt; what differs is where things are. The journal is the table
`dreamkeeper_forget_journal` (ids only), one forget at a time is an advisory lock, the
index snapshot and vectors are rows, and the verification scans every row the database
keeps for the agent (documents, entries, the change feed, caches, working memory,
conversation turns) for the forgotten text's bytes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from dreamkeeper.core.forgetting import Removal, Verification
from dreamkeeper.core.models import utc_now
from dreamkeeper.stores.documents import AgentDocuments
from dreamkeeper.stores.forget import (
    MAX_JOURNAL_BYTES,
    AgentStores,
    Forgetting,
    HistoryKeys,
    exported_files,
)
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.documents import PostgresDocuments
from dreamkeeper.stores.postgres.memory_store import lock_key

# One forget at a time per database (pg_advisory_lock's key space is shared: a constant
# no other lock of Dreamkeeper's uses).
FORGET_LOCK = 0x646B_666F_7267_6574  # "dkforget"

# Every table holding an agent's data, with the columns that can carry its text.
AGENT_TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("dk_memory", ("id", "doc")),
    ("dk_memory_feed", ("id", "reason", "op", "category")),
    ("dk_memory_vector", ("id", "data")),
    ("dk_memory_cache", ("name", "data")),
    ("dreamkeeper_documents", ("name", "data")),
    ("dreamkeeper_working", ("key", "entry")),
    ("dreamkeeper_working_vectors", ("key", "vector")),
    ("dreamkeeper_conversation_turns", ("session_id", "turn")),
    ("dreamkeeper_conversation_sessions", ("session_id",)),
    ("dreamkeeper_working_agents", ()),
    ("dk_memory_agent", ()),
)


class PostgresForgetting(Forgetting):
    """Forget requests on one database."""

    def __init__(
        self,
        db: Database,
        open_stores: Callable[[str], AgentStores],
        *,
        history_keys: HistoryKeys | None = None,
    ) -> None:
        self.db = db
        self.data_dir = Path(".")  # nothing of this backend is under a directory
        self._open = open_stores
        self.history_keys = history_keys

    def _hold(self) -> AbstractContextManager[object]:
        return self._advisory()

    @contextmanager
    def _advisory(self) -> Iterator[object]:
        with self.db.dedicated() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (_signed(FORGET_LOCK),))
            try:
                yield conn
            finally:
                if not conn.closed and not conn.broken:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (_signed(FORGET_LOCK),))

    def _note(self, record: dict[str, object]) -> None:
        line = json.dumps({**record, "at": utc_now().isoformat()}, separators=(",", ":"))
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO dreamkeeper_forget_journal (request, record) VALUES (%s, %s)",
                (str(record["request"]), line),
            )

    def _journal_lines(self) -> list[bytes]:
        rows = self.db.fetch(
            "SELECT record FROM dreamkeeper_forget_journal WHERE length(record) <= %s ORDER BY seq",
            (MAX_JOURNAL_BYTES,),
        )
        return [str(r[0]).encode("utf-8") for r in rows]

    def _place(self, agent_id: str, name: str) -> str:
        return f"{self.db.location} (agent {agent_id}): {name}"

    def _vector_count(self, agent_id: str, ids: list[str]) -> int:
        rows = self.db.fetch(
            "SELECT count(*) FROM dk_memory_vector WHERE agent_id = %s AND id = ANY(%s)",
            (agent_id, ids),
        )
        return int(rows[0][0])

    def _drop_vector(self, agent_id: str, entry_id: str) -> bool:
        with self.db.transaction() as conn:
            return (
                conn.execute(
                    "DELETE FROM dk_memory_vector WHERE agent_id = %s AND id = %s",
                    (agent_id, entry_id),
                ).rowcount
                > 0
            )

    def _caches(self, agent_id: str) -> list[str]:
        rows = self.db.fetch(
            "SELECT name FROM dk_memory_cache WHERE agent_id = %s ORDER BY name", (agent_id,)
        )
        return [self._place(agent_id, f"dk_memory_cache/{r[0]}") for r in rows]

    def _inventory(self, agent_id: str) -> list[Removal]:
        removed = []
        for table, _ in AGENT_TABLES:
            rows = self.db.fetch(
                f"SELECT count(*) FROM {table} WHERE agent_id = %s",  # noqa: S608
                (agent_id,),
            )
            if int(rows[0][0]):
                removed.append(
                    Removal(place=self._place(agent_id, table), what="rows", count=int(rows[0][0]))
                )
        return removed

    def _raw_scan(self, stores: AgentStores, needles: list[bytes], result: Verification) -> None:
        agent_id = stores.memory.agent_id
        self._scan_rows(agent_id, needles, result)
        for path in exported_files(stores.memory.documents):
            if not path.is_file() or path.is_symlink():
                continue
            result.files_scanned += 1
            try:
                data = path.read_bytes().lower()
            except OSError:
                continue
            if any(n in data for n in needles):
                result.files_containing.append(str(path))

    def _scan_rows(self, agent_id: str, needles: list[bytes], result: Verification) -> None:
        """Every row of the agent, as bytes, lower-cased: one place per table that has a
        row carrying the text (`files_scanned` counts the rows read)."""
        for table, columns in AGENT_TABLES:
            if not columns:
                continue
            cast = ", ".join(f"convert_to(coalesce({c}::text, ''), 'UTF8')" for c in columns)
            if table in ("dk_memory_vector", "dk_memory_cache", "dreamkeeper_documents"):
                cast = ", ".join(
                    f"coalesce({c}, ''::bytea)"
                    if c in ("data", "vector")
                    else f"convert_to(coalesce({c}, ''), 'UTF8')"
                    for c in columns
                )
            if table == "dreamkeeper_working_vectors":
                cast = "convert_to(key, 'UTF8'), vector"
            rows = self.db.fetch(
                f"SELECT {cast} FROM {table} WHERE agent_id = %s",  # noqa: S608
                (agent_id,),
            )
            hit = False
            for row in rows:
                result.files_scanned += 1
                data = b"\0".join(bytes(v) for v in row).lower()
                hit = hit or any(n in data for n in needles)
            if hit:
                result.files_containing.append(self._place(agent_id, table))

    def _agent_documents(self, agent_id: str) -> AgentDocuments:
        return PostgresDocuments(self.db, agent_id)

    def _delete_agent(self, agent_id: str) -> None:
        with self.db.transaction() as conn:
            # The agent's long-term writer lock, to the end of this transaction: no write
            # of a hold that read the store before lands between these deletes.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(agent_id),))
            for table, _ in AGENT_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE agent_id = %s", (agent_id,))  # noqa: S608

    def _agent_left(self, agent_id: str) -> list[str]:
        return [r.place for r in self._inventory(agent_id)]


def _signed(key: int) -> int:
    return key - (1 << 64) if key >= 1 << 63 else key


def postgres_backend(db: Database) -> Callable[[str], AgentStores]:
    """Open an agent's three PostgreSQL stores (no embedding model, as `file_backend`)."""
    from dreamkeeper.stores.postgres.conversation_memory import PostgresConversationStore
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
    from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore

    def open_stores(agent_id: str) -> AgentStores:
        return AgentStores(
            memory=PostgresMemoryStore(db, agent_id),
            working=PostgresWorkingMemoryStore(db, agent_id),
            conversation=PostgresConversationStore(db, agent_id),
        )

    return open_stores
