"""What a backend gives the long-term operations: its storage of one agent's entries.

`EntrySteps` is the seam the shared algorithms (`stores.longterm.operations`) are
written against — a writer lock, catching up, the entry as stored now, a compare-and-set
write with its feed record, a bulk insert, a purge's delete, and two lookups. Nothing
else of a backend reaches them. `EntryStorage` adds what a `MemoryStore` answers from
its storage alone (problems, vectors, erase, reload, the snapshot, the feed), which
`StoreOperations` passes through as they are: once, for every backend.

Each wing's storage object implements it (`stores.files.memory_store.FileEntryStorage`,
`stores.postgres.memory_store.PostgresEntryStorage`) and keeps the shared `EntryState`
current from its feed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

import numpy as np

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.contract.feed import JournalAction, JournalRecord
from dreamkeeper.stores.longterm.entry_state import EntryState
from dreamkeeper.stores.vectors.embedder import Embedder
from dreamkeeper.stores.vectors.vectors import VectorIndex

ERASED = "forgotten"  # the reason `erase` records its deletions with, on every backend


class EntrySteps(Protocol):
    """The primitives the long-term operations are written in."""

    agent_id: str
    state: EntryState  # kept current by `catch_up` and by every write below

    def writing(self) -> AbstractContextManager[None]:
        """The agent's writer lock (re-entrant), across processes; the outermost hold
        catches up first."""
        ...

    def catch_up(self) -> None:
        """Bring `state` up to the change feed (the first call loads the store)."""
        ...

    def fresh(self, entry_id: str) -> MemoryEntry | None:
        """Under the lock: the entry as stored now, or None."""
        ...

    def write(
        self,
        entry: MemoryEntry,
        base: MemoryEntry | None,
        action: JournalAction,
        reason: str | None,
        op: str | None,
    ) -> MemoryEntry:
        """Store `entry` (its revision and op already set) over `base` (None: a new
        entry) atomically with its feed record, refusing (`Conflict`) when the stored
        one is no longer `base`; the entry as stored."""
        ...

    def insert_batch(self, entries: list[MemoryEntry], reason: str | None) -> None:
        """Store new entries (revision 1) on the bulk path, all or none of them."""
        ...

    def delete(
        self, doomed: list[MemoryEntry], on_progress: Callable[[int, int], None] | None
    ) -> None:
        """Hard-delete purged entries (and their vectors), with their feed records."""
        ...

    def unreadable(self, entry_id: str, category: str | None) -> str | None:
        """Where something the store could not read sits in an entry's place (so it is
        never overwritten), or None."""
        ...

    def vector_bytes(self, entry_id: str) -> bytes | None:
        """The entry's stored vector, encoded (`stores.vectors.vectors`), or None."""
        ...


class EntryStorage(EntrySteps, Protocol):
    """The steps, and what a `MemoryStore` answers from its storage alone (the
    contract's docstrings say what each one does)."""

    embeddings: Embedder | None
    documents: AgentDocuments
    opened_from_snapshot: bool

    @property
    def loaded(self) -> bool: ...

    def problems(self) -> dict[Path, str]: ...

    def vectors(self, dim: int) -> VectorIndex | None: ...

    def unembedded(self) -> int: ...

    def write_vector(self, entry_id: str, vector: np.ndarray, fingerprint: str) -> bool: ...

    def erase(self, entry_ids: Iterable[str], *, reason: str) -> list[str]: ...

    def reload(self) -> None: ...

    def save_snapshot(self) -> bool: ...

    def changes(self) -> list[JournalRecord]: ...
