"""The change signal of warm reads (stores/postgres/change_watch.py): a warm read with no
change asks the database nothing, and every write is still seen — by another instance of
the process at once, by another process (another `Database`) as soon as its NOTIFY
arrives — and whenever the listener is in doubt (killed, heartbeat stale, an unknown
payload, restarting) reads fall back to the round trip."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from dreamkeeper.stores.postgres import change_watch
from dreamkeeper.stores.postgres.conversation_memory import PostgresConversationStore
from dreamkeeper.stores.postgres.database import Database
from dreamkeeper.stores.postgres.memory_store import PostgresMemoryStore
from dreamkeeper.stores.postgres.working_memory import PostgresWorkingMemoryStore

AGENT = "signal-agent"
SESSION = "session/abc"


def until(condition: Callable[[], bool], what: str, bound: float = 20.0) -> None:
    """Wait for `condition` (a bound only against hanging, never a measured time)."""
    deadline = time.monotonic() + bound
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


class Counted:
    """Counts the round trips a `Database` is asked for (fetch and transactions)."""

    def __init__(self, db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        fetch, transaction = db.fetch, db.transaction

        def counted_fetch(*args, **kwargs):
            self.n += 1
            return fetch(*args, **kwargs)

        def counted_transaction(*args, **kwargs):
            self.n += 1
            return transaction(*args, **kwargs)

        monkeypatch.setattr(db, "fetch", counted_fetch)
        monkeypatch.setattr(db, "transaction", counted_transaction)


@pytest.fixture
def dbs(database_url) -> Iterator[tuple[Database, Database]]:
    """Two `Database`s on one database: two processes, each with its own listener."""
    reader, writer = Database(database_url, max_size=4), Database(database_url, max_size=4)
    yield reader, writer
    for db in (reader, writer):
        change_watch.watch(db).stop()
        db.close()


def warm(read: Callable[[], object], db: Database) -> change_watch.ChangeWatch:
    """Read until the listener is confirmed, then once more: that read's check counts."""
    watch = change_watch.watch(db)
    read()
    until(lambda: watch.live, "the listener confirmed")
    read()
    return watch


def test_warm_long_term_read_asks_nothing(dbs, monkeypatch):
    reader, writer = dbs
    PostgresMemoryStore(writer, AGENT).create("Trish Roberts lives in Ghent.")
    store = PostgresMemoryStore(reader, AGENT)
    warm(store.entries, reader)
    counted = Counted(reader, monkeypatch)
    for _ in range(5):
        assert len(store.entries()) == 1
    assert counted.n == 0


def test_long_term_writes_are_seen(dbs):
    reader, writer = dbs
    store = PostgresMemoryStore(reader, AGENT)
    watch = warm(store.entries, reader)
    # Another instance of this process: seen on the very next read, NOTIFY or not.
    here = PostgresMemoryStore(reader, AGENT).create("Written by a sibling instance.")
    assert store.get(here.id) == here
    # Another process: seen once its NOTIFY arrives (never skipped past).
    there = PostgresMemoryStore(writer, AGENT).create("Written by another process.")
    until(lambda: store.get(there.id) is not None, "the other process's write read")
    # Once a heartbeat sent after another process's write was acknowledged has come back,
    # that write is seen by the very next read: notifications arrive in commit order.
    later = PostgresMemoryStore(writer, AGENT).create("Acknowledged before a heartbeat.")
    acked = time.monotonic()
    until(lambda: watch._last_beat > acked, "a heartbeat sent after the write came back")
    assert store.get(later.id) == later


def test_warm_working_read_asks_nothing_and_sees_writes(dbs, monkeypatch):
    reader, writer = dbs
    store = PostgresWorkingMemoryStore(reader, AGENT)
    key = PostgresWorkingMemoryStore(writer, AGENT).save(SESSION, "inbox", "12 unread").key
    warm(lambda: store.get(key), reader)
    counted = Counted(reader, monkeypatch)
    for _ in range(5):
        assert store.get(key).value == "12 unread"
    assert counted.n == 0
    monkeypatch.undo()
    PostgresWorkingMemoryStore(reader, AGENT).save(SESSION, "inbox", "13 unread")
    assert store.get(key).value == "13 unread"
    PostgresWorkingMemoryStore(writer, AGENT).save(SESSION, "inbox", "14 unread")
    until(lambda: store.get(key).value == "14 unread", "the other write read")


