"""`forget` on the PostgreSQL backend (`stores.forget`): the same request, steps and
receipt; what differs is where things are. The journal is the table
`dreamkeeper_forget_journal` (ids only), one forget at a time is an advisory lock, the
index snapshot and vectors are rows, and the verification scans every row the database
keeps for the agent (documents, entries, the change feed, caches, working memory,
conversation turns) for the forgotten text's bytes, raw and, where sealed, opened.

A DELETE leaves the row in the database's files (dead tuples until VACUUM, the WAL, base
backups, replicas). With a payload key, content is sealed at rest with the agent's data
key (`stores.postgres.sealing`), so the forget then makes those copies unreadable: it
re-keys the agent (`stores.postgres.rekey`: its remaining rows sealed anew, the old key
destroyed) or, for the whole agent, deletes its rows and keys in one transaction; and it
rotates the key-encryption key (`stores.postgres.keyring`), so the destroyed key's
wrapped copies need a key that exists nowhere. The receipt says what was checked and
what is left to the operator (docs/operations.md, forgetting).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Literal

import psycopg

from dreamkeeper.core.forgetting import ForgetReceipt, Removal, Verification
from dreamkeeper.core.models import utc_now
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.contract.forgetting import AgentStores, HistoryKeys
from dreamkeeper.stores.forget import (
    MAX_JOURNAL_BYTES,
    Forgetting,
    destroy_history_keys,
    exported_files,
)
from dreamkeeper.stores.postgres import change_watch
from dreamkeeper.stores.postgres.agent_keys import destroy_keys
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.documents import PostgresDocuments
from dreamkeeper.stores.postgres.keyring import Rotation
from dreamkeeper.stores.postgres.memory_store import lock_key
from dreamkeeper.stores.postgres.rekey import rekey_agent
from dreamkeeper.stores.postgres.sealing import (
    DOCUMENT,
    MEMORY,
    SNAPSHOT,
    TURN,
    VECTOR,
    WORKING,
    WORKING_VECTOR,
    SealBroken,
    Sealing,
)

# One forget at a time per database (pg_advisory_lock's key space is shared: a constant
# no other lock of Dreamkeeper's uses).
FORGET_LOCK = 0x646B_666F_7267_6574  # "dkforget"
DELETE_ATTEMPTS = 5

# Every table holding an agent's data, with the columns that can carry its text, and the
# column sealed with the agent's data key (what it seals), if any.
AGENT_TABLES: tuple[tuple[str, tuple[str, ...], tuple[str, str] | None], ...] = (
    ("dk_memory", ("id", "doc"), ("sealed", MEMORY)),
    ("dk_memory_feed", ("id", "reason", "op", "category"), None),
    ("dk_memory_vector", ("id",), ("data", VECTOR)),
    ("dk_memory_cache", ("name",), ("data", SNAPSHOT)),
    ("dreamkeeper_documents", ("name",), ("data", DOCUMENT)),
    ("dreamkeeper_working", ("key", "entry"), ("sealed", WORKING)),
    ("dreamkeeper_working_vectors", ("key",), ("vector", WORKING_VECTOR)),
    ("dreamkeeper_conversation_turns", ("session_id", "turn"), ("sealed", TURN)),
    ("dreamkeeper_conversation_sessions", ("session_id",), None),
    ("dreamkeeper_working_agents", (), None),
    ("dk_memory_agent", (), None),
)
# The tables whose rows are sealed with a key that must exist: a value in plaintext has
# no key; a sealed one names it.
_SEALED_TABLES = [t for t, _, sealed in AGENT_TABLES if sealed is not None]

AT_REST = (
    "PostgreSQL keeps deleted rows as dead tuples until VACUUM, in its WAL until the "
    "segments are recycled, and in WAL archives, base backups and replicas: what this "
    "forget deleted is there sealed with a destroyed data key, whose wrapped copies need "
    "a key-encryption key that no longer exists. Age out WAL archives, base backups and "
    "keyring backups taken before this forget on their retention schedule: a database "
    "backup together with a keyring backup of the same time can still be read"
)
NOT_SEALED = (
    "memory content is not sealed at rest on this database (no payload key): the "
    "database may still hold the forgotten text in dead tuples until VACUUM, in its WAL "
    "until the segments are recycled, and in WAL archives, base backups and replicas, "
    "until the operator ages them out (docs/operations.md, forgetting)"
)
PLAINTEXT_BEFORE = (
    "rows of this agent were written in plaintext before a payload key sealed this "
    "database: the forgotten text may remain in dead tuples until VACUUM, in the WAL until "
    "recycled, and in base backups and replicas; run VACUUM on the agent's tables and a "
    "CHECKPOINT, and age out backups (docs/operations.md, forgetting)"
)
UNDER_PAYLOAD_KEY = (
    "a data key of this agent was once wrapped by the payload key itself (made before "
    "key-encryption keys, or carried in by `dreamkeeper migrate`): copies so wrapped may "
    "remain in dead tuples and the WAL; run VACUUM on dreamkeeper_agent_keys and a "
    "CHECKPOINT, and age out backups, or retire that payload key once no history needs it"
)


class PostgresForgetSteps:
    """The steps of a forget on one database (`ForgetSteps`); `sealing` when content is
    sealed at rest."""

    entries_name = "entry rows"
    cache_name = "cache row"
    scanned: Literal["files", "rows"] = "rows"

    def __init__(
        self,
        db: Database,
        open_stores: Callable[[str], AgentStores],
        *,
        history_keys: HistoryKeys | None = None,
        sealing: Sealing | None = None,
    ) -> None:
        self.db = db
        self.open_stores = open_stores
        self.sealing = sealing
        self.history_keys = sealing.keys if sealing is not None else history_keys

    def hold(self) -> AbstractContextManager[object]:
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

    def note(self, record: dict[str, object]) -> None:
        line = json.dumps({**record, "at": utc_now().isoformat()}, separators=(",", ":"))
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO dreamkeeper_forget_journal (request, record) VALUES (%s, %s)",
                (str(record["request"]), line),
            )

    def journal_lines(self) -> list[bytes]:
        rows = self.db.fetch(
            "SELECT record FROM dreamkeeper_forget_journal WHERE length(record) <= %s ORDER BY seq",
            (MAX_JOURNAL_BYTES,),
        )
        return [str(r[0]).encode("utf-8") for r in rows]

    def place(self, agent_id: str, name: str) -> str:
        return f"{self.db.location} (agent {agent_id}): {name}"

    def vector_count(self, agent_id: str, ids: list[str]) -> int:
        rows = self.db.fetch(
            "SELECT count(*) FROM dk_memory_vector WHERE agent_id = %s AND id = ANY(%s)",
            (agent_id, ids),
        )
        return int(rows[0][0])

    def drop_vector(self, agent_id: str, entry_id: str) -> bool:
        with self.db.transaction() as conn:
            return (
                conn.execute(
                    "DELETE FROM dk_memory_vector WHERE agent_id = %s AND id = %s",
                    (agent_id, entry_id),
                ).rowcount
                > 0
            )

    def caches(self, agent_id: str) -> list[str]:
        rows = self.db.fetch(
            "SELECT name FROM dk_memory_cache WHERE agent_id = %s ORDER BY name", (agent_id,)
        )
        return [self.place(agent_id, f"dk_memory_cache/{r[0]}") for r in rows]

    def inventory(self, agent_id: str) -> list[Removal]:
        removed = []
        for table, _, _ in AGENT_TABLES:
            rows = self.db.fetch(
                f"SELECT count(*) FROM {table} WHERE agent_id = %s",  # noqa: S608
                (agent_id,),
            )
            if int(rows[0][0]):
                removed.append(
                    Removal(place=self.place(agent_id, table), what="rows", count=int(rows[0][0]))
                )
        return removed

    def raw_scan(self, stores: AgentStores, needles: list[bytes], result: Verification) -> None:
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
        """Every row of the agent, as bytes, lower-cased, and its sealed value opened:
        one place per table that has a row carrying the text (`files_scanned` counts the
        rows read)."""
        for table, columns, sealed in AGENT_TABLES:
            if not columns and sealed is None:
                continue
            cast = [f"convert_to(coalesce({c}::text, ''), 'UTF8')" for c in columns]
            if sealed is not None:
                cast += [f"coalesce({sealed[0]}, ''::bytea)", "key_id"]
            rows = self.db.fetch(
                f"SELECT {', '.join(cast)} FROM {table} WHERE agent_id = %s",  # noqa: S608
                (agent_id,),
            )
            hit = False
            for row in rows:
                result.files_scanned += 1
                values = [bytes(v) for v in row[: len(columns)]]
                if sealed is not None:
                    value, key_id = bytes(row[-2]), row[-1]
                    values.append(value)
                    if key_id is not None:
                        values.append(self._opened(agent_id, str(key_id), sealed[1], value, table))
                data = b"\0".join(values).lower()
                hit = hit or any(n in data for n in needles)
            if hit:
                result.files_containing.append(self.place(agent_id, table))

    def _opened(self, agent_id: str, key_id: str, purpose: str, value: bytes, table: str) -> bytes:
        if self.sealing is None:
            return b""  # (a keyless process never gets here: sealing_for refuses it)
        try:
            return self.sealing.open(agent_id, key_id, purpose, value)
        except SealBroken:
            return b""  # unreadable by anyone: nothing to find

    def agent_documents(self, agent_id: str) -> AgentDocuments:
        return PostgresDocuments(self.db, agent_id, sealing=self.sealing)

    def _delete_rows(self, agent_id: str, *, keys: bool) -> list[str]:
        """Every row of the agent in one transaction (and, with `keys`, its data keys,
        listed as destroyed: their rows are gone in the same transaction, so the foreign
        keys from sealed rows hold); the destroyed key ids."""
        for attempt in range(DELETE_ATTEMPTS):
            try:
                with self.db.transaction() as conn:
                    # The agent's long-term writer lock, to the end of this transaction: no
                    # write of a hold that read the store before lands between these deletes.
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(agent_id),))
                    for table, _, _ in AGENT_TABLES:
                        conn.execute(f"DELETE FROM {table} WHERE agent_id = %s", (agent_id,))  # noqa: S608
                    destroyed = destroy_keys(conn, agent_id) if keys else []
                # Committed: nothing of this process may answer from before the forget
                # while its NOTIFY is still on the way (a warm read, `has_agent`).
                watch = change_watch.watch(self.db)
                for tier in change_watch.TIERS:
                    watch.mark(tier, agent_id)
                return destroyed
            except psycopg.errors.ForeignKeyViolation:
                # A row of another tier (a document, a turn) sealed with the key committed
                # after its table was emptied here: nothing was deleted; delete again.
                if attempt == DELETE_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def agent_left(self, agent_id: str) -> list[str]:
        return [r.place for r in self.inventory(agent_id)]

    # -- keys and what is left ---------------------------------------------------------------

    def seal_state(self) -> bool | None:
        return self.sealing is not None

    def left_to_operator(self, agent_id: str) -> list[str]:
        if self.sealing is None:
            return [NOT_SEALED]
        notes = [AT_REST]
        plaintext = any(
            self.db.fetch(
                f"SELECT 1 FROM {table} WHERE agent_id = %s AND key_id IS NULL LIMIT 1",  # noqa: S608
                (agent_id,),
            )
            for table in _SEALED_TABLES
        )
        if plaintext:
            notes.append(PLAINTEXT_BEFORE)
        if self.sealing.keys.ever_under_payload_key(agent_id):
            notes.append(UNDER_PAYLOAD_KEY)
        return notes

    def retire_keys(self, agent_id: str, receipt: ForgetReceipt) -> int:
        if self.sealing is None:
            return destroy_history_keys(self.history_keys, agent_id)
        rekey = rekey_agent(self.db, self.sealing, agent_id)
        checks = receipt.verification
        left = sum(
            int(
                self.db.fetch(
                    f"SELECT count(*) FROM {table} WHERE agent_id = %s "  # noqa: S608
                    "AND key_id IS DISTINCT FROM %s",
                    (agent_id, rekey.key_id),
                )[0][0]
            )
            for table in _SEALED_TABLES
        )
        if left:
            checks.failed.append(f"{left} row(s) of the agent are not sealed with its new key")
        else:
            checks.checked.append(
                f"every remaining row of the agent is sealed with its new data key "
                f"{rekey.key_id} ({rekey.resealed} sealed anew)"
            )
        self._check_destroyed(agent_id, rekey.retired, rekey.key_id, receipt)
        self._rotate(receipt)
        return len(rekey.retired)

    def destroy_keys_first(self, agent_id: str) -> int:
        if self.sealing is None:
            return destroy_history_keys(self.history_keys, agent_id)
        return 0  # sealed rows need their key until they go: both in one transaction

    def erase_agent(self, agent_id: str, receipt: ForgetReceipt) -> int:
        if self.sealing is None:
            self._delete_rows(agent_id, keys=False)
            return 0  # the data keys went first (destroy_keys_first)
        destroyed = self._delete_rows(agent_id, keys=True)
        self.sealing.drop(agent_id)
        self._check_destroyed(agent_id, destroyed, None, receipt)
        self._rotate(receipt)
        return len(destroyed)

    def _check_destroyed(
        self, agent_id: str, destroyed: list[str], keep: str | None, receipt: ForgetReceipt
    ) -> None:
        """That the agent has no data key but `keep`, and the destroyed ones are listed."""
        others = self.db.fetch(
            "SELECT key_id FROM dreamkeeper_agent_keys WHERE agent_id = %s AND key_id "
            "IS DISTINCT FROM %s",
            (agent_id, keep),
        )
        listed = {
            str(r[0])
            for r in self.db.fetch(
                "SELECT key_id FROM dreamkeeper_destroyed_keys WHERE key_id = ANY(%s)",
                (destroyed,),
            )
        }
        checks = receipt.verification
        if others or listed != set(destroyed):
            checks.failed.append("the agent's old data keys are not all destroyed")
        elif destroyed:
            checks.checked.append(
                f"data key(s) {', '.join(sorted(destroyed))} deleted from "
                "dreamkeeper_agent_keys and listed as destroyed"
            )

    def _rotate(self, receipt: ForgetReceipt) -> Rotation:
        """Rotate the key-encryption key and check the key chain afterwards."""
        assert self.sealing is not None
        keyring = self.sealing.keys.keyring
        rotation = keyring.rotate()
        receipt.removed.append(
            Removal(
                place=f"keyring {rotation.path}",
                what="retired key-encryption keys",
                count=len(rotation.retired),
            )
        )
        listed = [str(r[0]) for r in self.db.fetch("SELECT kek_id FROM dreamkeeper_keks")]
        stray = self.db.fetch(
            "SELECT count(*) FROM dreamkeeper_agent_keys WHERE kek_id IS DISTINCT FROM %s",
            (rotation.new,),
        )[0][0]
        held = keyring.held()
        checks = receipt.verification
        if listed != [rotation.new] or held != [rotation.new] or stray:
            checks.failed.append(
                "the key chain did not rotate cleanly: key-encryption keys listed "
                f"{sorted(listed)}, in the keyring {held}, data keys not under the new one {stray}"
            )
        else:
            checks.checked.append(
                f"key-encryption key(s) {', '.join(rotation.retired) or 'none'} delisted and "
                f"erased from the keyring {rotation.path}; every surviving data key "
                f"({rotation.rewrapped}) is wrapped by the new one, {rotation.new}"
            )
        return rotation


def _signed(key: int) -> int:
    return key - (1 << 64) if key >= 1 << 63 else key


def postgres_stores(db: Database, sealing: Sealing | None = None) -> Callable[[str], AgentStores]:
    """Open an agent's three PostgreSQL stores (no embedding model: erasure and its
    verification need none)."""
    from dreamkeeper.stores.postgres.conversation_memory import PostgresConversationStore
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
    from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore

    def open_stores(agent_id: str) -> AgentStores:
        return AgentStores(
            memory=PostgresMemoryStore(db, agent_id, sealing=sealing),
            working=PostgresWorkingMemoryStore(db, agent_id, sealing=sealing),
            conversation=PostgresConversationStore(db, agent_id, sealing=sealing),
        )

    return open_stores


def postgres_forgetting(
    db: Database,
    open_stores: Callable[[str], AgentStores] | None = None,
    *,
    sealing: Sealing | None = None,
    history_keys: HistoryKeys | None = None,
) -> Forgetting:
    """The forgetting of one database, on `open_stores` (default: its own stores, sealed
    with `sealing`). Sealed at rest, the sealing's data keys are the ones destroyed."""
    stores = open_stores or postgres_stores(db, sealing)
    steps = PostgresForgetSteps(db, stores, sealing=sealing, history_keys=history_keys)
    return Forgetting(steps)
