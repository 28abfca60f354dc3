"""One long-lived store per agent in a worker process, used by one activity at a time.

Keeping the store open spares every activity a cold open of the corpus; the lock keeps
two activity threads from refreshing or writing the same in-memory index at once
(other processes are excluded by the store's own file lock).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

from dreamkeeper.stores.memory_store import FileMemoryStore


class StoreRegistry:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self._stores: dict[str, tuple[FileMemoryStore, threading.Lock]] = {}
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def using(self, agent_id: str) -> Iterator[FileMemoryStore]:
        with self._guard:
            if agent_id not in self._stores:
                self._stores[agent_id] = (
                    FileMemoryStore(self.data_dir, agent_id),
                    threading.Lock(),
                )
            store, lock = self._stores[agent_id]
        with lock:
            yield store
