"""Working memory in PostgreSQL: the `WorkingMemoryStore` contract with the file
backend's rules (`stores.working.working_memory.WorkingMemory`: namespaces and their
cap, the stash rule, TTL, listing and ranking), over rows of `dreamkeeper_working`.

Every write is one transaction that first bumps the agent's row in
`dreamkeeper_working_agents`: that row lock serializes writers of the agent in every
process (the file backend's lock file), and its version tells a reader that something
changed, so a read costs one small query when nothing did and reloads the agent's
entries when something did. Expired entries are invisible at once and deleted by the
hourly sweep. Vectors (with an embedding model) are rows of
`dreamkeeper_working_vectors`, made in the background after a save as with files.

Sealed at rest (`stores.postgres.sealing`): the agent row names the data key every row
of the agent is sealed with (`key_id`), and each row holds its entry sealed, its key and
the key's first segment as keyed tags (what the SQL compares), never in clear. Changing
that key — a re-key after a forget, or the first write of a process with a payload key to
a store kept in plaintext so far — rewrites every row of the agent in the transaction
that holds the agent row (`reseal`), so a store never mixes keys.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Unpack

import numpy as np
import psycopg
from pydantic import ValidationError

from dreamkeeper.client.agent_keys import DataKey
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores import faults
from dreamkeeper.stores.contract.backend import TierOptions
from dreamkeeper.stores.contract.working import WorkingEntry
from dreamkeeper.stores.postgres import change_watch
from dreamkeeper.stores.postgres.change_watch import WORKING_TIER
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.sealing import (
    WORKING,
    WORKING_VECTOR,
    SealBroken,
    Sealing,
    without_key,
)
from dreamkeeper.stores.vectors.vectors import decode_vector, encode_vector
from dreamkeeper.stores.working.working_memory import (
    Segments,
    StoredSegment,
    WorkingMemory,
    check_stored_entry,
)

log = logging.getLogger(__name__)


class PostgresWorkingMemoryStore(WorkingMemory):
    """Working memory in PostgreSQL (this module's docstring): the shared rules over
    `WorkingRows`."""

    def __init__(
        self,
        db: Database,
        agent_id: str,
        *,
        sealing: Sealing | None = None,
        **options: Unpack[TierOptions],
    ) -> None:
        rows = WorkingRows(db, validate_agent_id(agent_id), sealing)
        super().__init__(agent_id, rows, VectorRows(rows), **options)
        self.db = db
        self.sealing = sealing


class WorkingRows:
    """An agent's working memory as rows of `dreamkeeper_working`, sealed with the key
    the agent row names (`stores.working.working_memory.WorkingStorage`): the agent row's
    version is every segment's signature, and its lock every writer's exclusion."""

    def __init__(self, db: Database, agent_id: str, sealing: Sealing | None) -> None:
        self.db = db
        self.agent_id = agent_id
        self.sealing = sealing
        self._version: int | None = None  # the agent's version the copy in memory is at
        self._key_id: str | None = None  # the key its rows are sealed with, as last seen
        self._conn: psycopg.Connection | None = None  # the write transaction, while held
        self._thread_lock = threading.RLock()
        self._watch = change_watch.watch(db)
        self._watch_token: change_watch.Token | None = None  # of the last real load

    # -- sealing -----------------------------------------------------------------------

    def key_of(self, key_id: str | None) -> DataKey | None:
        """The data key named by the agent row (None: the store is in plaintext)."""
        if key_id is None:
            return None
        if self.sealing is None:
            raise without_key(self.db, "no payload key is configured")
        return self.sealing.key(self.agent_id, str(key_id))

    def tier_key(self) -> DataKey | None:
        """The store's key as this instance last read it (a vector cache lookup may miss
        after another process re-keyed: the vector is made again)."""
        with self._thread_lock:
            if self._key_id is None and self._version is None:
                rows = self.db.fetch(
                    "SELECT key_id FROM dreamkeeper_working_agents WHERE agent_id = %s",
                    (self.agent_id,),
                )
                self._key_id = rows[0][0] if rows else None
            return self.key_of(self._key_id)

    def open(self, key_id: str, purpose: str, data: bytes) -> bytes:
        if self.sealing is None:
            raise without_key(self.db, "no payload key is configured")
        return self.sealing.open(self.agent_id, key_id, purpose, data)

    def stored_key(self, tier: DataKey | None, key: str) -> str:
        """A key as its row stores it: in clear, or its tag under the store's key."""
        if tier is None or self.sealing is None:
            return key
        return self.sealing.tag(tier, key)

    def _row(self, tier: DataKey | None, entry: WorkingEntry) -> tuple[object, ...]:
        """(agent, key, expires_at, entry, sealed, segment, key_id) of a row."""
        text = entry.model_dump_json(by_alias=True)
        if tier is None or self.sealing is None:
            return (self.agent_id, entry.key, entry.expires_at, text, None, None, None)
        segment = entry.key.split("/", 1)[0]
        return (
            self.agent_id,
            self.sealing.tag(tier, entry.key),
            entry.expires_at,
            None,
            self.sealing.seal(self.agent_id, tier, WORKING, text.encode("utf-8")),
            self.sealing.tag(tier, segment),
            tier.key_id,
        )

    def _entries_of(self, rows: builtins.list[tuple]) -> tuple[builtins.list[tuple], int]:
        """(stored key, entry or None, raw text) of rows (key, entry, sealed, key_id),
        and how many were malformed (entry None)."""
        out: builtins.list[tuple] = []
        skipped = 0
        for key, text, sealed, key_id in rows:
            raw = text
            try:
                if sealed is not None:
                    raw = self.open(str(key_id), WORKING, bytes(sealed)).decode("utf-8")
                entry = WorkingEntry.model_validate_json(raw or "")
                tier = self.key_of(key_id)
                if self.stored_key(tier, entry.key) != key:
                    raise InvalidInput("the row's key is not its entry's")
            except (ValidationError, InvalidInput, SealBroken, ValueError):
                out.append((key, None, raw))
                skipped += 1
                continue
            out.append((key, entry, raw))
        return out, skipped

    # -- loading -----------------------------------------------------------------------

    def changed(
        self, known: Mapping[str, object], now: datetime
    ) -> dict[str, StoredSegment | None]:
        with self._thread_lock:
            if self._conn is not None:
                return self._load(self._conn, known, now)
            # No round trip while the change watch knows the agent unchanged since the
            # last real load (expiry is applied at read time, so nothing else can change).
            if self._version is not None and self._watch.unchanged(
                WORKING_TIER, self.agent_id, self._watch_token
            ):
                return {}
            token = self._watch.token()
            self._watch_token = None
            with self.db.transaction() as conn:
                changes = self._load(conn, known, now)
            self._watch_token = token
            return changes

    def _load(
        self, conn: psycopg.Connection, known: Mapping[str, object], now: datetime
    ) -> dict[str, StoredSegment | None]:
        """Every segment of the agent, when its version is not the one last loaded."""
        row = conn.execute(
            "SELECT version, key_id FROM dreamkeeper_working_agents WHERE agent_id = %s",
            (self.agent_id,),
        ).fetchone()
        version = 0 if row is None else int(row[0])
        if version == self._version:
            return {}
        self._key_id = None if row is None else row[1]
        by_segment: dict[str, dict[str, WorkingEntry]] = {}
        rows = conn.execute(
            "SELECT key, entry, sealed, key_id FROM dreamkeeper_working "
            "WHERE agent_id = %s AND expires_at > %s",
            (self.agent_id, now),
        ).fetchall()
        found, skipped = self._entries_of(rows)
        for _, entry, _ in found:
            if entry is None:
                continue
            segment = entry.key.split("/", 1)[0]
            try:
                check_stored_entry(entry, segment)
            except InvalidInput:
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
        self._version = version
        changes: dict[str, StoredSegment | None] = dict.fromkeys(known.keys() - by_segment)
        changes.update({name: StoredSegment(version, e) for name, e in by_segment.items()})
        return changes

    # -- writes ------------------------------------------------------------------------

    @contextlib.contextmanager
    def writing(self) -> Iterator[psycopg.Connection]:
        with self._thread_lock:
            try:
                with self.db.transaction() as conn:
                    # The agent's row is every writer's lock until this transaction ends.
                    version, key_id = self._bump(conn)
                    self._conn = conn
                    if self._version is not None and self._version == version - 1:
                        self._version = version  # no one else wrote: the copy is current
                        self._key_id = key_id
                    # else the copy is read again (`changed`) before anything is written
                    if self.sealing is not None and key_id is None:
                        # A store in plaintext so far: sealed now, whole, before this write.
                        self._key_id = reseal(
                            conn, self.db, self.sealing, self.agent_id, bump=False
                        )
                    yield conn
            except BaseException as exc:
                # What was installed in memory may never have committed: read it again.
                self._version = None
                self._watch_token = None
                if isinstance(exc, psycopg.errors.ForeignKeyViolation) and self.sealing:
                    self.sealing.forget_current(self.agent_id)  # a key retired meanwhile
                raise
            else:
                # Committed: another instance of this process must not skip past it while
                # its NOTIFY is on the way.
                self._watch.mark(WORKING_TIER, self.agent_id)
            finally:
                self._conn = None

    def _bump(self, conn: psycopg.Connection) -> tuple[int, str | None]:
        """Raise the agent row's version (its lock is every writer's, to the end of the
        transaction); the new version and the store's key. A new agent row takes the
        agent's current key (asked again if a forget retired the one last seen)."""
        for attempt in range(2):
            offered = None if self.sealing is None else self.sealing.current(self.agent_id).key_id
            # A savepoint, not a nested `transaction()`: this is the transaction's first
            # statement, and that would commit (and let go of the row) at its end.
            if offered is not None:
                conn.execute("SAVEPOINT dreamkeeper_working_bump")
            try:
                row = conn.execute(
                    "INSERT INTO dreamkeeper_working_agents (agent_id, version, key_id) "
                    "VALUES (%s, 1, %s) ON CONFLICT (agent_id) DO UPDATE SET version = "
                    "dreamkeeper_working_agents.version + 1 RETURNING version, key_id",
                    (self.agent_id, offered),
                ).fetchone()
                break
            except psycopg.errors.ForeignKeyViolation:
                if offered is None or attempt:
                    raise
                conn.execute("ROLLBACK TO SAVEPOINT dreamkeeper_working_bump")
                assert self.sealing is not None
                self.sealing.forget_current(self.agent_id)
        assert row is not None
        if row[1] is not None and self.sealing is None:
            raise without_key(self.db, "no payload key is configured")
        return int(row[0]), row[1]

    def _held(self) -> psycopg.Connection:
        """The write transaction: every write step runs inside `writing()`."""
        assert self._conn is not None and self._version is not None, "a write outside writing"
        return self._conn

    def write(
        self, segment: str, entries: dict[str, WorkingEntry], old: Mapping[str, WorkingEntry]
    ) -> object:
        conn = self._held()
        tier = self.key_of(self._key_id)
        if tier is None:
            conn.execute(
                "DELETE FROM dreamkeeper_working WHERE agent_id = %s AND "
                "split_part(key, '/', 1) = %s AND NOT (key = ANY(%s))",
                (self.agent_id, segment, list(entries)),
            )
        else:
            conn.execute(
                "DELETE FROM dreamkeeper_working WHERE agent_id = %s AND segment = %s "
                "AND NOT (key = ANY(%s))",
                (
                    self.agent_id,
                    self.stored_key(tier, segment),
                    [self.stored_key(tier, k) for k in entries],
                ),
            )
        faults.crash_point(faults.ROWS_HALF_WRITTEN)
        changed = [e for k, e in entries.items() if old.get(k) != e]
        if changed:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO dreamkeeper_working (agent_id, key, expires_at, entry, sealed, "
                    "segment, key_id) VALUES (%s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (agent_id, key) DO UPDATE SET expires_at = excluded.expires_at, "
                    "entry = excluded.entry, sealed = excluded.sealed, "
                    "segment = excluded.segment, key_id = excluded.key_id",
                    [self._row(tier, e) for e in changed],
                )
        return self._version

    def sweep(self, now: datetime, live: Segments) -> tuple[int, dict[str, object]]:
        """Delete the expired rows (the version, every segment's signature, stays)."""
        removed = (
            self._held()
            .execute(
                "DELETE FROM dreamkeeper_working WHERE agent_id = %s AND expires_at <= %s",
                (self.agent_id, now),
            )
            .rowcount
        )
        return removed, {}

    def erase_matching(
        self, mentions: Callable[[str], bool], live: Segments
    ) -> tuple[builtins.list[str], dict[str, StoredSegment]]:
        """In the write transaction; a row that does not read is matched on its raw text."""
        conn = self._held()
        rows = conn.execute(
            "SELECT key, entry, sealed, key_id FROM dreamkeeper_working WHERE agent_id = %s",
            (self.agent_id,),
        ).fetchall()
        found, _ = self._entries_of(rows)
        hits: builtins.list[str] = []
        stored: builtins.list[str] = []
        for column, entry, raw in found:
            key = entry.key if entry is not None else str(column)
            value = entry.value if entry is not None else str(raw)  # unreadable: raw text
            if mentions(key) or mentions(value) or mentions(str(raw)):
                hits.append(key)
                stored.append(str(column))
        if not hits:
            return [], {}
        conn.execute(
            "DELETE FROM dreamkeeper_working WHERE agent_id = %s AND key = ANY(%s)",
            (self.agent_id, stored),
        )
        # Made by a process that had an embedding model, whether this one has or not.
        conn.execute(
            "DELETE FROM dreamkeeper_working_vectors WHERE agent_id = %s AND key = ANY(%s)",
            (self.agent_id, stored),
        )
        gone = set(hits)
        rewritten = {
            segment: StoredSegment(
                self._version, {k: e for k, e in entries.items() if k not in gone}
            )
            for segment, entries in live.items()
            if gone & entries.keys()
        }
        return hits, rewritten


