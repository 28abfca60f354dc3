"""What the stores need of an embedding backend (`Embedder`), and the limits every
backend shares. The HTTP client (`stores.vectors.embedding_client`) and the in-process model
(`stores.vectors.local_embeddings`) both implement it; neither imports the other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from dreamkeeper.core.settings import EmbeddingSettings

BATCH_SIZE = 64  # texts per request (or per model run)
RETRIES = 2
QUERY_CACHE = 256  # query vectors kept, most recent first


class Embedder(Protocol):
    """What the stores need of an embedding backend: `EmbeddingClient` (HTTP) and
    `LocalEmbeddings` (in-process) both provide it."""

    settings: EmbeddingSettings

    @property
    def model_key(self) -> bytes: ...

    def embed(
        self, texts: Sequence[str], *, timeout: float | None = None, retries: int = RETRIES
    ) -> list[np.ndarray | None]: ...

    def embed_query(self, text: str) -> np.ndarray | None: ...

    def close(self) -> None: ...
