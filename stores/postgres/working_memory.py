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
from collections.abc import Callable, Iterator
from datetime import datetime

import numpy as np
import psycopg
from pydantic import ValidationError

from dreamkeeper.client.agent_keys import DataKey
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import utc_now
from dreamkeeper.stores import faults
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
from dreamkeeper.stores.vectors.embedder import Embedder
from dreamkeeper.stores.vectors.vectors import decode_vector, encode_vector
from dreamkeeper.stores.vectors.working_vectors import WorkingVectorsBase
from dreamkeeper.stores.working.working_memory import WorkingMemoryBase, check_stored_entry

log = logging.getLogger(__name__)


class PostgresWorkingVectors(WorkingVectorsBase):
    def __init__(self, store: PostgresWorkingMemoryStore, client: Embedder) -> None:
        super().__init__(client)
        self.store = store
        self.db = store.db
        self.agent_id = store.agent_id

    def _read_stored(self, key: str, fingerprint: str, dim: int) -> np.ndarray | None:
        tier = self.store.tier_key()
        with self.db.transaction() as conn:
            row = conn.execute(
                "SELECT vector, key_id FROM dreamkeeper_working_vectors "
                "WHERE agent_id = %s AND key = %s",
                (self.agent_id, self.store.stored_key(tier, key)),
            ).fetchone()
        if row is None:
            return None
        data = bytes(row[0])
        if row[1] is not None:
            try:
                data = self.store.open(str(row[1]), WORKING_VECTOR, data)
            except SealBroken:
                return None  # a cache: made again
        return decode_vector(data, fingerprint, self.client.model_key, dim)

    def _write_stored(self, key: str, vector: np.ndarray, fingerprint: str) -> None:
        data = encode_vector(vector, fingerprint, self.client.model_key)
        with self.db.transaction() as conn:
            # The store's key, held (a re-key waits) until this row is in.
            row = conn.execute(
                "SELECT key_id FROM dreamkeeper_working_agents WHERE agent_id = %s FOR SHARE",
                (self.agent_id,),
            ).fetchone()
            tier = self.store.key_of(None if row is None else row[0])
            if tier is not None and self.store.sealing is not None:
                data = self.store.sealing.seal(self.agent_id, tier, WORKING_VECTOR, data)
            conn.execute(
                "INSERT INTO dreamkeeper_working_vectors (agent_id, key, vector, key_id) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (agent_id, key) DO UPDATE SET vector = "
                "excluded.vector, key_id = excluded.key_id",
                (
                    self.agent_id,
                    self.store.stored_key(tier, key),
                    data,
                    None if tier is None else tier.key_id,
                ),
            )

    def _remove_stored(self, key: str) -> None:
        tier = self.store.tier_key()
        with self.db.transaction() as conn:
            conn.execute(
                "DELETE FROM dreamkeeper_working_vectors WHERE agent_id = %s AND key = %s",
                (self.agent_id, self.store.stored_key(tier, key)),
            )

    def _prune_stored(self, live: set[str]) -> int:
        tier = self.store.tier_key()
        with self.db.transaction() as conn:
            cur = conn.execute(
                "DELETE FROM dreamkeeper_working_vectors "
                "WHERE agent_id = %s AND NOT (key = ANY(%s))",
                (self.agent_id, sorted(self.store.stored_key(tier, k) for k in live)),
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
        sealing: Sealing | None = None,
    ) -> None:
        super().__init__(agent_id, clock=clock, embeddings=embeddings, vectors=None)
        self.db = db
        self.sealing = sealing
        if embeddings:
            self._vectors = PostgresWorkingVectors(self, embeddings)
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
        if self._key_id is None and self._version is None:
            self._refresh()
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

    def _refresh(self) -> None:
        with self._thread_lock:
            if self._conn is not None:
                self._load(self._conn)
                return
            # No round trip while the change watch knows the agent unchanged since the
            # last real load (expiry is applied at read time, so nothing else can change).
            if self._version is not None and self._watch.unchanged(
                WORKING_TIER, self.agent_id, self._watch_token
            ):
                return
            token = self._watch.token()
            self._watch_token = None
            with self.db.transaction() as conn:
                self._load(conn)
            self._watch_token = token

    def _load(self, conn: psycopg.Connection) -> None:
        row = conn.execute(
            "SELECT version, key_id FROM dreamkeeper_working_agents WHERE agent_id = %s",
            (self.agent_id,),
        ).fetchone()
        version = 0 if row is None else int(row[0])
        if version == self._version:
            return
        self._key_id = None if row is None else row[1]
        now = self.now()
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
                    version, key_id = self._bump(conn)
                    self._conn = conn
                    if self._version is not None and self._version == version - 1:
                        self._version = version  # no one else wrote: the copy is current
                        self._key_id = key_id
                    else:
                        self._load(conn)
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

    def _write(self, segment: str, entries: dict[str, WorkingEntry]) -> None:
        conn = self._conn
        assert conn is not None and self._version is not None, "_write outside _writing"
        old = self._segments.get(segment)
        old_entries = old.entries if old else {}
        self._forget_vectors(segment, entries)
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
        changed = [e for k, e in entries.items() if old_entries.get(k) != e]
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
                return []
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
            for segment, seg in list(self._segments.items()):
                kept = {k: e for k, e in seg.entries.items() if k not in gone}
                if len(kept) < len(seg.entries):
                    self._install(segment, kept, self._version)
        return hits


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
    store = PostgresWorkingMemoryStore(db, agent_id, sealing=sealing)
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
    store: PostgresWorkingMemoryStore,
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