class VectorRows:
    """Working-memory vectors as rows of `dreamkeeper_working_vectors`, sealed with the
    store's key (`stores.vectors.working_vectors.VectorStorage`)."""

    def __init__(self, rows: WorkingRows) -> None:
        self.rows = rows
        self.db = rows.db
        self.agent_id = rows.agent_id

    def read(self, key: str, fingerprint: str, model_key: bytes, dim: int) -> np.ndarray | None:
        tier = self.rows.tier_key()
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT vector, key_id FROM dreamkeeper_working_vectors "
                "WHERE agent_id = %s AND key = %s",
                (self.agent_id, self.rows.stored_key(tier, key)),
            ).fetchone()
        if row is None:
            return None
        data = bytes(row[0])
        if row[1] is not None:
            try:
                data = self.rows.open(str(row[1]), WORKING_VECTOR, data)
            except SealBroken:
                return None  # a cache: made again
        return decode_vector(data, fingerprint, model_key, dim)

    def write(self, key: str, vector: np.ndarray, fingerprint: str, model_key: bytes) -> None:
        data = encode_vector(vector, fingerprint, model_key)
        with self.db.transaction() as conn:
            # The store's key, held (a re-key waits) until this row is in.
            row = conn.execute(
                "SELECT key_id FROM dreamkeeper_working_agents WHERE agent_id = %s FOR SHARE",
                (self.agent_id,),
            ).fetchone()
            tier = self.rows.key_of(None if row is None else row[0])
            if tier is not None and self.rows.sealing is not None:
                data = self.rows.sealing.seal(self.agent_id, tier, WORKING_VECTOR, data)
            conn.execute(
                "INSERT INTO dreamkeeper_working_vectors (agent_id, key, vector, key_id) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (agent_id, key) DO UPDATE SET vector = "
                "excluded.vector, key_id = excluded.key_id",
                (
                    self.agent_id,
                    self.rows.stored_key(tier, key),
                    data,
                    None if tier is None else tier.key_id,
                ),
            )

    def remove(self, key: str) -> None:
        tier = self.rows.tier_key()
        with self.db.transaction() as conn:
            conn.execute(
                "DELETE FROM dreamkeeper_working_vectors WHERE agent_id = %s AND key = %s",
                (self.agent_id, self.rows.stored_key(tier, key)),
            )

    def prune(self, live: set[str]) -> int:
        tier = self.rows.tier_key()
        with self.db.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM dreamkeeper_working_vectors "
                "WHERE agent_id = %s AND NOT (key = ANY(%s))",
                (self.agent_id, sorted(self.rows.stored_key(tier, k) for k in live)),
            )
            return cur.rowcount