def test_warm_conversation_read_asks_nothing_and_sees_writes(dbs, monkeypatch):
    reader, writer = dbs
    now = [datetime.now(UTC)]
    store = PostgresConversationStore(reader, AGENT, clock=lambda: now[0])
    PostgresConversationStore(writer, AGENT).add_turn("s1", "user", "hello")
    warm(lambda: store.conversation("s1"), reader)
    counted = Counted(reader, monkeypatch)
    for _ in range(5):
        assert [t.content for t in store.conversation("s1").turns] == ["hello"]
    assert counted.n == 0
    # The idle rule still holds on a skipped read: past it, the session is over.
    now[0] += timedelta(days=2)
    assert store.conversation("s1").turns == ()
    assert counted.n == 0
    now[0] -= timedelta(days=2)
    monkeypatch.undo()
    PostgresConversationStore(reader, AGENT).add_turn("s1", "assistant", "hi")
    assert len(store.conversation("s1")) == 2
    PostgresConversationStore(writer, AGENT).add_turn("s1", "user", "bye")
    until(lambda: len(store.conversation("s1")) == 3, "the other process's turn read")


def _listener_pids(db: Database) -> list[int]:
    rows = db.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND (query LIKE 'SELECT pg_notify(%%' OR query LIKE 'LISTEN%%')"
    )
    return [int(pid) for (pid,) in rows]


def test_killed_listener_falls_back_to_round_trips(dbs, monkeypatch):
    reader, writer = dbs
    store = PostgresMemoryStore(reader, AGENT)
    watch = warm(store.entries, reader)
    watch.heartbeats = False  # the restarted listener stays unconfirmed: round trips
    pids = _listener_pids(writer)
    assert pids
    writer.fetch("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) pid", (pids,))
    until(lambda: not watch.live, "the listener's loss noticed")
    counted = Counted(reader, monkeypatch)
    for n in range(3):
        entry = PostgresMemoryStore(writer, AGENT).create(f"Written while deaf, number {n}.")
        assert store.get(entry.id) == entry  # at once: no skip without a live listener
    assert counted.n >= 3
    assert reader.failure is None


def test_stale_heartbeat_means_round_trips(dbs, monkeypatch):
    reader, _ = dbs
    store = PostgresMemoryStore(reader, AGENT)
    store.create("Trish Roberts lives in Ghent.")
    watch = warm(store.entries, reader)
    watch.heartbeats = False
    now = time.monotonic()
    monkeypatch.setattr(watch, "_clock", lambda: now + 10 * change_watch.STALE_SECONDS)
    counted = Counted(reader, monkeypatch)
    store.entries()
    assert counted.n == 1


def test_unknown_payload_means_round_trips(dbs, monkeypatch):
    reader, writer = dbs
    store = PostgresMemoryStore(reader, AGENT)
    watch = warm(store.entries, reader)
    writer.fetch("SELECT pg_notify(%s, 'not a payload we know')", (change_watch.CHANNEL,))
    until(lambda: watch.unknown == 1, "the unknown payload handled")
    counted = Counted(reader, monkeypatch)
    store.entries()
    assert counted.n == 1


def test_write_before_the_listener_is_confirmed_is_seen(dbs):
    """The race of a restart: the store checks while the listener is not yet confirmed,
    a write commits, then the listener confirms. The store's check predates LISTEN being
    proven, so the next read must ask again and see that write."""
    reader, writer = dbs
    store = PostgresMemoryStore(reader, AGENT)
    watch = warm(store.entries, reader)
    watch.stop()
    watch.heartbeats = False  # the listener restarts but cannot confirm yet
    assert store.entries() == []  # a real check, by a token of no confirmed session
    entry = PostgresMemoryStore(writer, AGENT).create("Written during the restart.")
    watch.heartbeats = True
    until(lambda: watch.live, "the listener confirmed")
    assert store.get(entry.id) == entry


def test_listener_failure_leaves_the_database_alone(database_url, monkeypatch):
    db = Database(database_url, max_size=2)
    watch = change_watch.ChangeWatch(db)
    monkeypatch.setattr(watch, "_url", database_url.replace("dk_test", "dk_missing"))
    token = watch.token()
    until(lambda: watch._thread is not None and not watch._thread.is_alive(), "it gave up")
    assert not watch.unchanged(change_watch.MEMORY_TIER, AGENT, token)
    assert db.failure is None
    db.ping()
    db.close()


