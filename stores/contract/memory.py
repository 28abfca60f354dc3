"""Long-term memory's contract (`MemoryStore`), per agent; its guarantees are in
`stores.contract`'s docstring."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.coverage import Vocabulary
from dreamkeeper.policies.merge import Fold
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.contract.feed import JournalAction, JournalRecord
from dreamkeeper.stores.contract.records import (
    AppliedOp,
    BulkReport,
    NewEntry,
    PurgeReport,
    Retirement,
    StoredVector,
)
from dreamkeeper.stores.search.bm25 import BM25Index
from dreamkeeper.stores.vectors.embedder import Embedder
from dreamkeeper.stores.vectors.vectors import VectorIndex


class IntentLog(Protocol):
    """Where a dream cycle records each write's intent (the entry before it) first, so
    the cycle can be undone (`stores.dream_state.dream_ledger`)."""

    def note(self, step: str, befores: Iterable[tuple[str, MemoryEntry | None]]) -> None: ...


@runtime_checkable
class MemoryStore(Protocol):
    """One agent's long-term memory (the guarantees are in this module's docstring)."""

    agent_id: str
    embeddings: Embedder | None  # the embedding model, when one is configured
    documents: AgentDocuments  # the agent's dream state and conversation log

    def now(self) -> datetime:
        """The store's clock (UTC)."""
        ...

    # -- reads (each catches up with the change feed first) ----------------------------

    def get(self, entry_id: str) -> MemoryEntry | None:
        """The entry, live or archived, or None."""
        ...

    def cached(self, entry_id: str) -> MemoryEntry | None:
        """The entry as of the last catch-up, without catching up again (a search walking
        the hits of the index it has just refreshed)."""
        ...

    def require(self, entry_id: str) -> MemoryEntry:
        """The entry, or `NotFound`."""
        ...

    def entries(self, *, include_archived: bool = False) -> list[MemoryEntry]: ...

    def archived(self) -> list[MemoryEntry]:
        """Archived entries, most recently archived first."""
        ...

    def categories(self) -> dict[str, int]:
        """Live entry counts per category (uncategorized under "")."""
        ...

    def tags(self) -> list[str]:
        """The distinct tags of live entries, case-insensitively, sorted."""
        ...

    def problems(self) -> dict[Path, str]:
        """What the store skipped as unreadable, and why (empty when all is well)."""
        ...

    def __len__(self) -> int:
        """How many live entries."""
        ...

    def applied(self, op: str) -> AppliedOp | None:
        """The write that applied operation `op`, or None. Ask it under `writing()` so no
        other writer can apply it in between."""
        ...

    def index(self) -> BM25Index:
        """The BM25 index over every entry (live and archived), current with the feed.
        Ranking is Dreamkeeper's own, whatever the backend."""
        ...

    def categories_by_group(self) -> dict[int, str | None]:
        """The category of each index group id (`BM25Index.groups`)."""
        ...

    def vectors(self, dim: int) -> VectorIndex | None:
        """The entries' vectors of `dim` components, current with the feed; None with no
        embedding model configured."""
        ...

    def unembedded(self) -> int:
        """How many live entries have no stored vector (the embedding backfill's backlog)."""
        ...

    def stored_vector(
        self, entry: MemoryEntry, model_key: bytes | None = None, dim: int | None = None
    ) -> StoredVector | None:
        """The entry's vector if it was made from its current content (by `model_key` and
        of `dim` components, when given), or None."""
        ...

    # -- writes ------------------------------------------------------------------------

    def writing(self) -> AbstractContextManager[None]:
        """Hold the agent's writer lock (re-entrant) across a lookup and its writes."""
        ...

    def create(
        self,
        content: str,
        *,
        category: str | None = None,
        tags: Iterable[str] | None = None,
        metadata: dict[str, str] | None = None,
        importance: float = 0.5,
        entry_id: str | None = None,
        now: datetime | None = None,
        valid_from: datetime | None = None,
    ) -> MemoryEntry:
        """A new entry (revision 1). With an explicit id the call is idempotent: an entry
        with that id and the same content is returned as it is; other content is a
        `Conflict`. `valid_from`: when the fact became true, if not when it is saved."""
        ...

    def create_many(
        self, items: Iterable[NewEntry], *, now: datetime | None = None
    ) -> list[MemoryEntry]:
        """`create` for many entries at once, with its guarantees per entry; every item
        is validated before anything is written. An item may carry its own dates
        (`NewEntry.created_at`, `valid_from`), checked: none in the future."""
        ...

    def import_entries(self, entries: Iterable[MemoryEntry]) -> BulkReport:
        """Whole entries from elsewhere, as they are: idempotent by id; an id already here
        with other content is reported as a conflict and left alone."""
        ...

    def put(
        self,
        entry: MemoryEntry,
        *,
        action: JournalAction,
        reason: str | None = None,
        op: str | None = None,
        op_detail: str = "",
    ) -> MemoryEntry:
        """Write a whole entry computed from the revision it carries (compare-and-set: a
        `Conflict` when the stored entry moved past it; revision 0 creates). `op` (with
        `op_detail`) is recorded in the entry for `applied()`, atomically."""
        ...

    def update(
        self,
        entry_id: str,
        *,
        action: JournalAction = JournalAction.UPDATED,
        reason: str | None = None,
        **changes: object,
    ) -> MemoryEntry:
        """Apply field changes (snake_case names) to the entry as stored now."""
        ...

    def mutate(
        self,
        entry_id: str,
        change: Callable[[MemoryEntry], MemoryEntry],
        *,
        action: JournalAction = JournalAction.UPDATED,
        reason: str | None = None,
        op: str | None = None,
    ) -> MemoryEntry:
        """Read-modify-write under the writer lock: `change` sees the entry as stored now,
        including every other process's writes."""
        ...

    def update_importance(self, entry_id: str, importance: float) -> MemoryEntry: ...

    def write_vector(self, entry_id: str, vector: np.ndarray, fingerprint: str) -> bool:
        """Store the vector made from `fingerprint`'s content; False (nothing written)
        when the entry is gone or its content changed since."""
        ...

    # -- an entry's end of life --------------------------------------------------------

    def archive(self, entry_id: str, reason: str, *, now: datetime | None = None) -> MemoryEntry:
        """Hide an entry from search, keeping it. Archiving twice keeps the first reason."""
        ...

    def archive_if_unchanged(
        self,
        entry_id: str,
        fingerprint: str,
        reason: str,
        *,
        ledger: IntentLog,
        now: datetime | None = None,
    ) -> bool:
        """Archive the entry unless it changed since it was shown (`fingerprint`), noting
        the intent in `ledger` first, in one writer-lock hold. True when it is archived
        for this reason now (a retry finds it already done)."""
        ...

    def retire_into(
        self,
        entry_id: str,
        into: Iterable[str],
        *,
        reason: str,
        expected_fingerprint: str | None = None,
        vocabulary: Vocabulary = ...,
        now: datetime | None = None,
        check: Callable[[MemoryEntry, list[MemoryEntry]], str | None] | None = None,
    ) -> Retirement:
        """Archive `entry_id` into its replacements, atomically, only if each is live and
        together they cover its specifics (and `check` has no objection); otherwise
        nothing changes and the result says why. Again into the same ones: a no-op."""
        ...

    def fold(
        self,
        fold: Fold,
        *,
        op: str,
        reason: str,
        ledger: IntentLog,
        now: datetime | None = None,
    ) -> list[str]:
        """Exact duplicates folded into their survivor, exactly once by `op`: the survivor
        is saved with the group's arithmetic and `op` records the copies it summed; then
        exactly those copies retire into it (`reason`). A retry of the same op reads the
        copies from the survivor and never sums twice. Each intent goes to `ledger` first.
        Returns the copies retired (now or by an earlier attempt)."""
        ...

    def restore(self, entry_id: str, *, force: bool = False) -> MemoryEntry:
        """Bring an archived entry back; one retired into still-live replacements is a
        `Conflict` unless `force`."""
        ...

    def check_restorable(self, entry_id: str, *, force: bool = False) -> None:
        """Raise what `restore` would refuse (`NotFound`, `Conflict`), writing nothing."""
        ...

    def purge(
        self,
        retention: timedelta,
        *,
        keep: Callable[[MemoryEntry], bool] = ...,
        now: datetime | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        dry_run: bool = False,
        only: Callable[[MemoryEntry], bool] | None = None,
    ) -> PurgeReport:
        """Hard-delete entries archived before `now - retention` that `keep` does not
        protect (and `only` accepts); `dry_run` reports without deleting."""
        ...

    def erase(self, entry_ids: Iterable[str], *, reason: str = ...) -> builtins.list[str]:
        """Hard-delete the entries now, live or archived, with their vectors and every
        cache that quotes them (the search snapshot, vector packs): `forget`'s erasure,
        the one deletion outside `purge`'s rules. Journaled with ids only (no content)
        before anything goes; erasing an absent id does nothing. Returns the ids erased."""
        ...

    # -- the store's caches ------------------------------------------------------------

    def reload(self) -> None:
        """Forget everything held in memory and read the store again from its source."""
        ...

    def save_snapshot(self) -> bool:
        """Persist the search index's snapshot, so the next open is fast; False when it
        could not be (it is a cache: nothing is lost)."""
        ...

    def approx_bytes(self) -> int:
        """Roughly what this store holds in memory (the worker's store cache bound)."""
        ...

    # -- the change feed, read whole -----------------------------------------------------

    def changes(self) -> list[JournalRecord]:
        """Every record of the change feed kept, oldest first (what each write did:
        action, entry id, revision after it, fingerprint, op, reason; never content): the
        rows (on files, the journal's records) since the last compaction (docs/storage.md,
        "Compacting the change feed", "Compacting the file journal"). For audits and
        tools; reads catch up with the feed on their own."""
        ...
