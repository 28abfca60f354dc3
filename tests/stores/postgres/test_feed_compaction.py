"""Compacting the PostgreSQL change feed (issue 35 A5; docs/storage.md, "Compacting the
change feed"): the writer deletes the feed's old prefix every COMPACT_EVERY seqs, so the
table stays bounded; a reader whose offset fell behind the compaction point loads again
and ends with exactly the store's entries (nothing missed, nothing applied twice); a
crash inside the compaction loses nothing; a cold open still uses the snapshot, and a
forget still erases. The constants are made small so a test writes hundreds, not
thousands, of rows; the rule is the same."""

from __future__ import annotations

import pytest

from dreamkeeper.stores import faults
from dreamkeeper.stores.postgres import memory_store
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.memory_store import PostgresEntryStorage, PostgresMemoryStore
from dreamkeeper.stores.search.query import search
from tests.stores.churn import churn, state

AGENT = "feed-agent"
EVERY, KEEP, LAG = 20, 10, 60


@pytest.fixture
def db(database_url):
    database = Database(database_url, max_size=4)
    yield database
    database.close()


@pytest.fixture(autouse=True)
def small_feed(monkeypatch):
    monkeypatch.setattr(memory_store, "COMPACT_EVERY", EVERY)
    monkeypatch.setattr(memory_store, "FEED_KEEP", KEEP)
    monkeypatch.setattr(memory_store, "SNAPSHOT_LAG", LAG)


def _feed(db: Database) -> tuple[int, int, int]:
    """(rows, lowest seq, highest seq) of the agent's feed."""
    row = db.fetch(
        "SELECT count(*), coalesce(min(seq), 0), coalesce(max(seq), 0) "
        "FROM dk_memory_feed WHERE agent_id = %s",
        (AGENT,),
    )[0]
    return int(row[0]), int(row[1]), int(row[2])


def test_compaction_bounds_the_feed(db):
    store = PostgresMemoryStore(db, AGENT)
    churn(store, 400, "a")
    rows, lowest, top = _feed(db)
    assert top == 400
    # At most the kept tail plus the writes since the last compaction.
    assert rows <= KEEP + EVERY
    assert rows == top - lowest + 1  # a prefix went: the rest has no gap
    assert state(PostgresMemoryStore(db, AGENT)) == state(store)


def test_a_reader_behind_the_compaction_point_reloads_exactly_the_store(db):
    reader = PostgresMemoryStore(db, AGENT)
    writer = PostgresMemoryStore(db, AGENT)
    first = churn(writer, 30, "old")
    assert len(reader.entries(include_archived=True)) == len(first)
    offset = reader.feed_offset
    # Far past the reader: the rows after its offset are compacted away, including an
    # erase of an entry it holds and rewrites of others.
    writer.erase([first[0]])
    churn(writer, 200, "new")
    assert _feed(db)[1] > offset + 1

    assert state(reader) == state(PostgresMemoryStore(db, AGENT)) == state(writer)
    assert reader.get(first[0]) is None
    assert reader.feed_offset == _feed(db)[2]
    hits = {h.entry.id for h in search(reader, "Quorvath", limit=500)}
    assert hits == {e.id for e in writer.entries()}
    # It goes on catching up from the feed as usual.
    later = writer.create("A later fact about Quorvath")
    assert reader.get(later.id) == later


def test_a_cold_open_after_compaction_uses_the_snapshot(db):
    writer = PostgresMemoryStore(db, AGENT)
    churn(writer, 30, "a")
    assert writer.save_snapshot()
    cached = writer.feed_offset
    churn(writer, 40, "b")  # compacts, but never past the snapshot's row
    rows, lowest, _ = _feed(db)
    assert lowest == cached
    cold = PostgresMemoryStore(db, AGENT)
    assert state(cold) == state(writer)
    assert cold.opened_from_snapshot
    # Once the snapshot lags by SNAPSHOT_LAG the compacting writer writes it again, and
    # the feed is bounded again.
    churn(writer, 3 * LAG, "c")
    rows, lowest, top = _feed(db)
    assert rows <= LAG + EVERY
    again = PostgresMemoryStore(db, AGENT)
    assert state(again) == state(writer) and again.opened_from_snapshot


