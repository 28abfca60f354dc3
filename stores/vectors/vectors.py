"""Embedding vectors as stored and in memory.

Stored form (a file `memory/.embeddings/{id}.bin` of `stores.files.vector_files`, or a
row): a 20-byte header — `DKV1`, the
content fingerprint the vector was made from (8 bytes), the model key (4 bytes), the
dimension (uint32 LE) — then the vector as raw float32 little-endian. The header keys
the vector to the text and the model: after an edit, or with another model, the file is
stale and never used; a file whose length disagrees with its dimension is ignored. Stale
or missing vectors are regenerated in the background (`stores.vectors.backfill`).

In memory, `VectorIndex` keeps unit-length rows in one contiguous float32 matrix, so a
query's cosine against every entry is one matrix-vector product. `EntryVectors` keeps
it in step with a store: the store marks ids whose entry or vector changed, and the next
search reads just those again.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping

import numpy as np

MAGIC = b"DKV1"
HEADER = struct.Struct("<4s8s4sI")
HEADER_BYTES = HEADER.size  # 20


def encode_vector(vector: np.ndarray, fingerprint: str, model_key: bytes) -> bytes:
    data = np.asarray(vector, dtype="<f4")
    return HEADER.pack(MAGIC, bytes.fromhex(fingerprint), model_key, data.size) + data.tobytes()


def decode_vector(
    data: bytes, fingerprint: str, model_key: bytes, dim: int | None = None
) -> np.ndarray | None:
    """The vector if it was made from this content by this model (and has `dim`
    components, when given); None for anything stale, foreign or malformed."""
    if len(data) < HEADER_BYTES:
        return None
    magic, made_from, model, size = HEADER.unpack_from(data)
    if magic != MAGIC or made_from.hex() != fingerprint or model != model_key:
        return None
    if size == 0 or len(data) != HEADER_BYTES + 4 * size or (dim is not None and size != dim):
        return None
    vector = np.frombuffer(data, dtype="<f4", offset=HEADER_BYTES).astype(np.float32)
    return vector if np.isfinite(vector).all() and np.any(vector) else None


def decode_any_model(data: bytes, fingerprint: str) -> tuple[bytes, np.ndarray] | None:
    """The model key and the vector, if it was made from this content by any model (an
    export carries it to a store whose model may match)."""
    if len(data) < HEADER_BYTES:
        return None
    magic, made_from, model, size = HEADER.unpack_from(data)
    if magic != MAGIC or made_from.hex() != fingerprint:
        return None
    if size == 0 or len(data) != HEADER_BYTES + 4 * size:
        return None
    return model, np.frombuffer(data, dtype="<f4", offset=HEADER_BYTES)


def unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return (vector / norm).astype(np.float32) if norm > 0 else vector.astype(np.float32)


class VectorIndex:
    """Unit rows of one dimension in a contiguous matrix; removal frees a row for reuse."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._matrix = np.zeros((64, dim), dtype=np.float32)
        self._row: dict[str, int] = {}
        self._ids: list[str | None] = []
        self._live = np.zeros(64, dtype=np.bool_)
        self._free: list[int] = []
        self.version = 0  # bumped when a key gains or loses its row, or its live flag

    @classmethod
    def from_rows(
        cls, dim: int, matrix: np.ndarray, ids: list[str | None], live: np.ndarray
    ) -> VectorIndex:
        """An index over existing unit rows (a mapped vector pack): `matrix` is used as
        it is, so it must be writable (a private mapping) for later puts."""
        index = cls(dim)
        if matrix.shape != (len(ids), dim) or live.shape != (len(ids),):
            raise ValueError("rows, ids and live flags disagree")
        index._matrix = matrix
        index._ids = list(ids)
        index._row = {k: r for r, k in enumerate(ids) if k is not None}
        if len(index._row) != sum(k is not None for k in ids):
            raise ValueError("an id has two rows")
        index._free = [r for r, k in enumerate(ids) if k is None]
        index._live = live.copy()
        index._live[[r for r, k in enumerate(ids) if k is None]] = False
        return index

    def __len__(self) -> int:
        return len(self._row)

    def __contains__(self, key: str) -> bool:
        return key in self._row

    def get(self, key: str) -> np.ndarray | None:
        row = self._row.get(key)
        return None if row is None else self._matrix[row]

    def put(self, key: str, vector: np.ndarray, *, live: bool = True) -> None:
        if vector.shape != (self.dim,):
            raise ValueError(f"vector of {vector.shape} in an index of dimension {self.dim}")
        row = self._row.get(key)
        if row is None:
            row = self._free.pop() if self._free else len(self._ids)
            if row == len(self._ids):
                self._ids.append(key)
            else:
                self._ids[row] = key
            if row >= len(self._matrix):
                grown = np.zeros((len(self._matrix) * 2, self.dim), dtype=np.float32)
                grown[: len(self._matrix)] = self._matrix
                self._matrix = grown
                grown_live = np.zeros(len(grown), dtype=np.bool_)
                grown_live[: len(self._live)] = self._live
                self._live = grown_live
            self._row[key] = row
            self.version += 1
        self._matrix[row] = unit(vector)
        if bool(self._live[row]) != live:
            self.version += 1
        self._live[row] = live

    def remove(self, key: str) -> None:
        row = self._row.pop(key, None)
        if row is not None:
            self.version += 1
            self._ids[row] = None
            self._matrix[row] = 0.0
            self._live[row] = False
            self._free.append(row)

    @property
    def row_keys(self) -> list[str | None]:
        """The key of each row (None: a free row), in row order."""
        return self._ids

    def similarities(self, query: np.ndarray) -> np.ndarray:
        """Cosine of every row with the query, in row order (free rows score 0; see
        `row_keys` and `live_rows`); empty for a query of another dimension."""
        n = len(self._ids)
        if query.shape != (self.dim,) or n == 0:
            return np.zeros(0, dtype=np.float32)
        return self._matrix[:n] @ unit(query)

    @property
    def rows(self) -> np.ndarray:
        """The matrix's rows in use, in `row_keys` order (a view, not a copy)."""
        return self._matrix[: len(self._ids)]

    @property
    def live_rows(self) -> np.ndarray:
        return self._live[: len(self._ids)]

    def similar(
        self, query: np.ndarray, threshold: float, *, include_archived: bool = False
    ) -> dict[str, float]:
        """Cosine of every (live) row with the query, those at or above `threshold`."""
        if query.shape != (self.dim,) or not self._row:
            return {}
        n = len(self._ids)
        sims = self._matrix[:n] @ unit(query)
        mask = sims >= threshold
        mask &= (
            self._live[:n]
            if not include_archived
            else np.array([k is not None for k in self._ids], dtype=np.bool_)
        )
        return {self._ids[i]: float(sims[i]) for i in np.nonzero(mask)[0].tolist()}  # type: ignore[misc]


