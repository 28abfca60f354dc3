"""Working memory: namespaces, TTL, the per-namespace limit, the stash prefix,
persistence, expiry and visibility across processes — on both backends
(`tests/stores/conftest.py`); what is about the files themselves is file-only."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta

import pytest

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import utc_now
from dreamkeeper.stores.contract import WorkingMemoryStore
from dreamkeeper.stores.files.working_memory import FileWorkingMemoryStore
from dreamkeeper.stores.search.query import search
from dreamkeeper.stores.working.working_memory import (
    BACKGROUND_MIN_TTL,
    DEFAULT_TTL,
    MAX_PER_NAMESPACE,
    WorkingMemoryFull,
)

SESSION = "session/s1"


@pytest.fixture
def working(make_working) -> WorkingMemoryStore:
    return make_working()


def test_a_plain_key_lands_in_the_callers_namespace_and_reads_cross_by_full_key(
    working, make_working
):
    entry = working.save(SESSION, "emails_inbox", "12 unread")
    assert entry.key == "session/s1/emails_inbox"
    other = make_working()
    assert other.get("session/s1/emails_inbox").value == "12 unread"  # full key, any reader
    assert other.get("session/s2/emails_inbox") is None  # s2's plain key is not s1's entry


@pytest.mark.parametrize("key", ["patrol/heartbeat/alert", "session/s2/x", "subagent/t1/r"])
def test_writes_outside_the_callers_namespace_are_refused(working, key):
    with pytest.raises(InvalidInput, match="outside your namespace"):
        working.save(SESSION, key, "data")
    assert working.list().total == 0


def test_stash_keys_are_refused_for_writes_but_the_loop_can_park_results(working):
    with pytest.raises(InvalidInput, match="stash"):
        working.save(SESSION, "stash/s1/call_1", "forged")
    with pytest.raises(InvalidInput, match="stash"):
        working.save("stash/s1", "call_1", "forged")
    working.put_stash("stash/s1/call_1", "original", ttl=timedelta(minutes=60), tags=["stash"])
    assert working.get("stash/s1/call_1").value == "original"


def test_default_ttl_and_expiry(working, clock):
    entry = working.save(SESSION, "k", "v")
    assert entry.expires_at - entry.stored_at == DEFAULT_TTL == timedelta(minutes=5)
    clock.advance(minutes=4, seconds=59)
    assert working.get("session/s1/k") is not None
    clock.advance(seconds=1)
    assert working.get("session/s1/k") is None
    assert working.list(SESSION).total == 0


def test_background_saves_are_floored_at_four_hours(working):
    short = working.save("subagent/t1", "r", "v", ttl=timedelta(minutes=1), background=True)
    assert short.expires_at - short.stored_at == BACKGROUND_MIN_TTL == timedelta(hours=4)
    long = working.save("subagent/t1", "r2", "v", ttl=timedelta(hours=6), background=True)
    assert long.expires_at - long.stored_at == timedelta(hours=6)
    user = working.save(SESSION, "k", "v", ttl=timedelta(minutes=1))
    assert user.expires_at - user.stored_at == timedelta(minutes=1)


@pytest.mark.parametrize("ttl", [timedelta(0), timedelta(minutes=-1), timedelta(days=8)])
def test_a_ttl_out_of_range_is_refused(working, ttl):
    with pytest.raises(InvalidInput, match="TTL"):
        working.save(SESSION, "k", "v", ttl=ttl)


def test_the_51st_live_entry_of_a_namespace_is_refused(working, clock):
    for i in range(MAX_PER_NAMESPACE):
        working.save(SESSION, f"k{i}", "v")
    with pytest.raises(WorkingMemoryFull, match="already holds 50 live entries"):
        working.save(SESSION, "one-more", "v")
    working.save(SESSION, "k7", "overwritten")  # an existing key is not a new entry
    working.save("session/s2", "k0", "v")  # other namespaces have their own budget
    assert working.list(SESSION).total == MAX_PER_NAMESPACE
    clock.advance(minutes=6)  # all of them expire
    working.save(SESSION, "one-more", "v")


def test_the_stash_makes_room_by_dropping_its_oldest_result(working, clock):
    for i in range(MAX_PER_NAMESPACE + 2):
        clock.advance(seconds=1)
        working.put_stash(f"stash/s1/call{i}", "v", ttl=timedelta(minutes=60), tags=[])
    keys = {e.key for e in working.list("stash/s1").entries}
    assert len(keys) == MAX_PER_NAMESPACE
    assert "stash/s1/call0" not in keys and "stash/s1/call51" in keys


@pytest.mark.parametrize(
    "key", ["../etc/passwd", "a//b", "a/./b", "", "a b", "x" * 300, "x\n/y", "a/b\n/c"]
)
def test_bad_keys_are_refused(working, key):
    with pytest.raises(InvalidInput):
        working.save(SESSION, key, "v")


def test_entries_persist_across_a_restart(make_working, backend, tmp_path):
    first = make_working()
    first.save(SESSION, "k", "v", category="email", tags=["inbox"])
    first.save("patrol/heartbeat", "alert", "disk full", background=True)
    if backend == "file":  # grouped by top-level segment
        root = tmp_path / "agents" / "a1" / "working-memory"
        assert sorted(p.name for p in root.glob("*.json")) == ["patrol.json", "session.json"]
    restarted = make_working()
    entry = restarted.get("session/s1/k")
    assert (entry.value, entry.category, entry.tags) == ("v", "email", ["inbox"])
    assert restarted.get("patrol/heartbeat/alert").value == "disk full"


def test_expired_entries_are_dropped_on_load_and_swept_from_the_database_hourly(
    make_working, tier_db, clock
):
    first = make_working()
    first.save(SESSION, "short", "v")
    first.save(SESSION, "long", "v", ttl=timedelta(hours=3))
    clock.advance(minutes=10)
    restarted = make_working()
    assert [e.key for e in restarted.list().entries] == ["session/s1/long"]
    if tier_db is None:
        return  # the file backend's sweep: the test below

    def stored() -> set[str]:
        with tier_db.transaction() as conn:
            rows = conn.execute("SELECT key FROM dreamkeeper_working").fetchall()
        return {r[0] for r in rows}

    def keys(*names: str) -> set[str]:
        rows = restarted.storage
        return {rows.stored_key(rows.tier_key(), n) for n in names}  # tags if sealed

    assert stored() == keys("session/s1/short", "session/s1/long")  # not yet swept
    clock.advance(hours=1)
    restarted.save("session/s2", "k", "v")  # the first write after the hour sweeps
    assert stored() == keys("session/s1/long", "session/s2/k")
    assert restarted.sweep() == 0


def test_expired_entries_are_dropped_on_load_and_swept_from_disk_hourly(tmp_path, clock):
    first = FileWorkingMemoryStore(tmp_path, "a1", clock=clock)
    first.save(SESSION, "short", "v")
    first.save(SESSION, "long", "v", ttl=timedelta(hours=3))
    clock.advance(minutes=10)
    restarted = FileWorkingMemoryStore(tmp_path, "a1", clock=clock)
    assert [e.key for e in restarted.list().entries] == ["session/s1/long"]
    path = tmp_path / "agents" / "a1" / "working-memory" / "session.json"
    assert len(json.loads(path.read_text())["entries"]) == 2  # not yet swept
    clock.advance(hours=1)
    restarted.save("session/s2", "k", "v")  # the first write after the hour sweeps
    on_disk = {e["key"] for e in json.loads(path.read_text())["entries"]}
    assert on_disk == {"session/s1/long", "session/s2/k"}


def test_a_malformed_segment_file_is_skipped_not_fatal(tmp_path, clock, caplog):
    working = FileWorkingMemoryStore(tmp_path, "a1", clock=clock)
    working.save("patrol/p", "k", "v", background=True)
    (working.root / "session.json").write_text("{not json")
    assert working.get("patrol/p/k").value == "v"
    assert "skipped unreadable" in caplog.text


def test_listing_is_newest_first_and_says_when_capped(working, clock):
    for i in range(5):
        clock.advance(seconds=1)
        working.save(SESSION, f"k{i}", "v")
    listing = working.list(SESSION, cap=3)
    assert [e.key.rsplit("/", 1)[1] for e in listing.entries] == ["k4", "k3", "k2"]
    assert listing.capped and listing.total == 5


def test_search_ranks_by_content_within_a_prefix(working):
    working.save(SESSION, "inbox", "invoice from Contoso for the Denver office")
    working.save(SESSION, "calendar", "standup at nine, lunch with Trish")
    working.save("patrol/heartbeat", "alert", "invoice overdue at Fabrikam", background=True)
    hits = working.search("contoso invoice", SESSION)
    assert [e.key for e, _ in hits] == ["session/s1/inbox"]
    everywhere = [e.key for e, _ in working.search("invoice")]
    assert set(everywhere) == {"session/s1/inbox", "patrol/heartbeat/alert"}
    assert working.search("invoice", "patrol")[0][0].key == "patrol/heartbeat/alert"


_WRITER = """
import sys
from tests.stores.children import open_tier
store = open_tier("working", sys.argv[1])
for i in range(int(sys.argv[3])):
    store.save(sys.argv[2], f"k{i}", f"from {sys.argv[2]} #{i}")
