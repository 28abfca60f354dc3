"""A store activity cancelled while it holds the agent's store finishes its store work
first: the worker raises the cancellation asynchronously in a sync activity's thread, and
one that landed inside a PostgreSQL store's `finally` left the agent's writer lock on a
pooled session, so every later writer of that agent waited forever (found by
bench/fleet.py under load, when workflow task timeouts cancelled local activities)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from temporalio import activity
from temporalio.exceptions import CancelledError
from temporalio.testing import ActivityEnvironment

from dreamkeeper.activities.stores import StoreRegistry
from dreamkeeper.stores.postgres.backend import PostgresBackend
from dreamkeeper.stores.postgres.memory_store import lock_key

AGENT = "a1"


def _lock_is_free(url: str, key: int) -> bool:
    """Another session takes the agent's writer lock at once (and lets it go)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
        if row and row[0]:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
    return bool(row and row[0])


def test_a_cancelled_store_activity_finishes_its_write_and_lets_go_of_the_lock(
    database_url, tmp_path
):
    registry = StoreRegistry(PostgresBackend(database_url, tmp_path))
    env = ActivityEnvironment()
    inside = threading.Event()
    steps: list[str] = []

    def writes_under_the_lock() -> None:
        with registry.using(AGENT) as store, store.writing():
            inside.set()
            while not activity.is_cancelled():
                time.sleep(0.001)
            # The cancellation is pending now: unshielded, it lands in these sleeps,
            # before the write (or inside the lock's release, had it come later).
            for _ in range(50):
                time.sleep(0.001)
            store.create("The user lives in Chicago.")
            steps.append("written")
        steps.append("not reached: the cancellation is raised as the store is let go")

    outcome: list[BaseException] = []

    def run() -> None:
        try:
            env.run(writes_under_the_lock)
        except BaseException as exc:  # noqa: BLE001 - asserted below
            outcome.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    assert inside.wait(30), "the activity never took the store"
    env.cancel()
    runner.join(30)
    assert not runner.is_alive(), "the activity never finished"

    assert steps == ["written"]
    assert len(outcome) == 1 and isinstance(outcome[0], CancelledError), outcome
    assert [e.content for e in registry.backend.memory(AGENT).entries()] == [
        "The user lives in Chicago."
    ]
    # The bench's later writers of the agent waited forever for this lock.
    assert _lock_is_free(database_url, lock_key(AGENT))


@pytest.fixture(autouse=True)
def _no_payload_key(monkeypatch):
    monkeypatch.delenv("DREAMKEEPER_PAYLOAD_KEY", raising=False)
