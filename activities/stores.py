"""Long-lived stores per agent in a worker process, each used by one activity at a time.

Keeping stores open (a bounded LRU: count and approximate memory) spares most
activities a cold open of the corpus; the lock keeps
two activity threads from refreshing or writing the same in-memory index at once
(other processes are excluded by the store's own lock: a file lock, or the database's).

Every store activity goes through `using()`, which also:
- heartbeats (from the worker's one `Heartbeats` thread) while the activity holds the
  store, so a worker killed mid-step is noticed within the heartbeat timeout (seconds),
  not the start-to-close one;
- defers the worker's cancellation (raised asynchronously in a sync activity's thread)
  until the store is let go, so no store operation is cut off halfway;
- checks the caller's store identity (a client on another data directory or database
  fails loudly);
- sorts failures for Temporal: bad input, not found, conflicts and store mismatches are
  non-retryable (the first three benign: logged quietly, as a caller's mistake); an
  unwritable store is retried a few times, then fails for good with
  the reason in the workflow.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import dataclasses
import errno
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from dreamkeeper.core.errors import (
    Conflict,
    DreamkeeperError,
    InvalidInput,
    NotFound,
    StoreMismatch,
    StoreUnwritable,
)
from dreamkeeper.core.settings import StoreSettings
from dreamkeeper.stores.backends import open_backend
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.contract.backend import StoreBackend
from dreamkeeper.stores.contract.identity import StoreIdentity, check_same
from dreamkeeper.stores.vectors.embedder import Embedder

HEARTBEAT_EVERY_SECONDS = 2.0
UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT)
UNWRITABLE_ATTEMPTS = 3  # then the failure is final: retrying a read-only disk is noise


class Heartbeats:
    """One daemon thread per worker process that heartbeats every store activity in
    progress, started by the worker before any activity runs.

    Why not a thread per activity: the worker cancels a sync activity by raising an
    exception asynchronously in its thread, and one that lands inside `Thread.start()`
    leaves a half-born thread and an activity thread blocked forever waiting for it to
    start, which hangs the worker's shutdown. An activity here only adds and removes
    itself from a dict, shielded from that exception.
    """

    def __init__(self, every_seconds: float = HEARTBEAT_EVERY_SECONDS) -> None:
        self.every_seconds = every_seconds
        self._active: dict[int, contextvars.Context] = {}
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None
        self._next_key = 0

    def start(self) -> None:
        """Start the thread (idempotent). Call it outside any activity."""
        with self._guard:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dk-heartbeat", daemon=True)
                self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def add(self, context: contextvars.Context) -> int:
        with self._guard:
            self._next_key += 1
            self._active[self._next_key] = context
            return self._next_key

    def discard(self, key: int) -> None:
        with self._guard:
            self._active.pop(key, None)

    def active(self) -> int:
        with self._guard:
            return len(self._active)

    def _run(self) -> None:
        while True:
            time.sleep(self.every_seconds)
            with self._guard:
                beating = list(self._active.items())
            for key, context in beating:
                try:
                    context.run(activity.heartbeat)
                except concurrent.futures.TimeoutError:
                    continue  # the worker's event loop was busy for 10 s: try next tick
                except Exception:  # noqa: BLE001 - the activity is gone: stop beating it
                    self.discard(key)


HEARTBEATS = Heartbeats()


@contextlib.contextmanager
def heartbeating() -> Iterator[None]:
    """Heartbeat every couple of seconds while the block runs (sync, non-local activities
    of a process whose worker started `HEARTBEATS`; elsewhere it does nothing)."""
    heartbeats = HEARTBEATS
    if not heartbeats.running or not activity.in_activity() or activity.info().is_local:
        yield
        return
    # Shielded: a cancellation landing between the add and the try would leave a finished
    # activity registered (harmless, dropped on its first failed beat, but noisy).
    with activity.shield_thread_cancel_exception():
        key = heartbeats.add(contextvars.copy_context())
    try:
        yield
    finally:
        heartbeats.discard(key)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Within an activity: the worker's asynchronous cancellation waits for the block's
    end (`guarded`); elsewhere, nothing."""
    if not activity.in_activity():
        yield
        return
    with activity.shield_thread_cancel_exception():
        yield


@dataclasses.dataclass
class _Open:
    store: MemoryStore
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    users: int = 0  # activities holding or waiting for it: never evicted meanwhile
    dropped: bool = False  # a forget changed the store under it: gone once no one holds it


def failure_category(exc: DreamkeeperError) -> ApplicationErrorCategory:
    """A caller's mistake (bad input, no such entry, a conflicting write) is an answer,
    not a fault of the worker: benign, so the SDK logs it at DEBUG instead of a warning
    with a traceback ("Completing activity as failed") that an operator would chase. A
    store mismatch is a deployment fault and stays loud."""
    if isinstance(exc, InvalidInput | NotFound | Conflict) and not isinstance(exc, StoreMismatch):
        return ApplicationErrorCategory.BENIGN
    return ApplicationErrorCategory.UNSPECIFIED