def reseal(
    conn: psycopg.Connection, db: Database, sealing: Sealing, agent_id: str, *, bump: bool = True
) -> str:
    """Seal every working-memory row and vector of the agent anew with its current data
    key, and name that key in the agent row, in the caller's transaction (which holds, or
    here takes, the agent row: no writer interleaves). Rows sealed with another key, or
    in plaintext, are opened first; a vector whose entry is gone is dropped, and so is a
    sealed row that does not open (a row in plaintext that does not parse stays, as
    readers skip it). Returns the key id."""
    key = sealing.current(agent_id)
    conn.execute(
        "SELECT 1 FROM dreamkeeper_working_agents WHERE agent_id = %s FOR UPDATE", (agent_id,)
    )
    store = WorkingRows(db, agent_id, sealing)
    rows = conn.execute(
        "SELECT key, entry, sealed, key_id FROM dreamkeeper_working WHERE agent_id = %s",
        (agent_id,),
    ).fetchall()
    found, _ = store._entries_of(rows)
    real = {str(column): entry for column, entry, _ in found if entry is not None}
    kept_vectors = _vectors_resealed(conn, store, sealing, key, real)
    conn.execute("DELETE FROM dreamkeeper_working_vectors WHERE agent_id = %s", (agent_id,))
    conn.execute(
        "DELETE FROM dreamkeeper_working WHERE agent_id = %s AND "
        "(key_id IS NOT NULL OR key = ANY(%s))",
        (agent_id, list(real)),
    )
    with conn.cursor() as cur:
        if real:
            cur.executemany(
                "INSERT INTO dreamkeeper_working (agent_id, key, expires_at, entry, sealed, "
                "segment, key_id) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [store._row(key, entry) for entry in real.values()],
            )
        if kept_vectors:
            cur.executemany(
                "INSERT INTO dreamkeeper_working_vectors (agent_id, key, vector, key_id) "
                "VALUES (%s, %s, %s, %s)",
                kept_vectors,
            )
    conn.execute(
        "UPDATE dreamkeeper_working_agents SET key_id = %s"
        + (", version = version + 1" if bump else "")
        + " WHERE agent_id = %s",
        (key.key_id, agent_id),
    )
    return key.key_id


def _vectors_resealed(
    conn: psycopg.Connection,
    store: WorkingRows,
    sealing: Sealing,
    key: DataKey,
    real: dict[str, WorkingEntry],
) -> list[tuple[str, str, bytes, str]]:
    """The rows of the agent's vectors whose entry is still there, opened and sealed anew
    with `key` (a vector whose entry is gone is dropped)."""
    agent_id = store.agent_id
    vectors = conn.execute(
        "SELECT key, vector, key_id FROM dreamkeeper_working_vectors WHERE agent_id = %s",
        (agent_id,),
    ).fetchall()
    kept = []
    for column, data, key_id in vectors:
        entry = real.get(str(column))
        if entry is None:
            continue
        plain = bytes(data) if key_id is None else store.open(str(key_id), WORKING_VECTOR, data)
        kept.append(
            (
                agent_id,
                sealing.tag(key, entry.key),
                sealing.seal(agent_id, key, WORKING_VECTOR, plain),
                key.key_id,
            )
        )
    return kept
