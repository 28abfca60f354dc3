"""Store activities heartbeat from the worker's one thread, never from a thread started
inside the activity: a cancellation raised asynchronously in a sync activity's thread
that lands inside `Thread.start()` leaves the activity blocked forever (a worker that
cannot shut down, a test session that never exits)."""

from __future__ import annotations

import contextlib
import threading

import pytest
from temporalio import activity
from temporalio.exceptions import CancelledError
from temporalio.testing import ActivityEnvironment

from dreamkeeper.activities.stores import Heartbeats, StoreRegistry
from dreamkeeper.stores.files.memory_store import FileMemoryStore


@pytest.fixture
def heartbeats(monkeypatch):
    beats = Heartbeats(every_seconds=0.005)
    beats.start()
    monkeypatch.setattr("dreamkeeper.activities.stores.HEARTBEATS", beats)
    return beats


def test_a_store_activity_starts_no_thread_and_still_heartbeats(tmp_path, heartbeats, monkeypatch):
    FileMemoryStore(tmp_path, "a1").create("The user lives in Chicago.")
    registry = StoreRegistry(tmp_path)
    started_in_activity: list[str] = []
    real_start = threading.Thread.start

    def spying_start(self):
        if activity.in_activity():
            started_in_activity.append(self.name)
        return real_start(self)

    monkeypatch.setattr(threading.Thread, "start", spying_start)
    beat = threading.Event()
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beat.set()

    def holds_the_store() -> int:
        with registry.using("a1") as store:
            assert heartbeats.active() == 1
            assert beat.wait(30), "no heartbeat reached the worker while the store was held"
            return len(store.entries())

    assert env.run(holds_the_store) == 1
    assert started_in_activity == []
    assert heartbeats.active() == 0


def test_cancelling_store_activities_at_any_moment_never_hangs_or_leaks(tmp_path, heartbeats):
    """The stress form of the race: 200 activities, each cancelled from another thread
    at a different point of entering or leaving the store."""
    FileMemoryStore(tmp_path, "a1").create("The user lives in Chicago.")
    registry = StoreRegistry(tmp_path)
    threads_before = threading.active_count()
    outcomes = {"done": 0, "cancelled": 0}
    for attempt in range(200):
        env = ActivityEnvironment()
        started, inside = threading.Event(), threading.Event()

        def step(warmups: int = attempt % 7, started=started, inside=inside) -> None:
            started.set()
            for _ in range(warmups):
                with registry.using("a1") as store:
                    store.entries()
            inside.set()
            with registry.using("a1") as store:
                store.entries()

        runner_error: list[BaseException] = []

        def run(env=env, step=step, errors=runner_error) -> None:
            try:
                env.run(step)
                outcomes["done"] += 1
            except CancelledError:
                outcomes["cancelled"] += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        runner = threading.Thread(target=run)
        runner.start()
        started.wait(30)  # ActivityEnvironment.cancel() races with run() registering it
        if attempt % 2:
            inside.wait(30)
        with contextlib.suppress(RuntimeError):
            # ActivityEnvironment.cancel() iterates a set that run() empties when the
            # activity ends: an activity that finished first simply was not cancelled.
            env.cancel()
        runner.join(30)
        assert not runner.is_alive(), f"attempt {attempt}: the activity never finished"
        assert runner_error == []
    assert outcomes["done"] + outcomes["cancelled"] == 200
    assert heartbeats.active() == 0
    assert threading.active_count() <= threads_before
