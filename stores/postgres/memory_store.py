"""`PostgresMemoryStore`: one agent's long-term memory in PostgreSQL (migration 2).

Tables (`stores.postgres.migrations`), every row keyed by agent:
  dk_memory        an entry: its whole JSON document (`doc`, as `MemoryEntry` dumps it,
                   so new fields pass through) and the columns SQL checks or filters on
                   (revision, category, archived_at, fingerprint, seq of its last change)
  dk_memory_feed   the change feed: one row per write at an increasing per-agent `seq`
                   (action, id, category, fingerprint, revision, op, reason; no content);
                   its old prefix is deleted by `compact_feed`
  dk_memory_agent  the agent's feed counter (`feed_seq`)
  dk_memory_vector an entry's vector, in the file format of `stores.vectors.vectors`
  dk_memory_cache  the index snapshot (`stores.longterm.snapshot`) at a feed seq

Writes. `writing()` takes a session advisory lock keyed by the agent on a pooled
connection and keeps that connection for the whole hold (re-entrant in-process; two
processes, or two instances in one, exclude each other). Every write inside runs on that
connection as one transaction: raise the agent's `feed_seq` (its row lock orders the
commits, so seqs become visible in order, with no gaps), write the entry compare-and-set
(`UPDATE ... WHERE revision = <the one the caller saw>`, an insert that must not find the
id), with the op id inside the document, and append the feed row. A write that finds
the stored revision moved refuses with `Conflict`, and nothing of it commits. If the
database restarts or the connection drops mid-hold, the lock is gone with the session,
but so is the connection every write of the hold must use: nothing more commits on that
view; the caller's retry takes the lock again and catches up first.

Reads. Every instance keeps the entries, the op map and the BM25 index in memory (the
shared `stores.longterm.entry_state.EntryState`) and catches up on every read with one query:
the ids changed after its offset, joined to their current documents (a purged one comes
back without a document and is forgotten). When nothing changed that is one index probe.
A hold catches up when it starts; inside it, only its own writes can change anything, so
`fresh` is the in-memory entry and each write installs what it committed.

Opening. A store that finds a snapshot row loads it (entries stay JSON until read), checks
that the feed row at its seq is the one it was taken after, and catches up from there: a
100k-entry agent opens without tokenizing or parsing its entries. Without one it reads the
table, and writes a snapshot when it holds at least `snapshot.MIN_ENTRIES`.

Compaction. At the end of a hold whose writes crossed a multiple of COMPACT_EVERY seqs
the writer deletes the feed's rows below the last FEED_KEEP and below the cached
snapshot's seq (`compact_feed`). A reader that finds the row after its offset gone
missed rows it can no longer read, and loads again (`catch_up`).

Crash points (`stores.faults`): `TRANSACTION_OPEN` (every statement run, not committed —
a crash rolls it all back), `COMMITTED` (committed, the caller not told: its retry finds
the op applied, or the entry as it wanted it) and `FEED_COMPACTING` (a compaction's
prefix deleted, not committed: the feed stays whole).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from pydantic import ValidationError

from dreamkeeper.client.agent_keys import DataKey
from dreamkeeper.core.errors import Conflict
from dreamkeeper.core.models import MemoryEntry, utc_now
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores import faults
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.contract.feed import JournalAction, JournalRecord
from dreamkeeper.stores.longterm import snapshot
from dreamkeeper.stores.longterm.entry_state import EntryState
from dreamkeeper.stores.longterm.operations import BULK_CHUNK, StoreOperations
from dreamkeeper.stores.longterm.storage import EntryWrite
from dreamkeeper.stores.postgres import change_watch
from dreamkeeper.stores.postgres.change_watch import MEMORY_TIER
from dreamkeeper.stores.postgres.database import POOL_MAX, Database
from dreamkeeper.stores.postgres.documents import PostgresDocuments
from dreamkeeper.stores.postgres.sealing import (
    MEMORY,
    SNAPSHOT,
    VECTOR,
    SealBroken,
    SealedWithoutKey,
    Sealing,
    without_key,
)
from dreamkeeper.stores.vectors.embedder import Embedder
from dreamkeeper.stores.vectors.vectors import (
    EntryVectors,
    VectorIndex,
)

log = logging.getLogger(__name__)

SNAPSHOT_NAME = "index-snapshot"
SNAPSHOT_READ_CHUNK = 4 << 20  # bytes a statement reads of a snapshot row

# One statement (one snapshot, one round trip): the feed's top, the store's epoch and
# whether the row right after the reader's offset is gone (compaction deletes a prefix and
# seqs have no gaps, so a missing next row means compacted past: `compact_feed`; a probe
# of one key, never a walk over the deleted rows' index entries) first, then the ids changed after the reader's offset up to it, with their documents as
# they are now (a purged id has none). When nothing changed it is two index probes.
_CATCH_UP = """
WITH top AS (SELECT feed_seq, epoch FROM dk_memory_agent WHERE agent_id = %(agent)s)
SELECT NULL, feed_seq, epoch::text, NULL::bytea,
    CASE WHEN feed_seq > %(offset)s AND NOT EXISTS (SELECT 1 FROM dk_memory_feed
        WHERE agent_id = %(agent)s AND seq = %(offset)s + 1) THEN 'gap' END FROM top
