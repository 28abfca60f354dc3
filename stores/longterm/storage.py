"""What a backend gives the long-term operations: its storage of one agent's entries.

`EntrySteps` is the seam the shared algorithms (`stores.longterm.operations`) are
written against — a writer lock, catching up, the entry as stored now, a compare-and-set
write with its feed record (`EntryWrite`), a bulk insert, a purge's delete, and two
lookups. Nothing else of a backend reaches them. `EntryStorage` adds the rest a
`MemoryStore` needs of its storage: the backend halves of `erase` and `write_vector`
(whose checks are shared), and what only the storage can answer (problems, the vector
index, the backlog, reload, the snapshot, the feed), which `StoreOperations` passes
through once for every backend.

Each wing's storage object implements it (`stores.files.memory_store.FileEntryStorage`,
`stores.postgres.memory_store.PostgresEntryStorage`) and keeps the shared `EntryState`
current from its feed.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.contract.feed import JournalAction, JournalRecord
from dreamkeeper.stores.longterm.entry_state import EntryState
from dreamkeeper.stores.vectors.embedder import Embedder
from dreamkeeper.stores.vectors.vectors import VectorIndex

ERASED = "forgotten"  # the reason `erase` records its deletions with, on every backend


@dataclass(frozen=True)
class EntryWrite:
    """One entry's write, as the operations ask it of the storage: `entry` as it is to
    be stored (its revision and op already in it) over `base` (None: a new entry), and
    what its feed record says (`action`, `reason`, `op`)."""

    entry: MemoryEntry
    base: MemoryEntry | None
    action: JournalAction
    reason: str | None
    op: str | None


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

    def write(self, change: EntryWrite) -> MemoryEntry:
        """Store the change's entry over its base atomically with its feed record,
        refusing (`Conflict`) when the stored entry is no longer the base; the entry as
        stored."""
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

    def vector_index(self, dim: int) -> VectorIndex:
        """The vectors of `dim` components, current with the feed (called caught up,
        with an embedding model configured)."""
        ...

    def unembedded(self) -> int: ...

    def store_vector(self, entry: MemoryEntry, data: bytes) -> bool:
        """Under the lock: store `entry`'s vector (`data`, encoded from its content) with
        its feed record, and mark it; False when the stored entry moved on meanwhile."""
        ...

    def erase(self, doomed: list[MemoryEntry], reason: str) -> None:
        """Under the lock: delete the entries and their vectors now, with feed records
        of ids and `reason` (never content), and every cache that quotes entries; then
        build the index again without their terms."""
        ...

    def reload(self) -> None: ...

    def save_snapshot(self) -> bool: ...

    def changes(self) -> list[JournalRecord]: ...
