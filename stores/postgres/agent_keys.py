"""Per-agent payload data keys in the database (`client.agent_keys`, docs/design.md
invariant 22): with `DREAMKEEPER_DATABASE_URL` set, every worker, client and codec server
on the database seals and opens an agent's payloads — and its memory content at rest
(`stores.postgres.sealing`) — with the same data key, and one `forget` destroys it for
all of them: a key in one host's data directory would leave a payload sealed on host A
undecodable on host B, and alive on A after a forget on B.

Rows never hold a key in clear: a data key is wrapped by a key-encryption key (KEK) of the
keyring kept outside the database (`stores.postgres.keyring`), named in `kek_id`; a key
made before KEKs, or carried in from a data directory by `dreamkeeper migrate`, is wrapped
by the payload key (`wrapped_by`, `kek_id` NULL) until the next rotation wraps it by a
KEK. `dreamkeeper_agent_keys` has the agent's keys: the one new payloads are sealed with
(`current`: at most one per agent, by a unique index) and older ones still needed to open
what they sealed. Destroyed key ids go to `dreamkeeper_destroyed_keys`, without agent ids,
so a decoder can say "erased". Rows sealed at rest reference their key: the database
refuses to delete a key while a row still needs it.

Every use by the codec is one indexed read, uncached: a key another host destroyed stops
working here at the next payload, never after a cache expires.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from dreamkeeper.client.agent_keys import (
    KEY_BYTES,
    AgentKeyError,
    DataKey,
    WrappedKey,
    Wrapping,
    erased,
)
from dreamkeeper.core.payload_keys import KEY_ID_PATTERN
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.keyring import Keyring, KeyringMismatch, keyring_for

_COLUMNS = "key_id, kek_id, wrapped_by, nonce, wrapped"
CREATE_ATTEMPTS = 3


@dataclass(frozen=True)
class StoredKey:
    """A data key row: wrapped by KEK `kek_id`, or (None) by payload key `wrapped_by`."""

    key_id: str
    kek_id: str | None
    wrapped_by: str
    nonce: bytes
    wrapped: bytes


class PostgresAgentKeyStore:
    """`AgentKeyStore` over one database (the process's shared pool), its data keys
    wrapped by the keyring in `keyring_dir`."""

    def __init__(self, db: Database, wrapping: Wrapping, keyring_dir: Path) -> None:
        self.db = db
        self.keyring: Keyring = keyring_for(db, keyring_dir, wrapping)

    def current(self, agent_id: str) -> DataKey:
        validate_agent_id(agent_id)
        stored = self._current(agent_id)
        if stored is None:
            for attempt in range(CREATE_ATTEMPTS):
                try:
                    with self.db.transaction() as conn:
                        # Of two first uses at once, the unique index lets one row in;
                        # the other inserts nothing and reads the winner's below.
                        self._insert(conn, agent_id, current=True, conflict="DO NOTHING")
                    break
                except psycopg.errors.ForeignKeyViolation:
                    # Wrapped by a KEK a rotation retired meanwhile: wrap by the new one.
                    if attempt == CREATE_ATTEMPTS - 1:
                        raise
            stored = self._current(agent_id)
            if stored is None:
                raise AgentKeyError(f"the data key of agent {agent_id!r} could not be stored")
        return self._open(agent_id, stored)

    def find(self, agent_id: str, key_id: str) -> DataKey:
        validate_agent_id(agent_id)
        if not KEY_ID_PATTERN.fullmatch(key_id):
            # From a payload's metadata, so anything: a NUL the text column refuses too.
            raise AgentKeyError(f"{key_id!r} is not a data key id")
        rows = self.db.fetch(
            f"SELECT {_COLUMNS} FROM dreamkeeper_agent_keys WHERE agent_id = %s AND key_id = %s",
            (agent_id, key_id),
        )
        if rows:
            return self._open(agent_id, _stored(rows[0]))
        if self.db.fetch("SELECT 1 FROM dreamkeeper_destroyed_keys WHERE key_id = %s", (key_id,)):
            raise erased(agent_id, key_id)
        raise AgentKeyError(
            f"data key {key_id!r} of agent {agent_id!r} is not in the database at "
            f"{self.db.location}: this process uses another database than the one that "
            "sealed the payload"
        )

    def destroy(self, agent_id: str) -> int:
        """Destroy every key of the agent (its histories become undecodable). Refused
        (`AgentKeyError`) while rows of the agent are still sealed with one of them: a
        forget deletes or seals those anew first (`stores.postgres.forget`)."""
        validate_agent_id(agent_id)
        try:
            with self.db.transaction() as conn:
                return len(destroy_keys(conn, agent_id))
        except psycopg.errors.ForeignKeyViolation:
            raise AgentKeyError(
                f"the data keys of agent {agent_id!r} still seal its memories at rest: "
                "forget the agent (or its entries) to destroy them"
            ) from None

    def rotate(self, agent_id: str) -> DataKey:
        """A new data key becomes the agent's current one (new payloads and writes use
        it); the older ones stay until `retire_others`."""
        validate_agent_id(agent_id)
        for attempt in range(CREATE_ATTEMPTS):
            try:
                with self.db.transaction() as conn:
                    conn.execute(
                        "UPDATE dreamkeeper_agent_keys SET current = false "
                        "WHERE agent_id = %s AND current",
                        (agent_id,),
                    )
                    key_id = self._insert(conn, agent_id, current=True, conflict="")
                break
            except psycopg.errors.ForeignKeyViolation:
                if attempt == CREATE_ATTEMPTS - 1:
                    raise
        return self.find(agent_id, key_id)

    def retire_others(self, conn: psycopg.Connection, agent_id: str, keep: str) -> list[str]:
        """Delete every key of the agent but `keep`, their ids put on the destroyed list,
        in the caller's transaction: `ForeignKeyViolation` while a row is still sealed
        with one of them."""
        rows = conn.execute(
            "DELETE FROM dreamkeeper_agent_keys WHERE agent_id = %s AND key_id <> %s "
            "RETURNING key_id",
            (agent_id, keep),
        ).fetchall()
        gone = [str(r[0]) for r in rows]
        _list_destroyed(conn, gone)
        return gone

    def ever_under_payload_key(self, agent_id: str) -> bool:
        """Whether a key of the agent was ever wrapped by the payload key itself (made
        before KEKs, or carried in by `migrate`): copies so wrapped may still lie in old
        WAL and dead tuples."""
        rows = self.db.fetch(
            "SELECT 1 FROM dreamkeeper_agent_keys WHERE agent_id = %s AND "
            "ever_under_payload_key LIMIT 1",
            (agent_id,),
        )
        return bool(rows)

    def destroyed(self) -> set[str]:
        return {
            str(row[0]) for row in self.db.fetch("SELECT key_id FROM dreamkeeper_destroyed_keys")
        }

    # -- rows ------------------------------------------------------------------------------

    def _insert(
        self, conn: psycopg.Connection, agent_id: str, *, current: bool, conflict: str
    ) -> str:
        key_id = os.urandom(8).hex()
        secret = os.urandom(KEY_BYTES)
        kek_id, nonce, wrapped = self.keyring.wrap_data_key(agent_id, key_id, secret)
        conn.execute(
            "INSERT INTO dreamkeeper_agent_keys (agent_id, key_id, kek_id, wrapped_by, nonce, "
            "wrapped, current) VALUES (%s, %s, %s, %s, %s, %s, %s)"
            + (f" ON CONFLICT {conflict}" if conflict else ""),
            (agent_id, key_id, kek_id, kek_id, nonce, wrapped, current),
        )
        return key_id

    def _current(self, agent_id: str) -> StoredKey | None:
        rows = self.db.fetch(
            f"SELECT {_COLUMNS} FROM dreamkeeper_agent_keys WHERE agent_id = %s AND current",
            (agent_id,),
        )
        return _stored(rows[0]) if rows else None

    def _open(self, agent_id: str, stored: StoredKey) -> DataKey:
        try:
            return self._unwrap(agent_id, stored)
        except KeyringMismatch:
            # Read just before a rotation wrapped it by a new KEK and erased the old one
            # from the keyring: the row as it is now opens.
            rows = self.db.fetch(
                f"SELECT {_COLUMNS} FROM dreamkeeper_agent_keys "
                "WHERE agent_id = %s AND key_id = %s",
                (agent_id, stored.key_id),
            )
            if not rows or _stored(rows[0]).kek_id == stored.kek_id:
                raise
            return self._unwrap(agent_id, _stored(rows[0]))

    def _unwrap(self, agent_id: str, stored: StoredKey) -> DataKey:
        secret = self.keyring.unwrap_data_key(
            agent_id,
            stored.key_id,
            stored.kek_id,
            stored.wrapped_by,
            stored.nonce,
            stored.wrapped,
        )
        return DataKey(stored.key_id, secret)


def destroy_keys(conn: psycopg.Connection, agent_id: str) -> list[str]:
    """Delete every key of the agent and list their ids as destroyed, in the caller's
    transaction (`ForeignKeyViolation` while a row is still sealed with one)."""
    rows = conn.execute(
        "DELETE FROM dreamkeeper_agent_keys WHERE agent_id = %s RETURNING key_id", (agent_id,)
    ).fetchall()
    gone = [str(r[0]) for r in rows]
    _list_destroyed(conn, gone)
    return gone


def _list_destroyed(conn: psycopg.Connection, key_ids: list[str]) -> None:
    # In the transaction that deletes them, so no reader ever meets a key that is
    # neither usable nor reported erased.
    for key_id in key_ids:
        conn.execute(
            "INSERT INTO dreamkeeper_destroyed_keys (key_id) VALUES (%s) ON CONFLICT DO NOTHING",
            (key_id,),
        )


def carry_key(db: Database, agent_id: str, stored: WrappedKey) -> bool:
    """Store a key another store made (a file key, by `dreamkeeper migrate`), still
    wrapped: no payload key is needed to move it. It becomes the agent's current key
    unless the agent has one here already (then it only opens the older payloads it
    sealed). False when it was there already, or was destroyed here (a forget on the
    database must not be undone by a later copy). A re-run after a crash adds nothing
    twice."""
    validate_agent_id(agent_id)
    values = (agent_id, stored.key_id, stored.wrapped_by, stored.nonce, stored.wrapped)
    with db.transaction() as conn:
        gone = conn.execute(
            "SELECT 1 FROM dreamkeeper_destroyed_keys WHERE key_id = %s", (stored.key_id,)
        ).fetchone()
        if gone is not None:
            return False
        try:
            with conn.transaction():
                done = conn.execute(
                    "INSERT INTO dreamkeeper_agent_keys (agent_id, key_id, wrapped_by, nonce, "
                    "wrapped, ever_under_payload_key, current) VALUES (%s, %s, %s, %s, %s, "
                    "true, NOT EXISTS (SELECT 1 FROM dreamkeeper_agent_keys WHERE agent_id = %s "
                    "AND current)) ON CONFLICT (agent_id, key_id) DO NOTHING",
                    (*values, agent_id),
                )
        except psycopg.errors.UniqueViolation:
            # A first use made a current key between the check and the insert.
            done = conn.execute(
                "INSERT INTO dreamkeeper_agent_keys (agent_id, key_id, wrapped_by, nonce, "
                "wrapped, ever_under_payload_key, current) VALUES (%s, %s, %s, %s, %s, true, "
                "false) ON CONFLICT (agent_id, key_id) DO NOTHING",
                values,
            )
        return done.rowcount == 1


def carry_destroyed(db: Database, key_ids: set[str]) -> int:
    """Put destroyed key ids on the database's list (so their payloads read "erased");
    how many were new there."""
    added = 0
    with db.transaction() as conn:
        for key_id in sorted(key_ids):
            done = conn.execute(
                "INSERT INTO dreamkeeper_destroyed_keys (key_id) VALUES (%s) "
                "ON CONFLICT DO NOTHING",
                (key_id,),
            )
            added += done.rowcount
    return added


def held_keys(db: Database) -> tuple[set[tuple[str, str]], set[str]]:
    """(agent id, key id) of every key the database holds, and the destroyed key ids."""
    keys = {
        (str(a), str(k)) for a, k in db.fetch("SELECT agent_id, key_id FROM dreamkeeper_agent_keys")
    }
    gone = {str(row[0]) for row in db.fetch("SELECT key_id FROM dreamkeeper_destroyed_keys")}
    return keys, gone


def _stored(row: tuple[Any, ...]) -> StoredKey:
    key_id, kek_id, wrapped_by, nonce, wrapped = row
    return StoredKey(
        str(key_id),
        None if kek_id is None else str(kek_id),
        str(wrapped_by),
        bytes(nonce),
        bytes(wrapped),
    )
