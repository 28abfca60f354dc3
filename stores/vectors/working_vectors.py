"""Vectors for working memory: made on a background thread after a save (a save never
waits), stored keyed to the value's fingerprint by a backend's `VectorStorage` (files of
`stores.files.working_vectors`, or rows of `stores.postgres.working_memory`), read
through a cache, and deleted when their entry leaves."""

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


class VectorStorage(Protocol):
    """Where a backend keeps working-memory vectors, one per entry key."""

    def read(self, key: str, fingerprint: str, model_key: bytes, dim: int) -> np.ndarray | None:
        """The key's vector if one is stored for this value fingerprint and model."""
        ...

    def write(self, key: str, vector: np.ndarray, fingerprint: str, model_key: bytes) -> None: ...

    def remove(self, key: str) -> None: ...

    def prune(self, live: set[str]) -> int:
        """Delete the vectors of keys not in `live`; returns how many went."""
        ...


class WorkingVectors:
    """The vectors of working-memory entries, made in the background and read through a
    cache, kept by `storage`."""

    def __init__(self, client: Embedder, storage: VectorStorage) -> None:
        self.client = client
        self.storage = storage
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
        vector = self.storage.read(key, fingerprint, self.client.model_key, dim)
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
        self.storage.remove(key)

    def forget_cached(self, keys: Iterable[str]) -> None:
        """Drop what is cached of keys whose stored vectors the storage deleted itself
        (in a transaction of its own, which a `forget` here would wait on)."""
        for key in keys:
            self._cache.pop(key, None)

    def prune(self, live_keys: Iterable[str]) -> int:
        """Delete stored vectors of keys no longer live (an entry that left while its
        vector was still being made leaves one behind); returns how many went."""
        live = set(live_keys)
        self._cache = {k: v for k, v in self._cache.items() if k in live}
        return self.storage.prune(live)

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
            self.storage.write(key, vector, content_fingerprint(value), self.client.model_key)