class StoreRegistry:
    """Open stores by agent, opened lazily (on first use) and kept in a bounded LRU: at
    most `max_open` stores and about `max_memory_mb` of them (`approx_bytes`); the least
    recently used store no activity holds is dropped first. Dropping one costs only its
    next open — from its index snapshot, a blink for a store of any size. `backend`: where
    the stores are (`stores.backends.open_backend`), or a data directory: the backend
    its settings name."""

    def __init__(
        self,
        backend: StoreBackend | Path,
        embeddings: Embedder | None = None,
        identity: StoreIdentity | None = None,
        *,
        max_open: int = 256,
        max_memory_mb: int = 1_024,
        misrouted: Callable[[str], str | None] | None = None,
    ) -> None:
        # A data directory is its settings' backend, as the switch chooses it.
        self.backend: StoreBackend = (
            open_backend(StoreSettings(data_dir=Path(backend)))
            if isinstance(backend, Path | str)
            else backend
        )
        self.embeddings = embeddings
        self._identity = identity
        self._stores: OrderedDict[str, _Open] = OrderedDict()
        self._guard = threading.Lock()
        self.max_open = max_open
        self.max_bytes = max_memory_mb * 1_048_576
        self.evicted = 0
        # agent id -> why this worker must not serve it (another shard owns it), or None
        self._misrouted = misrouted

    @property
    def identity(self) -> StoreIdentity:
        if self._identity is None:
            self._identity = self.backend.identity()
        return self._identity

    def open_agents(self) -> list[str]:
        """The agents whose stores are open, least recently used first."""
        with self._guard:
            return list(self._stores)

    def approx_bytes(self) -> int:
        with self._guard:
            return sum(o.store.approx_bytes() for o in self._stores.values())

    def _acquire(self, agent_id: str) -> _Open:
        with self._guard:
            opened = self._stores.get(agent_id)
            if opened is None:
                store = self.backend.memory(agent_id, embeddings=self.embeddings)
                opened = self._stores[agent_id] = _Open(store)
            self._stores.move_to_end(agent_id)
            opened.users += 1
            return opened

    def _release(self, opened: _Open) -> None:
        with self._guard:
            opened.users -= 1
            self._evict()

    def drop(self, agent_id: str) -> None:
        """Let go of the agent's open store (after a forget: what it holds in memory may
        be erased content); its next use opens it afresh. One that an activity holds
        goes when the last holder lets go, so no two open stores of an agent ever
        write side by side in this process."""
        with self._guard:
            opened = self._stores.get(agent_id)
            if opened is None:
                return
            if opened.users == 0:
                del self._stores[agent_id]
            else:
                opened.dropped = True

    def _evict(self) -> None:
        """Under the guard: drop idle stores, oldest first, until within both bounds."""
        for agent_id, opened in list(self._stores.items()):
            if opened.dropped and opened.users == 0:
                del self._stores[agent_id]
        total = sum(o.store.approx_bytes() for o in self._stores.values())
        for agent_id, opened in list(self._stores.items()):
            if len(self._stores) <= self.max_open and total <= self.max_bytes:
                return
            if opened.users == 0:
                total -= opened.store.approx_bytes()
                del self._stores[agent_id]
                self.evicted += 1

    @contextlib.contextmanager
    def using(
        self, agent_id: str, *, store_id: str | None = None, heartbeat: bool = True
    ) -> Iterator[MemoryStore]:
        """The agent's store, held for this activity. `store_id`: the store the caller
        expects (None: whichever this worker has)."""
        with self.guarded(agent_id, store_id=store_id, heartbeat=heartbeat):
            opened = self._acquire(agent_id)
            try:
                with opened.lock:
                    yield opened.store
            finally:
                self._release(opened)

    @contextlib.contextmanager
    def guarded(
        self, agent_id: str, *, store_id: str | None = None, heartbeat: bool = True
    ) -> Iterator[None]:
        """What every store activity runs under, whether or not it holds the agent's open
        store (`using` does): heartbeats, the caller's store and this worker's shard
        checked first, and failures sorted for Temporal.

        Shielded from the cancellation the worker raises asynchronously in a sync
        activity's thread: one that lands inside a store operation can skip its
        `finally` (a PostgreSQL store's `pg_advisory_unlock`, so the pooled session keeps
        the agent's writer lock and every later writer of the agent waits forever, as
        the fleet bench saw under load) or interrupt psycopg mid-command. The
        cancellation is raised once the store is let go; the step either ran whole or
        not at all, and a retry of it is idempotent (invariant 9)."""
        with shielded(), heartbeating() if heartbeat else contextlib.nullcontext():
            try:
                check_same(store_id, self.identity, "the caller")
                if self._misrouted is not None and (why := self._misrouted(agent_id)):
                    raise StoreMismatch(why)
                yield
            except DreamkeeperError as exc:
                raise ApplicationError(
                    str(exc),
                    type=exc.failure_type,
                    non_retryable=not exc.retryable,
                    category=failure_category(exc),
                ) from None
            except OSError as exc:
                if exc.errno not in UNWRITABLE:
                    raise
                final = activity.in_activity() and activity.info().attempt >= UNWRITABLE_ATTEMPTS
                raise ApplicationError(
                    f"the store of agent {agent_id} cannot be written ({exc.strerror or exc}: "
                    f"{exc.filename or self.backend.location})",
                    type=StoreUnwritable.failure_type,
                    non_retryable=final,
                ) from None
