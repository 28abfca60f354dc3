"""Vectors for working memory: made on a background thread after a save (a save never
waits), stored keyed to the value's fingerprint (files of `stores.files.working_vectors`,
or rows), read through a cache, and deleted when their entry leaves."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Protocol

import numpy as np

from dreamkeeper.core.models import content_fingerprint
from dreamkeeper.stores.vectors.embedder import Embedder
from dreamkeeper.stores.vectors.vectors import unit


class _Keyed(Protocol):
    key: str
    value: str


def vector_name(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]


class WorkingVectorsBase:
    """The vectors of working-memory entries, made in the background and read through a
    cache; a backend stores them (`_read_stored`, `_write_stored`, `_remove_stored`,
    `_prune_stored`)."""

    def __init__(self, client: Embedder) -> None:
        self.client = client
        self._executor: ThreadPoolExecutor | None = None
        self._pending: set[Future] = set()
        self._lock = threading.Lock()
        # key -> (value fingerprint, unit vector): a search reads each file once, not
        # on every call. Misses are not cached: the vector may still be on its way.
        self._cache: dict[str, tuple[str, np.ndarray]] = {}

    def query(self, text: str) -> np.ndarray | None:
        return self.client.embed_query(text)

    def similar(self, query_vector: np.ndarray, entries: Iterable[_Keyed]) -> dict[str, float]:
        """Cosine of the entries with a current vector, those at the minimum or above."""
        threshold = self.client.settings.min_similarity
        return {k: c for k, c in self.cosines(query_vector, entries).items() if c >= threshold}

    def cosines(self, query_vector: np.ndarray, entries: Iterable[_Keyed]) -> dict[str, float]:
        """Cosine of every entry with a current vector."""
        query = unit(query_vector)
        out = {}
        for entry in entries:
            vector = self._vector(entry.key, content_fingerprint(entry.value), query.size)
            if vector is not None:
                out[entry.key] = float(vector @ query)
        return out

    def _vector(self, key: str, fingerprint: str, dim: int) -> np.ndarray | None:
        cached = self._cache.get(key)
        if cached is not None and cached[0] == fingerprint and cached[1].size == dim:
            return cached[1]
        vector = self._read_stored(key, fingerprint, dim)
        if vector is None:
            return None
        self._cache[key] = (fingerprint, unit(vector))
        return self._cache[key][1]

    def embed_later(self, key: str, value: str) -> None:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="dk-working-embed")
            future = self._executor.submit(self._embed, key, value)
            self._pending.add(future)
        future.add_done_callback(self._done)

    def forget(self, key: str) -> None:
        self._cache.pop(key, None)
        self._remove_stored(key)

    def prune(self, live_keys: Iterable[str]) -> int:
        """Delete stored vectors of keys no longer live (an entry that left while its
        vector was still being made leaves one behind); returns how many went."""
        live = set(live_keys)
        self._cache = {k: v for k, v in self._cache.items() if k in live}
        return self._prune_stored(live)

    def wait(self, timeout: float | None = None) -> None:
        with self._lock:
            pending = set(self._pending)
        wait(pending, timeout=timeout)

    def _done(self, future: Future) -> None:
        with self._lock:
            self._pending.discard(future)

    def _embed(self, key: str, value: str) -> None:
        vector = self.client.embed([value])[0]
        if vector is not None:
            self._write_stored(key, vector, content_fingerprint(value))

    def _read_stored(self, key: str, fingerprint: str, dim: int) -> np.ndarray | None:
        raise NotImplementedError

    def _write_stored(self, key: str, vector: np.ndarray, fingerprint: str) -> None:
        raise NotImplementedError

    def _remove_stored(self, key: str) -> None:
        raise NotImplementedError

    def _prune_stored(self, live: set[str]) -> int:
        raise NotImplementedError