def test_a_crash_inside_compaction_loses_nothing(db):
    writer = PostgresMemoryStore(db, AGENT)
    reader = PostgresMemoryStore(db, AGENT)
    churn(writer, EVERY - 1, "a")
    assert reader.entries(include_archived=True)
    with faults.armed(faults.FEED_COMPACTING), pytest.raises(faults.SimulatedCrash):
        writer.create("The write that crossed the compaction mark, Quorvath")
    # The write committed before the compaction began; the compaction rolled back whole.
    assert _feed(db) == (EVERY, 1, EVERY)
    survivor = PostgresMemoryStore(db, AGENT)
    assert state(reader) == state(survivor)
    assert state(survivor) == state(writer)
    assert len(state(survivor)) == len(set(state(writer)))
    # The next crossing compacts.
    churn(writer, EVERY, "b")
    assert _feed(db)[0] <= KEEP + EVERY
    assert state(reader) == state(PostgresMemoryStore(db, AGENT))


def test_a_snapshot_whose_feed_row_was_compacted_is_not_used(db):
    writer = PostgresMemoryStore(db, AGENT)
    churn(writer, 30, "a")
    assert writer.save_snapshot()
    with db.transaction() as conn:  # as a compaction past it would (one never does)
        conn.execute("DELETE FROM dk_memory_feed WHERE agent_id = %s", (AGENT,))
    cold = PostgresMemoryStore(db, AGENT)
    assert state(cold) == state(writer)
    assert not cold.opened_from_snapshot


def test_migrate_after_compaction_carries_every_entry(database_url, tmp_path):
    from dreamkeeper.stores.contract.records import NewEntry
    from dreamkeeper.stores.files.backend import FileBackend
    from dreamkeeper.stores.migrate import content_digest, migrate
    from dreamkeeper.stores.postgres.backend import PostgresBackend

    source = PostgresBackend(database_url)
    churn(source.memory(AGENT), 300, "a")
    source.memory("bulk-agent").create_many(
        NewEntry(f"bulk fact {i} about Quorvath") for i in range(3 * EVERY)
    )
    assert _feed(source.memory(AGENT).db)[1] > 1  # compacted

    target = FileBackend(tmp_path / "target")
    report = migrate(source, target)
    assert report.verified and report.mismatches == []
    for agent in (AGENT, "bulk-agent"):
        theirs = source.memory(agent).entries(include_archived=True)
        ours = target.memory(agent).entries(include_archived=True)
        assert len(ours) == len(theirs) > 0
        assert content_digest(ours) == content_digest(theirs)
    # And from files into the database: the import's bulk writes compact the agent's
    # feed as they go, and every entry arrives.
    files = FileBackend(tmp_path / "files")
    files.memory("from-files").create_many(
        NewEntry(f"a filed fact {i} about Quorvath") for i in range(5 * EVERY)
    )
    report = migrate(files, source)
    assert report.verified and report.created == 5 * EVERY
    with source.memory("from-files").db.transaction() as conn:
        lowest = conn.execute(
            "SELECT min(seq) FROM dk_memory_feed WHERE agent_id = 'from-files'"
        ).fetchone()
    assert lowest is not None and lowest[0] > 1


def test_a_forget_after_compaction_erases_and_a_reader_behind_never_sees_it(db):
    from dreamkeeper.stores.postgres.forget import postgres_forgetting

    reader = PostgresMemoryStore(db, AGENT)
    writer = PostgresMemoryStore(db, AGENT)
    secret = writer.create("Zebulon Kravitz keeps the spare key under the third stone")
    churn(writer, 100, "a")
    assert reader.get(secret.id) == secret  # read before the rows after it went
    offset = reader.feed_offset
    receipt = postgres_forgetting(db, sealing=None).forget_match(AGENT, "Zebulon Kravitz")
    assert receipt.verified
    churn(writer, 100, "b")  # the forget's own feed rows compacted away too
    assert _feed(db)[1] > offset + 1
    assert reader.get(secret.id) is None
    assert search(reader, "Zebulon Kravitz", limit=10) == []
    assert state(reader) == state(PostgresMemoryStore(db, AGENT))
    text = db.fetch(
        "SELECT count(*) FROM dk_memory_feed WHERE agent_id = %s "
        "AND coalesce(reason, '') || coalesce(op, '') LIKE %s",
        (AGENT, "%Zebulon%"),
    )[0][0]
    assert text == 0


def test_a_compaction_that_fails_does_not_fail_the_write_it_follows(db, monkeypatch):
    import psycopg

    writer = PostgresMemoryStore(db, AGENT)
    churn(writer, EVERY - 1, "a")

    def broken(self):
        raise psycopg.OperationalError("the database went away mid-compaction")

    monkeypatch.setattr(PostgresEntryStorage, "compact_feed", broken)
    crossing = writer.create("The write that crossed the mark, Quorvath")
    assert PostgresMemoryStore(db, AGENT).get(crossing.id) == crossing
    assert _feed(db) == (EVERY, 1, EVERY)  # nothing compacted, nothing lost