"""


def test_another_process_sees_writes_and_concurrent_writers_lose_nothing(
    make_working, store_location
):
    reader = make_working(clock=utc_now)
    reader.save(SESSION, "mine", "v")
    assert reader.get("session/s2/k0") is None
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, store_location, ns, "20"])
        for ns in ("session/s2", "session/s3")
    ]
    assert [w.wait(timeout=60) for w in writers] == [0, 0]
    assert reader.get("session/s2/k19").value == "from session/s2 #19"  # no reload needed
    assert reader.list("session").total == 41  # 20 + 20 + mine: no write clobbered another


@pytest.mark.parametrize("both_key, one_key", [("a-both", "z-one"), ("z-both", "a-one")])
def test_an_entry_matching_both_query_words_outranks_one_matching_one(working, both_key, one_key):
    # Two entries: "invoice" is in both, so BM25Okapi's idf gave it no weight and the two
    # tied, broken by key. Lucene's idf is positive: matching both words ranks first.
    working.save(SESSION, both_key, "invoice from Contoso")
    working.save(SESSION, one_key, "invoice from Fabrikam")
    hits = working.search("contoso invoice", SESSION)
    assert [e.key for e, _ in hits] == [f"{SESSION}/{both_key}", f"{SESSION}/{one_key}"]
    assert hits[0][1] > hits[1][1] > 0


CATEGORY_CASES = [
    ("research", True),
    ("Research/Pricing", True),
    ("research/pricing/eu", False),
    ("researchers", False),
    ("research/pric", False),
]


@pytest.mark.parametrize("wanted, found", CATEGORY_CASES)
def test_category_filter_is_a_whole_segment_prefix_like_long_term_search(
    working, store, wanted, found
):
    working.save(SESSION, "k", "pricing notes", category="research/pricing")
    assert (working.list(SESSION, category=wanted).total == 1) is found
    assert bool(working.search("pricing notes", SESSION, category=wanted)) is found
    # One rule for both tiers: long-term search answers the same.
    store.create("pricing notes", category="research/pricing")
    assert bool(search(store, "pricing notes", category=wanted)) is found


def test_clear_removes_a_namespace_or_a_sub_path_by_whole_segments(working, make_working):
    working.save(SESSION, "drafts/one", "d1")
    working.save(SESSION, "drafts/two", "d2")
    working.save(SESSION, "draftsman", "kept: not under drafts/")
    working.save("session/s10", "k", "kept: s10 is not under s1")
    working.save("patrol/heartbeat", "alert", "kept", background=True)
    assert working.clear(f"{SESSION}/drafts") == 2
    assert {e.key for e in working.list(SESSION).entries} == {f"{SESSION}/draftsman"}
    assert working.clear(SESSION) == 1
    restarted = make_working()  # the storage changed too
    assert {e.key for e in restarted.list().entries} == {"session/s10/k", "patrol/heartbeat/alert"}
    assert restarted.clear() == 2 and restarted.list().total == 0
    assert working.list().total == 0


@pytest.mark.parametrize("prefix", ["../x", "session//s1", "session/s1/", ""])
def test_clear_refuses_a_bad_prefix_and_changes_nothing(working, prefix):
    working.save(SESSION, "k", "v")
    with pytest.raises(InvalidInput):
        working.clear(prefix)
    assert working.list().total == 1


def test_a_database_write_that_dies_half_way_changes_nothing(database_url, clock):
    from dreamkeeper.stores import faults
    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore

    db = Database(database_url, max_size=4)
    working = PostgresWorkingMemoryStore(db, "a1", clock=clock)
    working.save(SESSION, "k", "before")
    working.save(SESSION, "gone", "deleted below")
    with faults.armed(faults.ROWS_HALF_WRITTEN), pytest.raises(faults.SimulatedCrash):
        working.delete(f"{SESSION}/gone")  # the row deleted, the transaction not committed
    with faults.armed(faults.ROWS_HALF_WRITTEN), pytest.raises(faults.SimulatedCrash):
        working.save(SESSION, "k", "after")
    for reader in (working, PostgresWorkingMemoryStore(db, "a1", clock=clock)):
        assert reader.get(f"{SESSION}/k").value == "before"  # the writer re-reads too
        assert reader.get(f"{SESSION}/gone") is not None
    working.save(SESSION, "k", "after")  # the retry applies
    assert PostgresWorkingMemoryStore(db, "a1", clock=clock).get(f"{SESSION}/k").value == "after"
    db.close()


def test_a_dropped_database_connection_fails_one_call_and_leaves_nothing_half_done(
    database_url, clock
):
    import psycopg

    from dreamkeeper.stores.postgres.database import Database
    from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore

    db = Database(database_url, min_size=1, max_size=1)  # one pooled connection: the victim
    working = PostgresWorkingMemoryStore(db, "a1", clock=clock)
    working.save(SESSION, "k", "before")
    with db.dedicated() as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    with pytest.raises(psycopg.OperationalError):
        working.save(SESSION, "k", "after")
    assert working.get(f"{SESSION}/k").value == "before"  # a fresh connection, old state
    working.save(SESSION, "k", "after")  # the retry applies
    assert PostgresWorkingMemoryStore(db, "a1", clock=clock).get(f"{SESSION}/k").value == "after"
    db.close()
