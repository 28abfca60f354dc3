"""Per-agent payload data keys in the database (`client.agent_keys`, docs/design.md
invariant 22): with `DREAMKEEPER_DATABASE_URL` set, every worker, client and codec server
on the database seals and opens an agent's payloads with the same data key, and one
`forget` destroys it for all of them — a key in one host's data directory would leave a
payload sealed on host A undecodable on host B, and alive on A after a forget on B.

Rows hold only what the file store's files hold: the key wrapped by a payload key (and
which one), never the key in clear. `dreamkeeper_agent_keys` has the agent's keys: the
one new payloads are sealed with (`current`: at most one per agent, by a unique index) and
any carried in by `dreamkeeper migrate` that sealed older histories. Destroyed key ids go
to `dreamkeeper_destroyed_keys`, without agent ids, so a decoder can say "erased".

Every use is one indexed read, uncached: a key another host destroyed stops working here
at the next payload, never after a cache expires.
"""

from __future__ import annotations

from typing import Any

import psycopg

from dreamkeeper.client.agent_keys import (
    AgentKeyError,
    DataKey,
    KeyWrapper,
    WrappedKey,
    Wrapping,
    erased,
)
from dreamkeeper.core.payload_keys import KEY_ID_PATTERN
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores.postgres.database import Database

_COLUMNS = "key_id, wrapped_by, nonce, wrapped"


class PostgresAgentKeyStore:
    """`AgentKeyStore` over one database (the process's shared pool)."""

    def __init__(self, db: Database, wrapping: Wrapping) -> None:
        self.db = db
        self._wrapper = KeyWrapper(wrapping)

    def current(self, agent_id: str) -> DataKey:
        validate_agent_id(agent_id)
        stored = self._current(agent_id)
        if stored is None:
            new = self._wrapper.new(agent_id)
            with self.db.transaction() as conn:
                # Of two first uses at once, the unique index lets one row in; the other
                # inserts nothing and reads the winner's below: both seal with one key.
                conn.execute(
                    "INSERT INTO dreamkeeper_agent_keys (agent_id, key_id, wrapped_by, nonce, "
                    "wrapped, current) VALUES (%s, %s, %s, %s, %s, true) ON CONFLICT DO NOTHING",
                    (agent_id, new.key_id, new.wrapped_by, new.nonce, new.wrapped),
                )
            stored = self._current(agent_id)
            if stored is None:
                raise AgentKeyError(f"the data key of agent {agent_id!r} could not be stored")
        return self._wrapper.unwrap(
            agent_id, stored, f"of agent {agent_id!r} in {self.db.location}"
        )

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
            return self._wrapper.unwrap(
                agent_id, _wrapped(rows[0]), f"of agent {agent_id!r} in {self.db.location}"
            )
        if self.db.fetch("SELECT 1 FROM dreamkeeper_destroyed_keys WHERE key_id = %s", (key_id,)):
            raise erased(agent_id, key_id)
        raise AgentKeyError(
            f"data key {key_id!r} of agent {agent_id!r} is not in the database at "
            f"{self.db.location}: this process uses another database than the one that "
            "sealed the payload"
        )

    def destroy(self, agent_id: str) -> int:
        validate_agent_id(agent_id)
        # One transaction: the ids go on the destroyed list as the keys go, so no reader
        # ever meets a key that is neither usable nor reported erased.
        with self.db.transaction() as conn:
            rows = conn.execute(
                "DELETE FROM dreamkeeper_agent_keys WHERE agent_id = %s RETURNING key_id",
                (agent_id,),
            ).fetchall()
            for (key_id,) in rows:
                conn.execute(
                    "INSERT INTO dreamkeeper_destroyed_keys (key_id) VALUES (%s) "
                    "ON CONFLICT DO NOTHING",
                    (key_id,),
                )
        return len(rows)

    def destroyed(self) -> set[str]:
        return {
            str(row[0]) for row in self.db.fetch("SELECT key_id FROM dreamkeeper_destroyed_keys")
        }

    def _current(self, agent_id: str) -> WrappedKey | None:
        rows = self.db.fetch(
            f"SELECT {_COLUMNS} FROM dreamkeeper_agent_keys WHERE agent_id = %s AND current",
            (agent_id,),
        )
        return _wrapped(rows[0]) if rows else None


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
                    "wrapped, current) VALUES (%s, %s, %s, %s, %s, NOT EXISTS (SELECT 1 FROM "
                    "dreamkeeper_agent_keys WHERE agent_id = %s AND current)) "
                    "ON CONFLICT (agent_id, key_id) DO NOTHING",
                    (*values, agent_id),
                )
        except psycopg.errors.UniqueViolation:
            # A first use made a current key between the check and the insert.
            done = conn.execute(
                "INSERT INTO dreamkeeper_agent_keys (agent_id, key_id, wrapped_by, nonce, "
                "wrapped, current) VALUES (%s, %s, %s, %s, %s, false) "
                "ON CONFLICT (agent_id, key_id) DO NOTHING",
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


def _wrapped(row: tuple[Any, ...]) -> WrappedKey:
    key_id, wrapped_by, nonce, wrapped = row
    return WrappedKey(str(key_id), str(wrapped_by), bytes(nonce), bytes(wrapped))
