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

from temporalio.exceptions import ApplicationError

from dreamkeeper.stores.embedding_client import EmbeddingClient
from dreamkeeper.stores.memory_store import FileMemoryStore
from dreamkeeper.stores.validation import InvalidInput


class StoreRegistry:
    def __init__(self, data_dir: Path, embeddings: EmbeddingClient | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.embeddings = embeddings
        self._stores: dict[str, tuple[FileMemoryStore, threading.Lock]] = {}
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def using(self, agent_id: str) -> Iterator[FileMemoryStore]:
        """The agent's store, held for this activity. Bad input raised inside becomes a
        non-retryable `InvalidInput` failure: retrying cannot fix it."""
        try:
            with self._guard:
                if agent_id not in self._stores:
                    store = FileMemoryStore(self.data_dir, agent_id, embeddings=self.embeddings)
                    self._stores[agent_id] = (store, threading.Lock())
                store, lock = self._stores[agent_id]
            with lock:
                yield store
        except InvalidInput as exc:
            raise ApplicationError(str(exc), type="InvalidInput", non_retryable=True) from None