def test_too_many_marks_forget_all(database_url):
    db = Database(database_url, max_size=2)
    watch = change_watch.watch(db)
    store = PostgresMemoryStore(db, AGENT)
    warm(store.entries, db)
    token = watch.token()
    assert token.session
    for n in range(change_watch.MAX_MARKS + 1):  # one past the cap: every mark forgotten
        watch.mark(change_watch.WORKING_TIER, f"agent-{n}")
    assert not watch.unchanged(change_watch.MEMORY_TIER, AGENT, token)
    watch.stop()
    db.close()


def test_notification_is_sent_on_commit_only(database_url):
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {change_watch.CHANNEL}")
        db = Database(database_url, max_size=2)
        with pytest.raises(RuntimeError), db.transaction() as conn:
            conn.execute(
                "INSERT INTO dreamkeeper_working_agents (agent_id, version) VALUES ('gone', 1)"
            )
            raise RuntimeError("rolled back")
        with db.transaction() as conn:
            conn.execute(
                "INSERT INTO dreamkeeper_working_agents (agent_id, version) VALUES ('kept', 1)"
            )
        got = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
        assert got == ["working:kept"]
        db.close()


def test_idle_listener_stops_and_restarts_on_demand(dbs, monkeypatch):
    reader, writer = dbs
    store = PostgresMemoryStore(reader, AGENT)
    watch = warm(store.entries, reader)
    thread = watch._thread
    assert thread is not None
    later = time.monotonic() + 2 * change_watch.IDLE_SECONDS
    monkeypatch.setattr(watch, "_clock", lambda: later)  # nobody asked for the idle time
    thread.join(timeout=20)
    assert not thread.is_alive() and not watch.live
    monkeypatch.undo()
    entry = PostgresMemoryStore(writer, AGENT).create("Written while nobody listened.")
    assert store.get(entry.id) == entry  # the listener's session changed: a round trip
    warm(store.entries, reader)
    counted = Counted(reader, monkeypatch)
    store.entries()
    assert counted.n == 0  # restarted on demand, and warm reads skip again


# -- whether an agent has a store here (serve asks it on every read) ---------------------


def _backend(db: Database, database_url: str):
    from dreamkeeper.stores.postgres.backend import PostgresBackend

    backend = PostgresBackend(database_url)
    backend.db = db  # this "process's" database, with its own listener
    return backend


def test_has_agent_asks_once_while_nothing_changes(dbs, database_url, monkeypatch):
    reader, writer = dbs
    PostgresMemoryStore(writer, AGENT).create("Trish Roberts lives in Ghent.")
    backend = _backend(reader, database_url)
    assert backend.has_agent(AGENT)
    until(lambda: change_watch.watch(reader).live, "the listener confirmed")
    assert backend.has_agent(AGENT)  # this check's token was taken while confirmed
    counted = Counted(reader, monkeypatch)
    assert all(backend.has_agent(AGENT) for _ in range(5))
    assert counted.n == 0
    # An unknown agent is always asked (a first write elsewhere may create it).
    assert not backend.has_agent("nobody-here")
    assert not backend.has_agent("nobody-here")
    assert counted.n == 2


def test_an_agent_forgotten_elsewhere_is_unknown_once_its_signal_arrives(dbs, database_url):
    reader, writer = dbs
    PostgresMemoryStore(writer, AGENT).create("Trish Roberts lives in Ghent.")
    backend = _backend(reader, database_url)
    backend.has_agent(AGENT)
    until(lambda: change_watch.watch(reader).live, "the listener confirmed")
    assert backend.has_agent(AGENT)
    _backend(writer, database_url).forgetting().forget_agent(AGENT)  # another process
    until(lambda: not backend.has_agent(AGENT), "the forgotten agent unknown")


def test_a_forget_of_this_process_is_seen_at_once(dbs, database_url, monkeypatch):
    reader, _ = dbs
    PostgresMemoryStore(reader, AGENT).create("Trish Roberts lives in Ghent.")
    backend = _backend(reader, database_url)
    watch = change_watch.watch(reader)
    backend.has_agent(AGENT)
    until(lambda: watch.live, "the listener confirmed")
    monkeypatch.setattr(watch, "_live", lambda: True)  # no heartbeat doubt in this test
    token = watch.token()
    assert watch.unchanged(change_watch.WORKING_TIER, AGENT, token)
    backend.forgetting().forget_agent(AGENT)
    # The agent had no working-memory row, so no NOTIFY names that tier: only the
    # forget's own marks, made as it committed, say it changed.
    assert not watch.unchanged(change_watch.WORKING_TIER, AGENT, token)
    assert not backend.has_agent(AGENT)
