"""The bulk write path: many entries under one lock hold, one journal batch and one
filesystem sync per chunk. Functions of `FileMemoryStore`, bound as its methods there."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from dreamkeeper.core.errors import StoreConflict
from dreamkeeper.core.models import MemoryEntry, as_utc
from dreamkeeper.core.validation import (
    new_entry_id,
)
from dreamkeeper.stores.entry_files import (
    entry_parts,
)
from dreamkeeper.stores.journal import JournalAction
from dreamkeeper.stores.store_records import (
    BulkReport,
    Change,
    NewEntry,
    imported_entry,
    new_entry,
)

if TYPE_CHECKING:
    from dreamkeeper.stores.memory_store import FileMemoryStore

BULK_CHUNK = 1_000  # entries per journal batch and filesystem sync


def create_many(
    store: FileMemoryStore, items: Iterable[NewEntry], *, now: datetime | None = None
) -> list[MemoryEntry]:
    """Create many entries under one lock hold: per chunk one journal batch, the files
    without a sync each, then one filesystem sync — with `create`'s guarantees (each
    entry atomic; a crash anywhere is repaired like a single write's, and nothing is
    durable-and-unjournaled). Every item is validated before anything is written; an
    explicit id is idempotent as in `create`."""
    at = as_utc(now) if now is not None else store.now()
    items = list(items)
    wanted = [new_entry(item, at) for item in items]
    fresh_ids = {e.id for e, item in zip(wanted, items, strict=True) if item.entry_id is None}
    report = store._bulk_write(wanted, reason=None, redraw=fresh_ids, strict=True)
    return report.entries


def import_entries(store: FileMemoryStore, entries: Iterable[MemoryEntry]) -> BulkReport:
    """Bring whole entries in as they are — ids, times, counts, archive state — on
    `create_many`'s bulk path: idempotent by id (an entry already here with the same
    content is left as it is), an id here with other content is a conflict, reported
    and left alone. Every entry is validated before anything is written."""
    wanted = [imported_entry(entry) for entry in entries]
    return store._bulk_write(wanted, reason="imported", redraw=set(), strict=False)


def bulk_write(
    store: FileMemoryStore,
    wanted: list[MemoryEntry],
    *,
    reason: str | None,
    redraw: set[str],
    strict: bool,
) -> BulkReport:
    """One lock hold; per chunk a journal batch, the files, one sync (see `_commit`).
    `redraw`: ids the store chose, drawn again if taken. `strict`: a conflict raises."""
    report = BulkReport()
    with store.writing():
        taken: set[str] = set()
        for start in range(0, len(wanted), BULK_CHUNK):
            changes: list[Change] = []
            for entry in wanted[start : start + BULK_CHUNK]:
                if entry.id in redraw:
                    while entry.id in store._entries or entry.id in taken:
                        entry = entry.model_copy(update={"id": new_entry_id()})
                if entry.id in taken:
                    raise StoreConflict(f"memory {entry.id} is given twice")
                taken.add(entry.id)
                existing = store._fresh(entry.id)
                if existing is not None:
                    if existing.content == entry.content:
                        report.entries.append(existing)
                        report.unchanged.append(existing.id)
                    elif strict:
                        raise StoreConflict(f"memory {entry.id} already exists with other content")
                    else:
                        report.conflicts.append(entry.id)
                    continue
                written = entry.model_copy(update={"revision": 1})
                parts = entry_parts(written.id, written.category)
                changes.append(Change(written, JournalAction.CREATED, reason, None, parts))
                report.entries.append(written)
                report.created.append(written.id)
            if changes:
                store._commit(changes)
    return report
