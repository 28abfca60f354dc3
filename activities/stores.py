"""One long-lived store per agent in a worker process, used by one activity at a time.

Keeping the store open spares every activity a cold open of the corpus; the lock keeps
two activity threads from refreshing or writing the same in-memory index at once
(other processes are excluded by the store's own file lock).

Every store activity goes through `using()`, which also:
- heartbeats from a helper thread while the activity holds the store, so a worker killed
  mid-step is noticed within the heartbeat timeout (seconds), not the start-to-close one;
- checks the caller's store identity (a client on another data directory fails loudly);
- sorts failures for Temporal: bad input, not found, conflicts and store mismatches are
  non-retryable; an unwritable store is retried a few times, then fails for good with
  the reason in the workflow.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import errno
import threading
from collections.abc import Iterator
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from dreamkeeper.core.errors import DreamkeeperError, StoreUnwritable
from dreamkeeper.stores.embedding_client import Embedder
from dreamkeeper.stores.identity import StoreIdentity, check_same, ensure_identity
from dreamkeeper.stores.memory_store import FileMemoryStore

HEARTBEAT_EVERY_SECONDS = 2.0
UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT)
UNWRITABLE_ATTEMPTS = 3  # then the failure is final: retrying a read-only disk is noise


@contextlib.contextmanager
def heartbeating() -> Iterator[None]:
    """Heartbeat every couple of seconds from a helper thread while the block runs (sync,
    non-local activities only; elsewhere it does nothing)."""
    if not activity.in_activity() or activity.info().is_local:
        yield
        return
    stop = threading.Event()
    context = contextvars.copy_context()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_EVERY_SECONDS):
            try:
                context.run(activity.heartbeat)
            except concurrent.futures.TimeoutError:
                continue  # the worker's event loop was busy for 10 s: try again next tick
            except Exception:  # noqa: BLE001 - an async activity's heartbeat; stop quietly
                return

    thread = threading.Thread(target=beat, name="dk-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


class StoreRegistry:
    def __init__(
        self,
        data_dir: Path,
        embeddings: Embedder | None = None,
        identity: StoreIdentity | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.embeddings = embeddings
        self._identity = identity
        self._stores: dict[str, tuple[FileMemoryStore, threading.Lock]] = {}
        self._guard = threading.Lock()

    @property
    def identity(self) -> StoreIdentity:
        if self._identity is None:
            self._identity = ensure_identity(self.data_dir)
        return self._identity

    @contextlib.contextmanager
    def using(
        self, agent_id: str, *, store_id: str | None = None, heartbeat: bool = True
    ) -> Iterator[FileMemoryStore]:
        """The agent's store, held for this activity. `store_id`: the store the caller
        expects (None: whichever this worker has)."""
        with heartbeating() if heartbeat else contextlib.nullcontext():
            try:
                check_same(store_id, self.identity, "the caller")
                with self._guard:
                    if agent_id not in self._stores:
                        store = FileMemoryStore(self.data_dir, agent_id, embeddings=self.embeddings)
                        self._stores[agent_id] = (store, threading.Lock())
                    store, lock = self._stores[agent_id]
                with lock:
                    yield store
            except DreamkeeperError as exc:
                raise ApplicationError(
                    str(exc), type=exc.failure_type, non_retryable=not exc.retryable
                ) from None
            except OSError as exc:
                if exc.errno not in UNWRITABLE:
                    raise
                final = activity.in_activity() and activity.info().attempt >= UNWRITABLE_ATTEMPTS
                raise ApplicationError(
                    f"the store of agent {agent_id} cannot be written ({exc.strerror or exc}: "
                    f"{exc.filename or self.data_dir})",
                    type=StoreUnwritable.failure_type,
                    non_retryable=final,
                ) from None