UNION ALL
SELECT f.id, f.seq, m.doc, m.sealed, m.key_id
FROM (
    SELECT id, max(seq) AS seq FROM dk_memory_feed
    WHERE agent_id = %(agent)s AND seq > %(offset)s AND seq <= (SELECT feed_seq FROM top)
    GROUP BY id
) f
LEFT JOIN LATERAL (
    SELECT doc, sealed, key_id FROM dk_memory WHERE agent_id = %(agent)s AND id = f.id
) m ON true
"""

# Raise the agent's feed counter by %(n)s and return the new top, the store's epoch and
# the data key its rows are sealed with (a store sealed from its first write on, or from
# the first write of a process with a payload key, takes `%(key)s`): the row lock is held
# to the end of the transaction, so commits (and their seqs) are ordered per agent, and a
# re-key (`stores.postgres.rekey`) changes the key under the same lock.
_ALLOCATE = """
INSERT INTO dk_memory_agent AS a (agent_id, feed_seq, key_id) VALUES (%(agent)s, %(n)s, %(key)s)
ON CONFLICT (agent_id) DO UPDATE SET feed_seq = a.feed_seq + EXCLUDED.feed_seq,
    key_id = coalesce(a.key_id, EXCLUDED.key_id)
RETURNING feed_seq, epoch::text, key_id
"""

# Feed compaction (`compact_feed`, docs/storage.md "Compacting the change feed"): the
# writer compacts at the end of a hold whose writes crossed a multiple of COMPACT_EVERY
# seqs, keeping the last FEED_KEEP rows and every row from the cached snapshot's seq on.
COMPACT_EVERY = 1_000
FEED_KEEP = 1_000
# A snapshot this many seqs behind the top is written again by the compacting writer
# (it holds the state caught up), so a large store's feed stays bounded between dreams.
SNAPSHOT_LAG = 10_000

_FEED_COLUMNS = "agent_id, seq, at, action, id, category, fingerprint, rev, op, reason"
_INSERT_FEED = f"INSERT INTO dk_memory_feed ({_FEED_COLUMNS}) VALUES ({', '.join(['%s'] * 10)})"
_ENTRY_COLUMNS = (
    "agent_id, id, revision, category, archived_at, fingerprint, seq, doc, sealed, key_id"
)


def lock_key(agent_id: str) -> int:
    """The agent's advisory lock key (a signed 64-bit number; namespaced so no other
    lock of ours collides with it)."""
    digest = hashlib.sha256(f"dreamkeeper-memory:{agent_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _doc(entry: MemoryEntry) -> str:
    return entry.model_dump_json(by_alias=True)


# A snapshot row of up to COMPRESS_UP_TO bytes: this prefix, the plain snapshot's length
# (uint64 LE) and its zlib stream; a larger one is the plain snapshot (its magic). Sealed
# bytes do not compress, so a row is compressed before it is sealed: a 200-entry agent's
# row is 66.7 KB instead of 247 KB, which matters for a fleet of small agents. A large
# store's row stays plain: inflating a 100k store's 120 MB row left its open 14 MB
# larger in the process (94.6 MB against 80.9 MB, bench/store_memory.py).
_ROW_PREFIX = b"DKZ1"
COMPRESS_UP_TO = 16 * 1_048_576


def _compressed(plain: bytes) -> bytes:
    if len(plain) > COMPRESS_UP_TO:
        return plain
    return _ROW_PREFIX + len(plain).to_bytes(8, "little") + zlib.compress(plain, 1)


def _decompressed(row: bytes | bytearray) -> bytes | bytearray:
    if bytes(row[: len(_ROW_PREFIX)]) != _ROW_PREFIX:
        return row  # a plain snapshot (decode checks its magic)
    head = len(_ROW_PREFIX) + 8
    size = int.from_bytes(row[len(_ROW_PREFIX) : head], "little")
    if size > COMPRESS_UP_TO:
        raise snapshot.Refused("a compressed snapshot row larger than any is written")
    # A little room past the size: a full first buffer would make zlib add a second block
    # and join the two (another copy of the whole snapshot).
    plain = zlib.decompress(memoryview(row)[head:], bufsize=size + 64)
    if len(plain) != size:
        raise snapshot.Refused("a snapshot row of another length than it says")
    return plain


class PostgresEntryStorage:
    """One agent's entry rows, change feed and advisory lock: the PostgreSQL backend's
    steps for the long-term operations (`EntryStorage`). `now` is the store's clock."""

    def __init__(
        self,
        db: Database,
        agent_id: str,
        *,
        now: Callable[[], datetime],
        embeddings: Embedder | None,
        snapshots: bool,
        sealing: Sealing | None,
    ) -> None:
        self.agent_id = validate_agent_id(agent_id)
        self.db = db
        # Seals what is written, opens what is read (`stores.postgres.sealing`); None: no
        # payload key, content in plaintext.
        self.sealing = sealing
        self._now = now
        self.embeddings = embeddings
        self._snapshots = snapshots
        # The entries, the index, the unreadable rows and the feed seq read up to.
        self.state = EntryState(
            vectors=EntryVectors(embeddings.model_key, self._read_vectors) if embeddings else None
        )
        # The store's epoch (docs/storage.md, store epochs) the state held was read at;
        # None: the agent had no counter row then (nothing is held).
        self._epoch: str | None = None
        self._loaded = False
        self.opened_from_snapshot = False
        # An entry removed since the index was built: the index keeps every term it has
        # seen, so a snapshot written from it would carry an erased text's terms.
        self._removed_since_build = False
        # The change watch's token from this instance's last real catch-up (None: none
        # counts): a warm read skips the catch-up while the watch says nothing changed.
        self._watch = change_watch.watch(db)
        self._watch_token: change_watch.Token | None = None
        self._lock_key = lock_key(self.agent_id)
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._holder = 0  # the thread holding the lock
        self._hold: psycopg.Connection | None = None
        # The agent's other documents (dream ledger, cluster state, settings, the
        # conversation log) live in the same database.
        self.documents: AgentDocuments = PostgresDocuments(db, self.agent_id, sealing=sealing)

    @property
    def location(self) -> str:
        return f"{self.db.location} (agent {self.agent_id})"

    def unreadable(self, entry_id: str, category: str | None) -> str | None:
        # A row that cannot be read is still its entry's row: the insert meets it and is
        # refused (`write`), so nothing else needs to say where it is.
        return None

    def changes(self) -> list[JournalRecord]:
        """The change feed as kept, oldest first (read straight from the table): every
        write since the last compaction point (`compact_feed`), not the agent's whole
        history once it has made more than FEED_KEEP writes."""
        with self.db.transaction() as conn:
            rows = conn.execute(
                "SELECT at, action, id, category, fingerprint, reason, rev, op "
                "FROM dk_memory_feed WHERE agent_id = %s ORDER BY seq",
                (self.agent_id,),
            ).fetchall()
        return [
            JournalRecord(
                at=at,
                action=JournalAction(action),
                id=entry_id,
                category=category,
                fingerprint=fingerprint,
                reason=reason,
                rev=rev,
                op=op,
            )
            for at, action, entry_id, category, fingerprint, reason, rev, op in rows
        ]

    @property
    def loaded(self) -> bool:
        return self._loaded

    # -- connections -------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection]:
        """The hold's connection when this thread holds the lock, else a pooled one (its
        statements commit when the block ends)."""
        if self._hold is not None and self._depth > 0 and self._holder == threading.get_ident():
            yield self._hold
            return
        with self.db.transaction() as conn:
            yield conn

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the agent's writer lock (re-entrant): a session advisory lock on the
        connection every write of the hold then uses. The outermost hold catches up."""
        with self._thread_lock:
            if self._depth > 0:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            with self._locked_connection() as conn:
                self._hold, self._holder, self._depth = conn, threading.get_ident(), 1
                try:
                    self.catch_up()
                    began = self.state.offset
                    yield
                    if self.state.offset // COMPACT_EVERY > began // COMPACT_EVERY:
                        self._compact_after_writes()
                finally:
                    self._hold, self._depth = None, 0
                    if not conn.closed and not conn.broken:
                        conn.execute("SELECT pg_advisory_unlock(%s)", (self._lock_key,))

    @contextmanager
    def _locked_connection(self) -> Iterator[psycopg.Connection]:
        """A pooled connection in autocommit holding the agent's advisory lock. A pooled
        connection found dead (a database restart kills every idle one) is discarded and
        the next one tried: a dead session holds no lock, so nothing is held twice."""
        for attempt in range(POOL_MAX + 1):
            with self.db.transaction() as conn:
                try:
                    conn.autocommit = True
                    conn.execute("SELECT pg_advisory_lock(%s)", (self._lock_key,))
                except psycopg.OperationalError:
                    if not conn.broken or attempt == POOL_MAX:
                        raise
                    continue
                try:
                    yield conn
                finally:
                    if not conn.closed and not conn.broken:
                        conn.autocommit = False
                return

    def _fetch(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        """One read statement: on the hold's connection when this thread holds the lock,
        else on an autocommit reader (one round trip)."""
        if self._hold is not None and self._depth > 0 and self._holder == threading.get_ident():
            return self._hold.execute(sql, params).fetchall()
        return self.db.fetch(sql, params)

    def _transaction(self, body: Callable[[psycopg.Connection], Any]) -> Any:
        """Run `body` as one transaction on the hold's connection (the lock is held)."""
        conn = self._hold
        if conn is None or self._depth == 0:
            raise RuntimeError("a write outside writing()")
        for attempt in range(2):
            try:
                with conn.transaction():
                    result = body(conn)
                    faults.crash_point(faults.TRANSACTION_OPEN)
                break
            except psycopg.errors.ForeignKeyViolation:
                # The agent's first row named the data key this process last saw as
                # current, which a forget has retired since: ask again, write again.
                if self.sealing is None or attempt:
                    raise
                self.sealing.forget_current(self.agent_id)
        # Committed: no other instance of this process may skip past it while its NOTIFY
        # is on the way.
        self._watch.mark(MEMORY_TIER, self.agent_id)
        faults.crash_point(faults.COMMITTED)
        return result

    # -- loading and the change feed ---------------------------------------------------

    def reload(self) -> None:
        """Forget everything in memory and read the table again (not the snapshot)."""
        self._full_load(use_snapshot=False)

    def _reset(self) -> None:
        self._removed_since_build = False
        self._watch_token = None
        self.state.clear()
        self._epoch = None
        self.opened_from_snapshot = False

    def _full_load(self, *, use_snapshot: bool = True) -> None:
        self._reset()
        if use_snapshot and self._snapshots and self._load_snapshot():
            self.opened_from_snapshot = True
            self._loaded = True
            self.catch_up()
            return
        with self._connection() as conn:
            # The counter first, the rows after: a row newer than the counter is read
            # again by the catch-up that follows, never missed.
            row = conn.execute(
                "SELECT feed_seq, epoch::text FROM dk_memory_agent WHERE agent_id = %s",
                (self.agent_id,),
            ).fetchone()
            offset = int(row[0]) if row else 0
            self._epoch = str(row[1]) if row else None
            cursor = conn.execute(
                "SELECT id, doc, sealed, key_id FROM dk_memory WHERE agent_id = %s ORDER BY seq",
                (self.agent_id,),
            )
            for entry_id, doc, sealed, key_id in cursor:
                self._install_doc(entry_id, doc, sealed, key_id)
        self.state.offset = offset
        self._loaded = True
        self.catch_up()
        if self._snapshots and len(self.state.entries) >= snapshot.MIN_ENTRIES:
            self.save_snapshot()

    def _install_doc(
        self, entry_id: str, doc: str | None, sealed: bytes | None, key_id: str | None
    ) -> None:
        try:
            if sealed is not None:
                doc = self._open(key_id, MEMORY, sealed).decode("utf-8")
            entry = MemoryEntry.model_validate_json(doc or "")
        except (ValidationError, ValueError) as exc:
            key = Path("dk_memory", self.agent_id, entry_id)
            reason = f"not a memory entry ({str(exc).splitlines()[0][:200]})"
            if self.state.problems.get(key) != reason:
                log.warning("memory store %s: skipped %s (%s)", self.agent_id, key, reason)
            self.state.problems[key] = reason
            self.state.forget(entry_id)
            return
        if self.state.problems:  # (a Path per entry of a full load otherwise)
            self.state.problems.pop(Path("dk_memory", self.agent_id, entry_id), None)
        self.state.install(entry)

    def _open(
        self, key_id: str | None, purpose: str, sealed: bytes | bytearray | memoryview
    ) -> bytes:
        """A value read from a row sealed with the agent's key `key_id`."""
        if self.sealing is None:
            raise without_key(self.db, "no payload key is configured")
        return self.sealing.open(self.agent_id, str(key_id), purpose, sealed)

    def _key(self, key_id: str | None) -> DataKey | None:
        """The data key a write of this agent's rows seals with: the store's (`key_id`,
        from its counter row), None for a store in plaintext."""
        if key_id is None:
            return None
        if self.sealing is None:
            raise without_key(self.db, "no payload key is configured")
        return self.sealing.key(self.agent_id, key_id)

    def catch_up(self) -> None:
        """Load the store on first use; after that, take every write after this
        instance's offset, in one round trip (`_CATCH_UP`); none when the change watch
        knows the agent unchanged since the last one. Inside a hold the round trip is
        always made: a writer's view must be exact."""
        if not self._loaded:
            self._full_load()
            return
        holding = self._hold is not None and self._holder == threading.get_ident()
        if not holding and self._watch.unchanged(MEMORY_TIER, self.agent_id, self._watch_token):
            return
        token = self._watch.token()
        self._watch_token = None  # until this catch-up has applied what it read
        rows = self._fetch(_CATCH_UP, {"agent": self.agent_id, "offset": self.state.offset})
        top, epoch, gap = 0, None, None
        changes = []
        for entry_id, seq, doc, sealed, key_id in rows:
            if entry_id is None:
                top, epoch, gap = int(seq), doc, key_id
            else:
                changes.append((int(seq), entry_id, doc, sealed, key_id))
        if epoch != self._epoch:
            if self._epoch is not None or self.state.offset or self.state.entries:
                # Another store under this agent id: the one held was erased (a whole-
                # agent forget) and perhaps written again, up to any seq. Nothing held
                # belongs to it.
                log.info("memory store %s: the store's epoch changed; reloading", self.agent_id)
                self._full_load(use_snapshot=False)
                return
            self._epoch = epoch  # nothing held: this is the store's first epoch seen
        if top < self.state.offset:
            # The feed is behind what this instance read: another database, or one
            # restored from an older backup. Trust nothing held in memory.
            log.warning(
                "memory store %s: the change feed is at %d, behind this reader's %d; reloading",
                self.agent_id,
                top,
                self.state.offset,
            )
            self._full_load(use_snapshot=False)
            return
        if gap is not None:
            # The rows after this reader's offset were compacted away (`compact_feed`): what
            # changed in between is unknown, so load again — from the snapshot, whose feed
            # row compaction keeps, and the rows after it, else from the table.
            log.info(
                "memory store %s: the feed was compacted past this reader; reloading", self.agent_id
            )
            self._full_load(use_snapshot=True)
            return
        for _, entry_id, doc, sealed, key_id in sorted(changes, key=lambda c: c[0]):
            if doc is None and sealed is None:
                self.state.forget(entry_id)
                self._removed_since_build = True
            else:
                self._install_doc(entry_id, doc, sealed, key_id)
                if self.state.vectors is not None:
                    self.state.vectors.mark(entry_id)  # an EMBEDDED record changes no document
        self.state.offset = max(self.state.offset, top)
        self._watch_token = token

    # -- the index snapshot ------------------------------------------------------------

    def _marks(self, conn: psycopg.Connection, seq: int, epoch: str | None) -> dict[str, str]:
        """What ties a snapshot to the feed it was taken from: the store's epoch and the
        feed row at its seq."""
        row = conn.execute(
            "SELECT id, rev, at FROM dk_memory_feed WHERE agent_id = %s AND seq = %s",
            (self.agent_id, seq),
        ).fetchone()
        return {
            "epoch": epoch or "",
            "seq": str(seq),
            "row": "" if row is None else f"{row[0]}:{row[1]}:{row[2]}",
        }

    def _current_epoch(self, conn: psycopg.Connection) -> str | None:
        row = conn.execute(
            "SELECT epoch::text FROM dk_memory_agent WHERE agent_id = %s", (self.agent_id,)
        ).fetchone()
        return None if row is None else str(row[0])

    def _snapshot_row(self, conn: psycopg.Connection) -> tuple[bytearray, str | None] | None:
        """The snapshot row's bytes and key id, read `SNAPSHOT_READ_CHUNK` bytes a
        statement (the column is stored uncompressed, so a slice reads only its own
        pages). One statement for the whole row grew the pooled connection's libpq input
        buffer to the row's size for the connection's life: 120 MB kept per connection
        that had opened a 100k store. `snapshot.Refused` when the row was rewritten while
        read."""
        head = conn.execute(
            "SELECT seq, key_id, octet_length(data) FROM dk_memory_cache"
            " WHERE agent_id = %s AND name = %s",
            (self.agent_id, SNAPSHOT_NAME),
        ).fetchone()
        if head is None:
            return None
        seq, key_id, length = head
        data = bytearray(length)
        for start in range(0, length, SNAPSHOT_READ_CHUNK):
            part = conn.execute(
                "SELECT seq, substring(data FROM %s FOR %s) FROM dk_memory_cache"
                " WHERE agent_id = %s AND name = %s",
                (start + 1, SNAPSHOT_READ_CHUNK, self.agent_id, SNAPSHOT_NAME),
                binary=True,  # no hex text to decode
            ).fetchone()
            expected = min(SNAPSHOT_READ_CHUNK, length - start)
            if part is None or part[0] != seq or len(part[1]) != expected:
                raise snapshot.Refused("rewritten while it was read")
            data[start : start + expected] = part[1]
        return data, key_id

    def _load_snapshot(self) -> bool:
        with self._connection() as conn:
            try:
                row = self._snapshot_row(conn)
            except snapshot.Refused as exc:
                log.warning("memory store %s: index snapshot not used (%s)", self.agent_id, exc)
                return False
            if row is None:
                return False
            epoch = self._current_epoch(conn)

            def accept(offset: int, marks: object) -> None:
                # The epoch first: a snapshot another store's view wrote (a process that
                # had not seen a whole-agent forget) is never taken, whatever its seq.
                found = self._marks(conn, offset, epoch)
                if found != marks or not found["row"]:
                    # No feed row at its seq (compacted, or never read): nothing ties it
                    # to this feed, and its catch-up would find the feed past it.
                    raise snapshot.Refused("the feed is not the one it was taken from")

            try:
                sealed, key_id = row
                packed = sealed if key_id is None else self._open(key_id, SNAPSHOT, sealed)
                del sealed, row  # the plaintext is what is decoded: one copy less held
                data = _decompressed(packed)
                del packed
                state = snapshot.decode(self.agent_id, data, accept)
            except SealedWithoutKey:
                raise
            except Exception as exc:  # noqa: BLE001 - a cache: anything wrong means "read the table"
                log.warning(
                    "memory store %s: index snapshot not used (%s: %s)",
                    self.agent_id,
                    type(exc).__name__,
                    exc,
                )
                return False
        self.state.adopt(state)
        self._epoch = epoch
        return True

    def _snapshot_state(self) -> EntryState:
        """The state as it is now (caught up), its index free of any erased term."""
        self.catch_up()
        if self._removed_since_build:
            self._rebuild_index()
        return self.state

    def save_snapshot(self) -> bool:
        """Write the index snapshot of the state as it is now (caught up with the feed)
        into the agent's cache row; False when it could not be (logged: only a cache)."""
        state = self._snapshot_state()
        if self._epoch is None:
            return False  # nothing was ever written: nothing to snapshot
        try:
            with self._connection() as conn:
                # Written only while the store is still the one this state was read from
                # (the counter row keeps that epoch to the end of this transaction): a
                # process that has not seen a whole-agent forget yet writes nothing.
                row = conn.execute(
                    "SELECT epoch::text, key_id FROM dk_memory_agent WHERE agent_id = %s "
                    "FOR KEY SHARE",
                    (self.agent_id,),
                ).fetchone()
                if row is None or str(row[0]) != self._epoch:
                    log.info(
                        "memory store %s: index snapshot not written (the store's epoch "
                        "changed since this state was read)",
                        self.agent_id,
                    )
                    return False
                marks = self._marks(conn, self.state.offset, self._epoch)
                if not marks["row"]:
                    return False  # its feed row was compacted meanwhile: useless to anyone
                # Compressed before it is sealed (sealed bytes do not compress): a row is
                # then about a third of the entries' JSON and index it holds.
                data = _compressed(snapshot.encode(self.agent_id, state, marks))
                # Sealed like the rows it quotes: with the store's key, or, for a store
                # still in plaintext, the agent's current one (it is written now).
                key = self._key(row[1])
                if key is None and self.sealing is not None:
                    key = self.sealing.current(self.agent_id)
                if key is not None and self.sealing is not None:
                    data = self.sealing.seal(self.agent_id, key, SNAPSHOT, data)
                conn.execute(
                    "INSERT INTO dk_memory_cache (agent_id, name, seq, data, key_id) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (agent_id, name) "
                    "DO UPDATE SET seq = EXCLUDED.seq, data = EXCLUDED.data, "
                    "key_id = EXCLUDED.key_id WHERE dk_memory_cache.seq <= EXCLUDED.seq",
                    (
                        self.agent_id,
                        SNAPSHOT_NAME,
                        self.state.offset,
                        data,
                        None if key is None else key.key_id,
                    ),
                )
            return True
        except psycopg.Error as exc:
            log.warning("memory store %s: index snapshot not written (%s)", self.agent_id, exc)
            return False

    def compact_feed(self) -> int:
        """Delete the change feed's rows no reader needs (docs/storage.md, "Compacting the
        change feed"): every row below the last FEED_KEEP and below the cached snapshot's
        seq (its row ties the snapshot to the feed; the rows after it are a cold open's
        catch-up). A snapshot SNAPSHOT_LAG behind is written again first. Returns how many
        rows went. One transaction deleting a prefix: a crash leaves the feed whole, and
        a reader behind the new lowest seq sees the gap and loads again (`catch_up`)."""
        with self.writing():
            conn = self._hold
            assert conn is not None
            cached = self._cached_seq(conn)
            if (
                cached is not None
                and self.state.offset - cached > SNAPSHOT_LAG
                and self.save_snapshot()
            ):
                cached = self._cached_seq(conn)
            # Keep seqs >= point, and always the top: an empty feed would hide from a
            # reader that rows it never read are gone.
            point = min(self.state.offset - FEED_KEEP + 1, self.state.offset)
            if cached is not None:
                point = min(point, cached)
            if point <= 1:
                return 0
            with conn.transaction():
                deleted = conn.execute(
                    "DELETE FROM dk_memory_feed WHERE agent_id = %s AND seq < %s",
                    (self.agent_id, point),
                ).rowcount
                faults.crash_point(faults.FEED_COMPACTING)
        if deleted:
            log.debug("memory store %s: %d feed rows compacted", self.agent_id, deleted)
        return deleted

    def _compact_after_writes(self) -> None:
        """Compact once a hold's writes crossed a multiple of COMPACT_EVERY. The writes
        committed already: a database error here is logged, never the caller's failure
        (the next crossing compacts)."""
        try:
            self.compact_feed()
        except psycopg.Error as exc:
            log.warning("memory store %s: feed not compacted (%s)", self.agent_id, exc)

    def _cached_seq(self, conn: psycopg.Connection) -> int | None:
        row = conn.execute(
            "SELECT seq FROM dk_memory_cache WHERE agent_id = %s AND name = %s",
            (self.agent_id, SNAPSHOT_NAME),
        ).fetchone()
        return None if row is None else int(row[0])

    # -- reads -------------------------------------------------------------------------

    def problems(self) -> dict[Path, str]:
        """Rows whose document could not be read as an entry, with the reason."""
        self.catch_up()
        return dict(self.state.problems)

    def _read_vectors(self, ids: list[str]) -> Mapping[str, bytes]:
        found: dict[str, bytes] = {}
        with self._connection() as conn:
            for start in range(0, len(ids), 10_000):
                for entry_id, data, key_id in conn.execute(
                    "SELECT id, data, key_id FROM dk_memory_vector "
                    "WHERE agent_id = %s AND id = ANY(%s)",
                    (self.agent_id, ids[start : start + 10_000]),
                ):
                    if key_id is None:
                        found[entry_id] = bytes(data)
                        continue
                    try:
                        found[entry_id] = self._open(key_id, VECTOR, data)
                    except SealBroken as exc:
                        log.warning(
                            "memory store %s: vector %s skipped (%s)", self.agent_id, entry_id, exc
                        )
        return found

    def vector_index(self, dim: int) -> VectorIndex:
        """The in-memory vectors of `dim` components (current with the feed)."""
        assert self.state.vectors is not None
        return self.state.vectors.index(dim, lambda: self.state.entries)

    def unembedded(self) -> int:
        """How many live entries have no stored vector (the backfill's backlog)."""
        with self._connection() as conn:
            row = conn.execute(
                "SELECT count(*) FROM dk_memory m WHERE m.agent_id = %s "
                "AND m.archived_at IS NULL AND NOT EXISTS (SELECT 1 FROM dk_memory_vector v "
                "WHERE v.agent_id = m.agent_id AND v.id = m.id)",
                (self.agent_id,),
            ).fetchone()
        return int(row[0]) if row else 0

    def vector_bytes(self, entry_id: str) -> bytes | None:
        return self._read_vectors([entry_id]).get(entry_id)

    # -- the write primitives ----------------------------------------------------------

    def fresh(self, entry_id: str) -> MemoryEntry | None:
        # The hold caught up when it began, and only its own writes (installed as they
        # commit) can have happened since; each write still compares revisions in SQL.
        return self.state.entries.get(entry_id)

    def _feed_row(
        self,
        seq: int,
        action: JournalAction,
        entry_id: str,
        entry: MemoryEntry | None,
        key: DataKey | None,
        *,
        rev: int | None,
        reason: str | None = None,
        op: str | None = None,
    ) -> tuple[Any, ...]:
        # A sealed store's feed carries no category and no fingerprint: a category is
        # chosen text, and a fingerprint of a short text can be confirmed by guessing.
        shown = entry if key is None else None
        return (
            self.agent_id,
            seq,
            self._now(),
            str(action),
            entry_id,
            shown.category if shown else None,
            shown.fingerprint if shown else None,
            rev,
            op,
            reason,
        )

    def _entry_row(self, entry: MemoryEntry, seq: int, key: DataKey | None) -> tuple[Any, ...]:
        if key is None or self.sealing is None:
            return (
                self.agent_id,
                entry.id,
                entry.revision,
                entry.category,
                entry.archived_at,
                entry.fingerprint,
                seq,
                _doc(entry),
                None,
                None,
            )
        sealed = self.sealing.seal(self.agent_id, key, MEMORY, _doc(entry).encode("utf-8"))
        return (
            self.agent_id,
            entry.id,
            entry.revision,
            None,
            entry.archived_at,
            None,
            seq,
            None,
            sealed,
            key.key_id,
        )

    def _allocate(self, conn: psycopg.Connection, n: int) -> tuple[int, DataKey | None]:
        """Raise the feed counter by `n`: the first seq of the `n` taken, and the data key
        the store's rows are sealed with (None: plaintext). Refused (`Conflict`, the
        transaction rolls back) when the store is not the one this view was read from: a
        write must never land its view of an erased agent in a new one."""
        offered = None if self.sealing is None else self.sealing.current(self.agent_id).key_id
        row = conn.execute(_ALLOCATE, {"agent": self.agent_id, "n": n, "key": offered}).fetchone()
        assert row is not None
        top, epoch = int(row[0]), str(row[1])
        if epoch != self._epoch and (self._epoch is not None or top != n):
            self._loaded = False  # the next hold loads the store as it is now
            raise Conflict(
                f"the memory store of agent {self.agent_id} was erased and made again "
                "since this view was read; nothing written"
            )
        self._epoch = epoch
        return top - n + 1, self._key(row[2])

    def write(self, change: EntryWrite) -> MemoryEntry:
        """The entry's row and its feed row in one transaction, refusing if the row is
        not at the write's base revision any more (an insert: if there is one)."""
        entry, base = change.entry, change.base

        def body(conn: psycopg.Connection) -> int:
            seq, key = self._allocate(conn, 1)
            row = self._entry_row(entry, seq, key)
            if base is None:
                cursor = conn.execute(
                    f"INSERT INTO dk_memory ({_ENTRY_COLUMNS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    row,
                )
            else:
                cursor = conn.execute(
                    "UPDATE dk_memory SET revision = %s, category = %s, archived_at = %s, "
                    "fingerprint = %s, seq = %s, doc = %s, sealed = %s, key_id = %s "
                    "WHERE agent_id = %s AND id = %s AND revision = %s",
                    (*row[2:], self.agent_id, entry.id, base.revision),
                )
            if cursor.rowcount != 1:
                raise Conflict(
                    f"memory {entry.id} changed since it was read (expected revision "
                    f"{base.revision if base else 'none'}); not overwriting newer state"
                )
            feed = self._feed_row(
                seq,
                change.action,
                entry.id,
                entry,
                key,
                rev=entry.revision,
                op=change.op,
                reason=change.reason,
            )
            conn.execute(_INSERT_FEED, feed)
            return seq

        seq = self._transaction(body)
        self.state.install(entry)
        self.state.offset = max(self.state.offset, seq)
        return entry

    def insert_batch(self, entries: list[MemoryEntry], reason: str | None) -> None:
        """New entries (revision 1) in one transaction: COPY into the table and the feed."""

        def body(conn: psycopg.Connection) -> int:
            first, key = self._allocate(conn, len(entries))
            with conn.cursor() as cursor:
                with cursor.copy(f"COPY dk_memory ({_ENTRY_COLUMNS}) FROM STDIN") as copy:
                    for number, entry in enumerate(entries):
                        copy.write_row(self._entry_row(entry, first + number, key))
                with cursor.copy(f"COPY dk_memory_feed ({_FEED_COLUMNS}) FROM STDIN") as copy:
                    for number, entry in enumerate(entries):
                        copy.write_row(
                            self._feed_row(
                                first + number,
                                JournalAction.CREATED,
                                entry.id,
                                entry,
                                key,
                                reason=reason,
                                rev=entry.revision,
                                op=None,
                            )
                        )
            return first + len(entries) - 1

        try:
            top = self._transaction(body)
        except psycopg.errors.UniqueViolation:
            raise Conflict("an entry of the batch was created meanwhile; nothing written") from None
        for entry in entries:
            self.state.install(entry)
        self.state.offset = max(self.state.offset, top)

    def delete(
        self,
        doomed: list[MemoryEntry],
        on_progress: Callable[[int, int], None] | None,
    ) -> None:
        """Delete purged entries and their vectors, a chunk per transaction, each with its
        feed rows; only rows still at the revision the purge selected go."""
        done = 0
        for start in range(0, len(doomed), BULK_CHUNK):
            chunk = doomed[start : start + BULK_CHUNK]

            def body(conn: psycopg.Connection, chunk: list[MemoryEntry] = chunk) -> int:
                first, key = self._allocate(conn, len(chunk))
                cursor = conn.execute(
                    "DELETE FROM dk_memory m USING unnest(%s::text[], %s::int[]) AS d(id, rev) "
                    "WHERE m.agent_id = %s AND m.id = d.id AND m.revision = d.rev "
                    "AND m.archived_at IS NOT NULL",
                    ([e.id for e in chunk], [e.revision for e in chunk], self.agent_id),
                )
                if cursor.rowcount != len(chunk):
                    raise Conflict("an entry to purge changed since it was selected")
                conn.execute(
                    "DELETE FROM dk_memory_vector WHERE agent_id = %s AND id = ANY(%s)",
                    (self.agent_id, [e.id for e in chunk]),
                )
                with (
                    conn.cursor() as cur,
                    cur.copy(f"COPY dk_memory_feed ({_FEED_COLUMNS}) FROM STDIN") as copy,
                ):
                    for number, entry in enumerate(chunk):
                        copy.write_row(
                            self._feed_row(
                                first + number,
                                JournalAction.PURGED,
                                entry.id,
                                entry,
                                key,
                                reason=entry.archive_reason,
                                rev=entry.revision + 1,
                                op=None,
                            )
                        )
                return first + len(chunk) - 1

            top = self._transaction(body)
            self.state.offset = max(self.state.offset, top)
            for entry in chunk:
                self.state.forget(entry.id)
                done += 1
                if on_progress is not None:
                    on_progress(done, len(doomed))

    def erase(self, doomed: list[MemoryEntry], reason: str) -> None:
        """One transaction deletes the rows, their vectors and the agent's index snapshot
        (it quotes every entry) and writes content-free feed rows (ids and `reason`)."""
        if not doomed:
            return
        ids = [e.id for e in doomed]

        def body(conn: psycopg.Connection) -> int:
            first, _ = self._allocate(conn, len(doomed))
            conn.execute(
                "DELETE FROM dk_memory WHERE agent_id = %s AND id = ANY(%s)", (self.agent_id, ids)
            )
            conn.execute(
                "DELETE FROM dk_memory_vector WHERE agent_id = %s AND id = ANY(%s)",
                (self.agent_id, ids),
            )
            conn.execute("DELETE FROM dk_memory_cache WHERE agent_id = %s", (self.agent_id,))
            for number, entry in enumerate(doomed):
                purged, rev = JournalAction.PURGED, entry.revision + 1
                row = self._feed_row(
                    first + number, purged, entry.id, None, None, rev=rev, reason=reason
                )
                conn.execute(_INSERT_FEED, row)
            faults.crash_point(faults.ERASE_JOURNALED)
            return first + len(doomed) - 1

        top = self._transaction(body)
        self.state.offset = max(self.state.offset, top)
        for entry in doomed:
            self.state.forget(entry.id)
        self._rebuild_index()

    def _rebuild_index(self) -> None:
        """The index rebuilt without the erased text's terms (`EntryState.reindex`)."""
        self.state.reindex()
        self._removed_since_build = False

    def store_vector(self, entry: MemoryEntry, data: bytes) -> bool:
        """The vector row (sealed with the store's key) and its feed row, only while the
        entry's row is still at the revision its fingerprint was checked on (a sealed row
        does not show its fingerprint to SQL; a new revision is the only way content
        changes)."""
        assert self.state.vectors is not None

        def body(conn: psycopg.Connection) -> int | None:
            still = conn.execute(
                "SELECT 1 FROM dk_memory WHERE agent_id = %s AND id = %s "
                "AND revision = %s FOR SHARE",
                (self.agent_id, entry.id, entry.revision),
            ).fetchone()
            if still is None:
                return None
            seq, key = self._allocate(conn, 1)
            stored = data
            if key is not None and self.sealing is not None:
                stored = self.sealing.seal(self.agent_id, key, VECTOR, data)
            conn.execute(
                "INSERT INTO dk_memory_vector (agent_id, id, data, key_id) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (agent_id, id) "
                "DO UPDATE SET data = EXCLUDED.data, key_id = EXCLUDED.key_id",
                (self.agent_id, entry.id, stored, None if key is None else key.key_id),
            )
            embedded = JournalAction.EMBEDDED
            conn.execute(
                _INSERT_FEED,
                self._feed_row(seq, embedded, entry.id, entry, key, rev=entry.revision),
            )
            return seq

        seq = self._transaction(body)
        if seq is None:
            return False
        self.state.vectors.mark(entry.id)
        self.state.offset = max(self.state.offset, seq)
        return True


class PostgresMemoryStore(StoreOperations):
    """One agent's long-term memory in PostgreSQL: the shared operations over its
    `PostgresEntryStorage` (the module docstring has the tables and the protocol)."""

    storage: PostgresEntryStorage

    def __init__(
        self,
        db: Database,
        agent_id: str,
        *,
        clock: Callable[[], datetime] = utc_now,
        embeddings: Embedder | None = None,
        snapshots: bool = True,
        sealing: Sealing | None = None,
    ) -> None:
        storage = PostgresEntryStorage(
            db, agent_id, now=self.now, embeddings=embeddings, snapshots=snapshots, sealing=sealing
        )
        super().__init__(storage, clock=clock)
        self.db, self.sealing = db, sealing

    @property
    def location(self) -> str:
        return self.storage.location

    def compact_feed(self) -> int:
        """Delete the feed rows no reader needs (`PostgresEntryStorage.compact_feed`)."""
        return self.storage.compact_feed()
