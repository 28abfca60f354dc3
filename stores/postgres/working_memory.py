"""Working memory in PostgreSQL: the `WorkingMemoryStore` contract with the file
backend's rules (`stores.working.working_memory.WorkingMemoryBase`: namespaces and their
cap, the stash rule, TTL, listing and ranking), over rows of `dreamkeeper_working`.

Every write is one transaction that first bumps the agent's row in
`dreamkeeper_working_agents`: that row lock serializes writers of the agent in every
process (the file backend's lock file), and its version tells a reader that something
changed, so a read costs one small query when nothing did and reloads the agent's
entries when something did. Expired entries are invisible at once and deleted by the
hourly sweep. Vectors (with an embedding model) are rows of
`dreamkeeper_working_vectors`, made in the background after a save as with files.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from datetime import datetime

import numpy as np
import psycopg
from pydantic import ValidationError

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import utc_now
from dreamkeeper.stores import faults
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.vectors.embedder import Embedder
from dreamkeeper.stores.vectors.vectors import decode_vector, encode_vector
from dreamkeeper.stores.vectors.working_vectors import WorkingVectorsBase
from dreamkeeper.stores.working.working_memory import (
    WorkingEntry,
    WorkingMemoryBase,
    check_stored_entry,
)

log = logging.getLogger(__name__)


class PostgresWorkingVectors(WorkingVectorsBase):
    def __init__(self, db: Database, agent_id: str, client: Embedder) -> None:
        super().__init__(client)
        self.db = db
        self.agent_id = agent_id

    def _read_stored(self, key: str, fingerprint: str, dim: int) -> np.ndarray | None:
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT vector FROM dreamkeeper_working_vectors WHERE agent_id = %s AND key = %s",
                (self.agent_id, key),
            ).fetchone()
        if row is None:
            return None
        return decode_vector(bytes(row[0]), fingerprint, self.client.model_key, dim)

    def _write_stored(self, key: str, vector: np.ndarray, fingerprint: str) -> None:
        data = encode_vector(vector, fingerprint, self.client.model_key)
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO dreamkeeper_working_vectors (agent_id, key, vector) "
                "VALUES (%s, %s, %s) ON CONFLICT (agent_id, key) DO UPDATE SET vector = "
                "excluded.vector",
                (self.agent_id, key, data),
            )

    def _remove_stored(self, key: str) -> None:
        with self.db.transaction() as conn:
            conn.execute(
                "DELETE FROM dreamkeeper_working_vectors WHERE agent_id = %s AND key = %s",
                (self.agent_id, key),
            )

    def _prune_stored(self, live: set[str]) -> int:
        with self.db.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM dreamkeeper_working_vectors "
                "WHERE agent_id = %s AND NOT (key = ANY(%s))",
                (self.agent_id, sorted(live)),
            )
            return cur.rowcount


class PostgresWorkingMemoryStore(WorkingMemoryBase):
    def __init__(
        self,
        db: Database,
        agent_id: str,
        *,
        clock: Callable[[], datetime] = utc_now,
        embeddings: Embedder | None = None,
    ) -> None:
        super().__init__(
            agent_id,
            clock=clock,
            embeddings=embeddings,
            vectors=PostgresWorkingVectors(db, agent_id, embeddings) if embeddings else None,
        )
        self.db = db
        self._version: int | None = None  # the agent's version the copy in memory is at
        self._conn: psycopg.Connection | None = None  # the write transaction, while held
        self._thread_lock = threading.RLock()

    # -- loading -----------------------------------------------------------------------

    def _refresh(self) -> None:
        with self._thread_lock:
            if self._conn is not None:
                self._load(self._conn)
                return
            with self.db.transaction() as conn:
                self._load(conn)

    def _load(self, conn: psycopg.Connection) -> None:
        row = conn.execute(
            "SELECT version FROM dreamkeeper_working_agents WHERE agent_id = %s",
            (self.agent_id,),
        ).fetchone()
        version = 0 if row is None else int(row[0])
        if version == self._version:
            return
        now = self.now()
        by_segment: dict[str, dict[str, WorkingEntry]] = {}
        skipped = 0
        rows = conn.execute(
            "SELECT key, entry FROM dreamkeeper_working WHERE agent_id = %s AND expires_at > %s",
            (self.agent_id, now),
        ).fetchall()
        for key, text in rows:
            segment = str(key).split("/", 1)[0]
            try:
                entry = WorkingEntry.model_validate_json(text)
                check_stored_entry(entry, segment)
                if entry.key != key:
                    raise InvalidInput("the row's key is not its entry's")
            except (ValidationError, InvalidInput):
                skipped += 1
                continue
            if not entry.expired(now):
                by_segment.setdefault(segment, {})[entry.key] = entry
        if skipped:
            log.warning(
                "working memory %s: skipped %d malformed row(s) in %s",
                self.agent_id,
                skipped,
                self.db.location,
            )
        for gone in set(self._segments) - set(by_segment):
            self._install(gone, {}, None)
        for segment, entries in by_segment.items():
            self._install(segment, entries, version)
        self._version = version

    # -- writes ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _writing(self) -> Iterator[object]:
        with self._thread_lock:
            if self._conn is not None:  # re-entrant: already inside this write
                yield self._conn
                return
            try:
                with self.db.transaction() as conn:
                    # The agent's row is every writer's lock until this transaction ends.
                    row = conn.execute(
                        "INSERT INTO dreamkeeper_working_agents (agent_id, version) "
                        "VALUES (%s, 1) ON CONFLICT (agent_id) DO UPDATE SET version = "
                        "dreamkeeper_working_agents.version + 1 RETURNING version",
                        (self.agent_id,),
                    ).fetchone()
                    assert row is not None
                    self._conn = conn
                    if self._version is not None and self._version == int(row[0]) - 1:
                        self._version = int(row[0])  # no one else wrote: the copy is current
                    else:
                        self._load(conn)
                    yield conn
            except BaseException:
                # What was installed in memory may never have committed: read it again.
                self._version = None
                raise
            finally:
                self._conn = None

    def _write(self, segment: str, entries: dict[str, WorkingEntry]) -> None:
        conn = self._conn
        assert conn is not None and self._version is not None, "_write outside _writing"
        old = self._segments.get(segment)
        old_entries = old.entries if old else {}
        self._forget_vectors(segment, entries)
        conn.execute(
            "DELETE FROM dreamkeeper_working WHERE agent_id = %s AND "
            "split_part(key, '/', 1) = %s AND NOT (key = ANY(%s))",
            (self.agent_id, segment, list(entries)),
        )
        faults.crash_point(faults.ROWS_HALF_WRITTEN)
        changed = [e for k, e in entries.items() if old_entries.get(k) != e]
        if changed:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO dreamkeeper_working (agent_id, key, expires_at, entry) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (agent_id, key) DO UPDATE SET "
                    "expires_at = excluded.expires_at, entry = excluded.entry",
                    [
                        (self.agent_id, e.key, e.expires_at, e.model_dump_json(by_alias=True))
                        for e in changed
                    ],
                )
        self._install(segment, entries, self._version)

    def sweep(self) -> int:
        """Delete expired rows (and vectors whose entry is gone); returns how many went."""
        with self._writing() as conn:
            assert isinstance(conn, psycopg.Connection)
            now = self.now()
            removed = conn.execute(
                "DELETE FROM dreamkeeper_working WHERE agent_id = %s AND expires_at <= %s",
                (self.agent_id, now),
            ).rowcount
            for segment, seg in list(self._segments.items()):
                live = {k: e for k, e in seg.entries.items() if not e.expired(now)}
                if len(live) < len(seg.entries):
                    self._install(segment, live, self._version)
            if self._vectors is not None:
                self._vectors.prune(
                    e.key for seg in self._segments.values() for e in seg.entries.values()
                )
            self._last_sweep = now
        return removed

    def erase_matching(self, mentions: Callable[[str], bool]) -> builtins.list[str]:
        """Delete every row, live or expired but not yet swept, whose key or value
        `mentions` the forgotten text (`stores.forget`), with its vector, in one
        transaction; returns the keys removed."""
        with self._writing() as conn:
            assert isinstance(conn, psycopg.Connection)
            rows = conn.execute(
                "SELECT key, entry FROM dreamkeeper_working WHERE agent_id = %s",
                (self.agent_id,),
            ).fetchall()
            hits: builtins.list[str] = []
            for key, text in rows:
                try:
                    value = WorkingEntry.model_validate_json(text).value
                except (ValidationError, ValueError):
                    value = str(text)  # unreadable: matched on its raw text
                if mentions(str(key)) or mentions(value) or mentions(str(text)):
                    hits.append(str(key))
            if not hits:
                return []
            conn.execute(
                "DELETE FROM dreamkeeper_working WHERE agent_id = %s AND key = ANY(%s)",
                (self.agent_id, hits),
            )
            # Made by a process that had an embedding model, whether this one has or not.
            conn.execute(
                "DELETE FROM dreamkeeper_working_vectors WHERE agent_id = %s AND key = ANY(%s)",
                (self.agent_id, hits),
            )
            gone = set(hits)
            for segment, seg in list(self._segments.items()):
                kept = {k: e for k, e in seg.entries.items() if k not in gone}
                if len(kept) < len(seg.entries):
                    self._install(segment, kept, self._version)
        return hits