class EntryVectors:
    """A store's vectors for one dimension at a time, refreshed lazily: ids the store
    marks dirty are read again, through `read` (ids → the encoded vectors of those that
    have one: files, or rows), on the next `index()` call."""

    def __init__(self, model_key: bytes, read: Callable[[list[str]], Mapping[str, bytes]]) -> None:
        self.model_key = model_key
        self._read = read
        self._index: VectorIndex | None = None
        self._dirty: set[str] = set()
        self._all_dirty = True

    def mark(self, entry_id: str) -> None:
        self._dirty.add(entry_id)

    def needs_full(self, dim: int) -> bool:
        """Whether the next `index(dim)` reads every vector file."""
        return self._index is None or self._index.dim != dim or self._all_dirty

    @property
    def current(self) -> VectorIndex | None:
        return self._index

    def adopt(self, index: VectorIndex, changed: Iterable[str]) -> None:
        """Take an index built elsewhere (a vector pack); `changed` ids are re-read."""
        self._index = index
        self._all_dirty = False
        self._dirty.update(changed)

    def reset(self) -> None:
        """Re-read every file on the next call (the store reloaded everything)."""
        self._all_dirty = True
        self._dirty.clear()

    def forget(self, entry_id: str) -> None:
        self._dirty.discard(entry_id)
        if self._index is not None:
            self._index.remove(entry_id)

    def index(
        self, dim: int, entries: Callable[[], Mapping], ids: Iterable[str] | None = None
    ) -> VectorIndex:
        """The index for vectors of `dim` components. `entries()` maps id → entry (with
        `fingerprint` and `is_current`); switching dimension re-reads every file."""
        current = entries()
        index = self._index
        if index is None or self.needs_full(dim):
            index = self._index = VectorIndex(dim)
            todo: Iterable[str] = current.keys()
            self._all_dirty = False
        else:
            todo = self._dirty
        todo = list(todo)
        for entry_id, vector in self._vectors_of(todo, current, dim):
            entry = current.get(entry_id)
            if vector is None or entry is None:
                index.remove(entry_id)
            else:
                # Superseded entries are out of the default scope, like archived ones.
                index.put(entry_id, vector, live=entry.is_current)
        self._dirty.clear()
        return index

    def _vectors_of(
        self, todo: list[str], current: Mapping, dim: int
    ) -> Iterable[tuple[str, np.ndarray | None]]:
        found = self._read([i for i in todo if i in current])
        for entry_id in todo:
            entry, data = current.get(entry_id), found.get(entry_id)
            yield (
                entry_id,
                (
                    None
                    if entry is None or data is None
                    else decode_vector(data, entry.fingerprint, self.model_key, dim)
                ),
            )
