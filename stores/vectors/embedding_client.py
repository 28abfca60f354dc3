"""An OpenAI-compatible `/v1/embeddings` client (Ollama, vLLM, llama.cpp server, OpenAI),
and `embedding_client()`, which picks it or the in-process local model
(`stores.vectors.local_embeddings`).

Embeddings are an optional improvement, never a dependency: every failure — endpoint
down, a 4xx, a malformed reply, a vector of the wrong length — means "no vector" for
that text, logged, and the caller falls back to keywords. Requests are batched, inputs
truncated at `max_input_chars`, and transient failures (5xx, connection) retried a
bounded number of times.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence

import httpx
import numpy as np

from dreamkeeper.core.settings import EmbeddingSettings
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.vectors.embedder import BATCH_SIZE, QUERY_CACHE, RETRIES, Embedder

log = logging.getLogger(__name__)

QUERY_BACKOFF_SECONDS = 30.0
MAX_REPLY_BYTES = (
    256 * 1_048_576
)  # 64 vectors of thousands of floats, as JSON text  # after a failed query embedding, searches skip it this long


class EmbeddingClient:
    def __init__(
        self, settings: EmbeddingSettings, *, transport: httpx.BaseTransport | None = None
    ):
        if not settings.base_url:
            raise ValueError("EmbeddingClient needs DREAMKEEPER_EMBEDDING_BASE_URL")
        self.settings = settings
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        self._http = httpx.Client(headers=headers, transport=transport)
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._queries_lock = threading.Lock()  # activities call in from several threads
        self._queries_paused_until = 0.0

    @property
    def model_key(self) -> bytes:
        return self.settings.model_key

    def embed(
        self, texts: Sequence[str], *, timeout: float | None = None, retries: int = RETRIES
    ) -> list[np.ndarray | None]:
        """One float32 vector per text, or None where it could not be had."""
        out: list[np.ndarray | None] = [None] * len(texts)
        for start in range(0, len(texts), BATCH_SIZE):
            batch = [t[: self.settings.max_input_chars] for t in texts[start : start + BATCH_SIZE]]
            vectors = self._batch(batch, timeout or self.settings.timeout_seconds, retries)
            out[start : start + len(batch)] = vectors
        return out

    def embed_query(self, text: str) -> np.ndarray | None:
        """A search's query vector: one try with a short timeout, a small LRU cache (a
        turn's context and a tool call often search the same text), and after a failure
        none for a while — a search never waits on an endpoint known to be down."""
        with self._queries_lock:
            cached = self._queries.get(text)
            if cached is not None:
                self._queries.move_to_end(text)
                return cached
            if time.monotonic() < self._queries_paused_until:
                return None
        vector = self.embed([text], timeout=self.settings.query_timeout_seconds, retries=0)[0]
        with self._queries_lock:
            if vector is None:
                self._queries_paused_until = time.monotonic() + QUERY_BACKOFF_SECONDS
                return None
            self._queries[text] = vector
            if len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)
        return vector

    def _batch(self, texts: list[str], timeout: float, retries: int) -> list[np.ndarray | None]:
        url = f"{self.settings.base_url}/embeddings"
        body = {"model": self.settings.model, "input": texts}
        for attempt in range(retries + 1):
            try:
                response = self._http.post(url, json=body, timeout=timeout)
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 400:
                    return self._parse(response, len(texts))
                problem = f"HTTP {response.status_code}"
                if response.status_code < 500:
                    break  # refused: retrying will not help
            if attempt < retries:
                time.sleep(0.2 * 2**attempt)
        log.warning("embeddings unavailable from %s (%s): keyword search only", url, problem)
        return [None] * len(texts)

    def _parse(self, response: httpx.Response, n: int) -> list[np.ndarray | None]:
        try:
            # Bounded and non-recursing: a hostile endpoint's body is refused, not a crash.
            items = safe_json.loads(response.content, max_bytes=MAX_REPLY_BYTES, max_depth=4)[
                "data"
            ]
            if not isinstance(items, list):
                raise TypeError("data is not a list")
            vectors: list[np.ndarray | None] = [None] * n
            for position, item in enumerate(items):
                if not isinstance(item, dict):
                    raise TypeError("an item is not an object")
                index = int(item.get("index", position))
                vector = np.asarray(item["embedding"], dtype=np.float32)
                if (
                    0 <= index < n
                    and vector.ndim == 1
                    and vector.size
                    and np.isfinite(vector).all()
                ):
                    vectors[index] = vector
            return vectors
        except (ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:
            log.warning("malformed embeddings reply (%s): keyword search only", exc)
            return [None] * n

    def close(self) -> None:
        self._http.close()


def embedding_client(settings: EmbeddingSettings) -> Embedder | None:
    """The configured backend — the HTTP endpoint when there is a base URL, else the
    in-process local model when `settings.local` — or None (keyword search only).
    Settings from the environment: `dreamkeeper.core.settings.embedding_settings()`."""
    if settings.base_url:
        return EmbeddingClient(settings)
    if settings.local:
        from dreamkeeper.stores.vectors.local_embeddings import LocalEmbeddings

        return LocalEmbeddings(settings)
    return None
