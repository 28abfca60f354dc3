"""Re-keying an agent after a forget of some of its entries (docs/storage.md, erasure on
PostgreSQL).

The erased rows are gone from the tables, but PostgreSQL keeps them — dead tuples until
VACUUM, the WAL, backups — sealed with the agent's data key, which must therefore be
destroyed; the agent's other memories, sealed with the same key, must not go with it. So:

1. a new data key becomes the agent's current one (`AGENT_KEY_ROTATED`);
2. every remaining row of the agent is sealed anew with it, tier by tier, each under the
   lock its writers take: long-term memory in one transaction holding the agent's counter
   row (its index snapshot, a cache quoting everything, is dropped instead; the change
   feed loses any category or fingerprint an older plaintext write left,
   `ROWS_HALF_RESEALED` after it), working memory holding its agent row, each session
   under its lock, documents row by row (compare-and-set on the key they had);
3. the old keys are deleted, in one transaction that lists them as destroyed. A foreign
   key from every sealed row to its key refuses that while any row still needs one (a
   document appended with the old key meanwhile): step 2 runs again.

A crash anywhere leaves every row sealed with a key that still exists; the forget stays
pending and its retry re-keys again (a newer key, every row not sealed with it, every
other key deleted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

from dreamkeeper.client.agent_keys import DataKey
from dreamkeeper.stores import faults
from dreamkeeper.stores.postgres import conversation_memory, working_memory
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.sealing import (
    DOCUMENT,
    MEMORY,
    VECTOR,
    SealBroken,
    Sealing,
)

CHUNK = 1_000
ATTEMPTS = 5


@dataclass
class Rekey:
    """What a re-key did."""

    key_id: str  # the agent's new data key
    retired: list[str] = field(default_factory=list)  # the keys destroyed
    resealed: int = 0  # rows sealed anew


def rekey_agent(db: Database, sealing: Sealing, agent_id: str) -> Rekey:
    """Give the agent a new data key, seal every row of it anew, destroy the others."""
    new = sealing.keys.rotate(agent_id)
    sealing.forget_current(agent_id)
    faults.crash_point(faults.AGENT_KEY_ROTATED)
    report = Rekey(new.key_id)
    for attempt in range(ATTEMPTS):
        report.resealed += _memory(db, sealing, agent_id, new)
        faults.crash_point(faults.ROWS_HALF_RESEALED)
        with db.transaction() as conn:
            if conn.execute(
                "SELECT 1 FROM dreamkeeper_working_agents WHERE agent_id = %s", (agent_id,)
            ).fetchone():
                working_memory.reseal(conn, db, sealing, agent_id)
                report.resealed += 1
        report.resealed += conversation_memory.reseal(db, sealing, agent_id)
        report.resealed += _documents(db, sealing, agent_id, new)
        try:
            with db.transaction() as conn:
                report.retired += sealing.keys.retire_others(conn, agent_id, new.key_id)
            sealing.drop(agent_id, report.retired)
            return report
        except psycopg.errors.ForeignKeyViolation:
            if attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _memory(db: Database, sealing: Sealing, agent_id: str, key: DataKey) -> int:
    """The long-term tier, in one transaction that holds the agent's counter row (every
    write of the tier raises it first, and takes its key from it)."""
    with db.transaction() as conn:
        held = conn.execute(
            "UPDATE dk_memory_agent SET key_id = %s WHERE agent_id = %s RETURNING agent_id",
            (key.key_id, agent_id),
        ).fetchone()
        if held is None:
            return 0  # no long-term store (its rows go with the counter row)
        conn.execute("DELETE FROM dk_memory_cache WHERE agent_id = %s", (agent_id,))
        conn.execute(
            "UPDATE dk_memory_feed SET category = NULL, fingerprint = NULL WHERE agent_id = %s "
            "AND (category IS NOT NULL OR fingerprint IS NOT NULL)",
            (agent_id,),
        )
        conn.execute(
            "UPDATE dk_memory SET category = NULL, fingerprint = NULL WHERE agent_id = %s "
            "AND sealed IS NOT NULL AND (category IS NOT NULL OR fingerprint IS NOT NULL)",
            (agent_id,),
        )
        done = _reseal_entries(conn, sealing, agent_id, key)
        done += _reseal_vectors(conn, sealing, agent_id, key)
    return done


def _reseal_entries(conn: psycopg.Connection, sealing: Sealing, agent_id: str, key: DataKey) -> int:
    """Every entry row not sealed with `key`, opened and sealed with it, a chunk at a
    time; a row that does not open is deleted (read by no one). How many were looked at."""
    done = 0
    while True:
        rows = conn.execute(
            "SELECT id, doc, sealed, key_id FROM dk_memory WHERE agent_id = %s "
            "AND key_id IS DISTINCT FROM %s ORDER BY id LIMIT %s",
            (agent_id, key.key_id, CHUNK),
        ).fetchall()
        if not rows:
            break
        ids, sealed, broken = [], [], []
        for entry_id, doc, old, key_id in rows:
            try:
                plain = (
                    str(doc).encode("utf-8")
                    if old is None
                    else sealing.open(agent_id, str(key_id), MEMORY, old)
                )
            except SealBroken:
                broken.append(entry_id)  # read by no one (a reported problem row)
                continue
            ids.append(entry_id)
            sealed.append(sealing.seal(agent_id, key, MEMORY, plain))
        conn.execute(
            "DELETE FROM dk_memory WHERE agent_id = %s AND id = ANY(%s)", (agent_id, broken)
        )
        conn.execute(
            "UPDATE dk_memory m SET doc = NULL, category = NULL, fingerprint = NULL, "
            "sealed = n.sealed, key_id = %s FROM unnest(%s::text[], %s::bytea[]) "
            "AS n(id, sealed) WHERE m.agent_id = %s AND m.id = n.id",
            (key.key_id, ids, sealed, agent_id),
        )
        done += len(rows)
    return done


def _reseal_vectors(conn: psycopg.Connection, sealing: Sealing, agent_id: str, key: DataKey) -> int:
    """Every vector row not sealed with `key`, the same way; one that does not open is a
    cache nobody can read, made again. How many were looked at."""
    done = 0
    while True:
        rows = conn.execute(
            "SELECT id, data, key_id FROM dk_memory_vector WHERE agent_id = %s "
            "AND key_id IS DISTINCT FROM %s ORDER BY id LIMIT %s",
            (agent_id, key.key_id, CHUNK),
        ).fetchall()
        if not rows:
            break
        keep_ids, keep_data, drop = [], [], []
        for entry_id, data, key_id in rows:
            try:
                plain = (
                    bytes(data)
                    if key_id is None
                    else sealing.open(agent_id, str(key_id), VECTOR, data)
                )
            except SealBroken:
                drop.append(entry_id)  # a cache nobody can read: made again
                continue
            keep_ids.append(entry_id)
            keep_data.append(sealing.seal(agent_id, key, VECTOR, plain))
        conn.execute(
            "DELETE FROM dk_memory_vector WHERE agent_id = %s AND id = ANY(%s)",
            (agent_id, drop),
        )
        conn.execute(
            "UPDATE dk_memory_vector v SET data = n.data, key_id = %s "
            "FROM unnest(%s::text[], %s::bytea[]) AS n(id, data) "
            "WHERE v.agent_id = %s AND v.id = n.id",
            (key.key_id, keep_ids, keep_data, agent_id),
        )
        done += len(rows)
    return done


def _documents(db: Database, sealing: Sealing, agent_id: str, key: DataKey) -> int:
    """Every document row not sealed with `key`, compare-and-set on the key it had (a row
    renamed or deleted meanwhile is looked at again, or is gone)."""
    done = 0
    for _ in range(1_000_000):
        rows = db.fetch(
            "SELECT name, seq, data, key_id FROM dreamkeeper_documents WHERE agent_id = %s "
            "AND key_id IS DISTINCT FROM %s ORDER BY name, seq LIMIT %s",
            (agent_id, key.key_id, CHUNK),
        )
        if not rows:
            return done
        with db.transaction() as conn:
            for name, seq, data, key_id in rows:
                try:
                    plain = (
                        bytes(data)
                        if key_id is None
                        else sealing.open(agent_id, str(key_id), DOCUMENT, data)
                    )
                except SealBroken:
                    conn.execute(
                        "DELETE FROM dreamkeeper_documents WHERE agent_id = %s AND name = %s "
                        "AND seq = %s",
                        (agent_id, name, seq),
                    )
                    continue
                conn.execute(
                    "UPDATE dreamkeeper_documents SET data = %s, key_id = %s WHERE agent_id = %s "
                    "AND name = %s AND seq = %s AND key_id IS NOT DISTINCT FROM %s",
                    (
                        sealing.seal(agent_id, key, DOCUMENT, plain),
                        key.key_id,
                        agent_id,
                        name,
                        seq,
                        key_id,
                    ),
                )
        done += len(rows)
    return done
