"""The PostgreSQL store's own failure modes (the contract itself is the shared suite in
tests/stores, run on both backends): a write committed whose caller never heard, a
process killed inside its transaction while holding the agent's lock, a connection
dropped mid-hold, a database restart, and the index snapshot kept in the database."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time

import psycopg
import pytest

from dreamkeeper.policies.dedup import Candidate
from dreamkeeper.stores import faults
from dreamkeeper.stores.contract.records import NewEntry
from dreamkeeper.stores.longterm import snapshot
from dreamkeeper.stores.longterm.dedup_save import save_fact
from dreamkeeper.stores.longterm.entry_table import EntryTable
from dreamkeeper.stores.postgres import memory_store
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.memory_store import (
    SNAPSHOT_NAME,
    PostgresMemoryStore,
    lock_key,
)
from dreamkeeper.stores.postgres.migrations import upgrade
from dreamkeeper.stores.search.query import search

AGENT = "pg-agent"
NOTE = "Trish Roberts of PWOP Productions can be reached at +1 386-299-4605."
SIMILAR = "Trish Roberts of PWOP Productions can be reached at +1 386-299-4605 today."


@pytest.fixture
def db(database_url):
    database = Database(database_url, max_size=4)
    yield database
    database.close()


def _advisory_holders(db: Database, agent: str) -> int:
    key = lock_key(agent)
    with db.transaction() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND ((classid::bigint << 32) | objid::bigint) = %s",
            (key & 0xFFFF_FFFF_FFFF_FFFF,),
        ).fetchone()
    return int(row[0]) if row else 0


def _feed(db: Database, agent: str) -> list[tuple[str, str, int]]:
    with db.transaction() as conn:
        return [
            (a, i, int(r))
            for a, i, r in conn.execute(
                "SELECT action, id, rev FROM dk_memory_feed WHERE agent_id = %s ORDER BY seq",
                (agent,),
            )
        ]


@pytest.mark.parametrize("how", ["same", "fresh"])
def test_a_save_committed_but_unanswered_applies_once_on_retry(db, how):
    writer = PostgresMemoryStore(db, AGENT)
    target = writer.create(NOTE, category="people")
    reader = PostgresMemoryStore(db, AGENT)
    reader.entries()
    fact = Candidate(SIMILAR, "people")
    with faults.armed(faults.COMMITTED), pytest.raises(faults.SimulatedCrash):
        save_fact(writer, fact, new_id="aaaaaaaaaaaa", op_id="save-1")
    assert reader.get(target.id).reinforcement_count == 2  # it committed
    retry = writer if how == "same" else PostgresMemoryStore(db, AGENT)
    assert save_fact(retry, fact, new_id="aaaaaaaaaaaa", op_id="save-1").entry_id == target.id
    final = PostgresMemoryStore(db, AGENT).get(target.id)
    assert final.reinforcement_count == 2 and set(final.applied_ops) == {"save-1"}
    assert reader.get(target.id) == final


KILLED_WRITER = textwrap.dedent(
    """
    import sys
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
    store = PostgresMemoryStore(Database(sys.argv[1]), sys.argv[2])
    store.update(sys.argv[3], content="NEW TEXT that must not appear")
    """
)


def test_a_writer_killed_inside_its_transaction_leaves_nothing_and_frees_the_lock(db, database_url):
    store = PostgresMemoryStore(db, AGENT)
    entry = store.create(NOTE, category="people")
    env = {**os.environ, faults.ENV_VAR: faults.TRANSACTION_OPEN}
    done = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, database_url, AGENT, entry.id], env=env
    )
    assert done.returncode == faults.KILLED_EXIT_CODE
    # The server ends the dead session once it reads the closed socket (asynchronously
    # to the child's exit): its transaction rolls back and its lock is released.
    deadline = time.monotonic() + 30
    while _advisory_holders(db, AGENT) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _advisory_holders(db, AGENT) == 0
    assert PostgresMemoryStore(db, AGENT).get(entry.id) == entry
    assert store.get(entry.id) == entry
    updated = store.update(entry.id, content=NOTE + " Updated.")
    assert updated.revision == entry.revision + 1
    assert [a for a, _, _ in _feed(db, AGENT)] == ["created", "updated"]


def test_a_connection_dropped_mid_hold_commits_nothing_more_and_the_retry_applies_once(db):
    store = PostgresMemoryStore(db, AGENT)
    reader = PostgresMemoryStore(db, AGENT)
    with pytest.raises(psycopg.OperationalError), store.writing():
        first = store.create(NOTE, entry_id="aaaaaaaaaaaa")
        assert store.storage._hold is not None
        pid = store.storage._hold.info.backend_pid
        with db.transaction() as conn:  # an operator (or a failover) kills the session
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        store.create(SIMILAR, entry_id="bbbbbbbbbbbb")
    assert _advisory_holders(db, AGENT) == 0
    assert reader.get("bbbbbbbbbbbb") is None and reader.get(first.id) == first
    retried = store.create(SIMILAR, entry_id="bbbbbbbbbbbb")  # the activity's retry
    assert reader.get(retried.id) == retried
    assert [(a, i) for a, i, _ in _feed(db, AGENT)] == [
        ("created", "aaaaaaaaaaaa"),
        ("created", "bbbbbbbbbbbb"),
    ]


def test_a_database_restart_mid_hold_loses_no_acknowledged_write(tmp_path):
    from tests.harness.postgres import PostgresCluster, find_bindir

    bindir = find_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries")  # the session fixture reports it in CI
    cluster = PostgresCluster(bindir, durable=True)
    cluster.start()
    try:
        url = cluster.create_database("dk_restart")
        db = Database(url, max_size=4)
        upgrade(db)
        store = PostgresMemoryStore(db, AGENT)
        reader = PostgresMemoryStore(db, AGENT)
        acked = store.create(NOTE, entry_id="aaaaaaaaaaaa")
        reader.entries()
        with pytest.raises(psycopg.OperationalError), store.writing():
            cluster.restart(immediate=True)  # a crash of the server: recovery on start
            store.create(SIMILAR, entry_id="bbbbbbbbbbbb")
        # Every acknowledged write survived; the one in flight did not half-happen.
        assert reader.get(acked.id) == acked and reader.get("bbbbbbbbbbbb") is None
        retried = store.create(SIMILAR, entry_id="bbbbbbbbbbbb")
        assert PostgresMemoryStore(db, AGENT).get(retried.id) == retried
        assert reader.get(retried.id) == retried
        db.close()
    finally:
        cluster.destroy()


def test_a_store_opens_from_the_snapshot_row_and_catches_up_with_the_feed(db):
    writer = PostgresMemoryStore(db, AGENT)
    made = writer.create_many(
        [NewEntry(f"Bulk note {i} about project Orion{i}.", category="bulk") for i in range(50)]
    )
    assert writer.save_snapshot()
    late = writer.create("A late note about the zebra enclosure.", category="zoo")
    writer.archive(made[0].id, "deleted by agent tool")
    opened = PostgresMemoryStore(db, AGENT)
    assert opened.get(late.id) == late  # the feed after the snapshot was replayed
    assert opened.opened_from_snapshot
    assert opened.state.entries.parsed < len(opened.state.entries)  # entries stay JSON until read
    assert opened.get(made[0].id).is_archived
    scratch = PostgresMemoryStore(db, AGENT, snapshots=False)
    for query in ("zebra", "Orion7 project", "bulk note"):
        assert [h.entry.id for h in search(opened, query, limit=20)] == [
            h.entry.id for h in search(scratch, query, limit=20)
        ]


def test_a_store_opened_from_the_snapshot_row_holds_its_entries_json_compressed(db):
    # What the store holds, not how much: no parsed entry, no entry's JSON as its own
    # object or whole in one buffer, only compressed blocks smaller than the JSON; and
    # every entry read out of them is the entry the table holds.
    writer = PostgresMemoryStore(db, AGENT)
    made = writer.create_many(
        [
            NewEntry(f"Note {i} on the Orion{i} launch, filed by Ada.", category=f"c{i % 3}")
            for i in range(100)
        ]
    )
    assert writer.save_snapshot()
    opened = PostgresMemoryStore(db, AGENT)
    opened.index()
    assert opened.opened_from_snapshot
    table = opened.state.entries
    assert isinstance(table, EntryTable) and table.parsed == 0
    assert all(isinstance(value, int) for value in table._items.values())
    rows = table._rows
    assert rows is not None and rows.blob is None and rows.path is None
    assert rows.packed is not None and len(rows.packed) == table.held_bytes
    assert table.held_bytes < int(rows.offsets[-1]) / 2  # the JSON it stands for
    assert sorted(opened.entries(), key=lambda e: e.id) == sorted(made, key=lambda e: e.id)
    assert table.parsed == len(made)


def test_a_snapshot_that_does_not_match_the_feed_is_refused(db):
    writer = PostgresMemoryStore(db, AGENT)
    writer.create_many([NewEntry(f"Bulk note {i}.", category="bulk") for i in range(10)])
    assert writer.save_snapshot()
    with db.transaction() as conn:  # the feed row the snapshot was taken after differs
        conn.execute(
            "UPDATE dk_memory_feed SET rev = rev + 100 WHERE agent_id = %s "
            "AND seq = (SELECT seq FROM dk_memory_cache WHERE agent_id = %s AND name = %s)",
            (AGENT, AGENT, SNAPSHOT_NAME),
        )
    opened = PostgresMemoryStore(db, AGENT)
    assert len(opened.entries()) == 10 and not opened.opened_from_snapshot


def test_a_full_open_of_a_large_agent_writes_its_snapshot(db):
    writer = PostgresMemoryStore(db, AGENT)
    writer.create_many(
        [NewEntry(f"Note {i} on Orion{i}.", category="bulk") for i in range(snapshot.MIN_ENTRIES)]
    )
    first = PostgresMemoryStore(db, AGENT)
    assert len(first.entries()) == snapshot.MIN_ENTRIES
    assert not first.opened_from_snapshot  # read from the table, and wrote the snapshot
    again = PostgresMemoryStore(db, AGENT)
    assert len(again.entries()) == snapshot.MIN_ENTRIES
    assert again.opened_from_snapshot


def _snapshot_row_bytes(db: Database) -> bytes:
    with db.transaction() as conn:
        (data,) = conn.execute(
            "SELECT data FROM dk_memory_cache WHERE agent_id = %s", (AGENT,)
        ).fetchone()
    return bytes(data)


@pytest.mark.parametrize("compress_up_to", [memory_store.COMPRESS_UP_TO, 0])
def test_a_snapshot_row_is_compressed_up_to_a_size_and_opens_either_way(
    db, monkeypatch, compress_up_to
):
    monkeypatch.setattr(memory_store, "COMPRESS_UP_TO", compress_up_to)
    writer = PostgresMemoryStore(db, AGENT)
    made = writer.create_many(
        [NewEntry(f"Bulk note {i} about Orion{i}.", category="bulk") for i in range(60)]
    )
    assert writer.save_snapshot()
    row = _snapshot_row_bytes(db)
    plain = snapshot.MAGIC in row[:16]
    assert plain == (compress_up_to == 0)  # the store is not sealed: the row is readable
    opened = PostgresMemoryStore(db, AGENT)
    assert sorted(e.id for e in opened.entries()) == sorted(e.id for e in made)
    assert opened.opened_from_snapshot


def test_a_compressed_row_that_lies_about_its_length_is_not_used(db):
    writer = PostgresMemoryStore(db, AGENT)
    writer.create_many([NewEntry(f"Bulk note {i}.", category="bulk") for i in range(20)])
    assert writer.save_snapshot()
    row = bytearray(_snapshot_row_bytes(db))
    row[4:12] = (int.from_bytes(row[4:12], "little") + 1).to_bytes(8, "little")
    with db.transaction() as conn:
        conn.execute("UPDATE dk_memory_cache SET data = %s WHERE agent_id = %s", (row, AGENT))
    opened = PostgresMemoryStore(db, AGENT)
    assert len(opened.entries()) == 20 and not opened.opened_from_snapshot


def _snapshot_statements(monkeypatch, store: PostgresMemoryStore, during=None) -> list[str]:
    """The statements the store's snapshot read sends; `during(n)` runs before the n-th
    slice is read (1 for the second), as another process would act between two."""
    sent: list[str] = []
    real = store.storage._connection

    @contextlib.contextmanager
    def watched():
        with real() as conn:

            class Watched:
                def execute(self, sql, *args, **kwargs):
                    if "substring(data" in sql:
                        sent.append(sql)
                        if during is not None:
                            during(len(sent) - 1)
                    return conn.execute(sql, *args, **kwargs)

                def __getattr__(self, name):
                    return getattr(conn, name)

            yield Watched()

    monkeypatch.setattr(store.storage, "_connection", watched)
    return sent


def test_a_snapshot_row_is_read_in_slices_the_size_of_a_chunk(db, monkeypatch):
    """A pooled connection's libpq buffer grows to the largest message it received and
    keeps that size: one statement for a 100k store's snapshot kept 120 MB per
    connection. The row is read a chunk at a time, and decodes as the whole row."""
    writer = PostgresMemoryStore(db, AGENT)
    writer.create_many(
        [NewEntry(f"Bulk note {i} about Orion{i}.", category="bulk") for i in range(60)]
    )
    assert writer.save_snapshot()
    with db.transaction() as conn:
        (length,) = conn.execute(
            "SELECT octet_length(data) FROM dk_memory_cache WHERE agent_id = %s", (AGENT,)
        ).fetchone()
    monkeypatch.setattr(memory_store, "SNAPSHOT_READ_CHUNK", 1024)
    opened = PostgresMemoryStore(db, AGENT)
    sent = _snapshot_statements(monkeypatch, opened)
    assert len(opened.entries()) == 60 and opened.opened_from_snapshot
    assert len(sent) == -(-length // 1024) >= 2
    scratch = PostgresMemoryStore(db, AGENT, snapshots=False)
    assert [h.entry.id for h in search(opened, "Orion7 bulk", limit=20)] == [
        h.entry.id for h in search(scratch, "Orion7 bulk", limit=20)
    ]


def test_a_snapshot_rewritten_between_two_slices_is_not_used(db, monkeypatch):
    writer = PostgresMemoryStore(db, AGENT)
    writer.create_many([NewEntry(f"Bulk note {i}.", category="bulk") for i in range(40)])
    assert writer.save_snapshot()
    monkeypatch.setattr(memory_store, "SNAPSHOT_READ_CHUNK", 512)

    def rewrite(n: int) -> None:
        if n == 1:  # after the first slice: another process writes a newer snapshot
            later = writer.create("A note written meanwhile.", category="bulk")
            assert later is not None and writer.save_snapshot()

    opened = PostgresMemoryStore(db, AGENT)
    _snapshot_statements(monkeypatch, opened, during=rewrite)
    assert not opened.opened_from_snapshot and len(opened.entries()) == 41
