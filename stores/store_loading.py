"""Loading one agent's store and following its journal: the full scan (or the index
snapshot), replaying records, pending writes and their repair. Functions of
`FileMemoryStore` (bound as its methods there); the protocol is in that module's
docstring."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores import snapshot, vector_pack
from dreamkeeper.stores.bm25 import BM25Index, tokenize
from dreamkeeper.stores.entry_files import (
    Parts,
    entry_parts,
    load_entry,
    scan,
)
from dreamkeeper.stores.journal import JOURNAL, JournalAction, JournalRecord
from dreamkeeper.stores.store_records import (
    AppliedOp,
    document_text,
    entry_version,
)

if TYPE_CHECKING:
    from dreamkeeper.stores.memory_store import FileMemoryStore

log = logging.getLogger("dreamkeeper.stores.memory_store")


def ensure_loaded(store: FileMemoryStore) -> None:
    if not store._loaded:
        store._full_load()
    else:
        store._refresh()


def reload(store: FileMemoryStore) -> None:
    """Forget everything in memory and rescan the directory (not the snapshot)."""
    store._full_load(use_snapshot=False)


def full_load(store: FileMemoryStore, *, use_snapshot: bool = True) -> None:
    store._entries = {}
    store._parts = {}
    store._problems = {}
    store._pending.clear()
    store._ops = None
    store._index = BM25Index()
    store._category_ids = {}
    if store._vectors is not None:
        store._vectors.reset()
    store.opened_from_snapshot = False
    if use_snapshot and store._snapshots and snapshot.load(store):
        # The state as of the snapshot's offset: replay only the journal after it.
        store.opened_from_snapshot = True
        store._loaded = True
        store._refresh()
        return
    # Records appended from here on name every file that changes during the scan;
    # the write in flight right now began at the last hold marker: replay from there.
    end = store.journal.size()
    replay_from = store.journal.last_hold_start(end)
    for parts, is_link in scan(store.files):
        if is_link:
            store._report(parts, "a symlink: refused (entries and categories are plain)")
        else:
            store._load(parts, scanning=True)
    store._offset = replay_from
    store._loaded = True
    store._refresh()
    if store._snapshots and len(store._entries) >= snapshot.MIN_ENTRIES:
        store.save_snapshot()


def save_snapshot(store: FileMemoryStore) -> bool:
    """Write the index snapshot (`stores.snapshot`) of the state as it is now, after
    catching up with the journal; False when it could not be (a write is pending, or
    the directory is not writable — logged: it is only a cache)."""
    store._ensure_loaded()
    try:
        written = snapshot.write(store)
        current = store._vectors.current if store._vectors is not None else None
        if written and current is not None and store._vectors is not None:
            index = store.vectors(current.dim)
            if index is not None:
                vector_pack.write(store, index, store._vectors.model_key)
        return written
    except OSError as exc:
        log.warning("memory store %s: index snapshot not written (%s)", store.agent_id, exc)
        return False


def approx_bytes(store: FileMemoryStore) -> int:
    """Roughly what this store holds in memory (for the worker's store cache): per
    entry its index share and its entry (parsed or still JSON), plus the vectors."""
    if not store._loaded:
        return 4_096
    per_entry = 2_500 if isinstance(store._entries, dict) else 1_200
    vectors = store._vectors.current if store._vectors is not None else None
    matrix = 0 if vectors is None else len(vectors.row_keys) * vectors.dim * 4
    return 4_096 + per_entry * len(store._entries) + matrix


def journal_bytes(store: FileMemoryStore, start: int, length: int) -> bytes:
    return store.files.read_from(JOURNAL, start, length) if length > 0 else b""


def load(store: FileMemoryStore, parts: Parts, *, scanning: bool = False) -> MemoryEntry | None:
    loaded = load_entry(store.files, parts)
    entry = loaded.entry
    if entry is None:
        if loaded.problem is not None:
            store._report(parts, loaded.problem)
        return None
    known = store._parts.get(entry.id)
    if scanning and known is not None and known != parts:
        # Two files for one id: a category move interrupted between writing the new
        # file and removing the old. The later revision wins; the other is reported.
        if entry_version(entry) < entry_version(store._entries[entry.id]):
            store._report(parts, f"stale duplicate of {entry.id} at {'/'.join(known)}")
            return None
        store._report(known, f"stale duplicate of {entry.id} at {'/'.join(parts)}")
    store._problems.pop(store.files.path(*parts), None)
    store._install(entry, parts)
    return entry


def report(store: FileMemoryStore, parts: Parts, reason: str) -> None:
    key = store.files.path(*parts)
    if store._problems.get(key) != reason:
        log.warning("memory store %s: skipped %s (%s)", store.agent_id, key, reason)
    store._problems[key] = reason


def category_id(store: FileMemoryStore, category: str | None) -> int:
    cid = store._category_ids.get(category)
    if cid is None:
        cid = len(store._category_ids)
        store._category_ids[category] = cid
    return cid


def install(store: FileMemoryStore, entry: MemoryEntry, parts: Parts) -> None:
    previous = store._entries.get(entry.id)
    if previous == entry and store._parts.get(entry.id) == parts:
        return
    store._entries[entry.id] = entry
    store._parts[entry.id] = parts
    if store._ops is not None:
        if previous is not None:
            for op in previous.applied_ops:
                store._ops.pop(op, None)
        for op, value in entry.applied_ops.items():
            store._ops[op] = AppliedOp.parse(entry.id, value)
    store._index.put(
        entry.id,
        tokenize(document_text(entry)),
        archived=entry.is_archived,
        weight=0.5 + 0.5 * entry.importance_score,
        group=store._category_id(entry.category),
        importance=entry.importance_score,
        stamp=entry.last_seen_at.timestamp(),
    )
    if store._vectors is not None:
        store._vectors.mark(entry.id)


def forget(store: FileMemoryStore, entry_id: str) -> None:
    previous = store._entries.pop(entry_id, None)
    store._parts.pop(entry_id, None)
    if store._ops is not None and previous is not None:
        for op in previous.applied_ops:
            store._ops.pop(op, None)
    store._index.remove(entry_id)
    if store._vectors is not None:
        store._vectors.forget(entry_id)


def refresh(store: FileMemoryStore) -> None:
    size = store.journal.size()
    if size < store._offset:  # journal replaced or truncated: trust nothing cached
        store._full_load()
        return
    if size > store._offset:
        records, store._offset = store.journal.read_from(store._offset)
        for record in records:
            store._apply_record(record)
    if store._pending:
        store._settle()


def apply_record(store: FileMemoryStore, record: JournalRecord) -> None:
    if record.action is JournalAction.EMBEDDED:
        if store._vectors is not None:
            store._vectors.mark(record.id)  # only the vector file changed
        return
    try:
        parts = entry_parts(record.id, record.category)
    except InvalidInput as exc:
        log.warning("journal of %s: a record names an invalid path (%s)", store.agent_id, exc)
        return
    if record.action is JournalAction.REPAIRED:
        store._pending.pop(record.id, None)
        store._adopt_disk(record.id, parts)
        return
    if record.action is JournalAction.PURGED:
        known = store._parts.get(record.id, parts)
        if any(os.path.lexists(store.files.path(*p)) for p in {parts, known}):
            # Its file is still there: a purge in flight, or a record that does not
            # match the files (then the disk wins when the lock is seen free).
            store._pending[record.id] = (record.rev or 0, known)
        else:
            store._pending.pop(record.id, None)
            store._forget(record.id)
        return
    entry = store._load(parts)
    if record.rev is None:  # a legacy record: the file is all there is
        if entry is None:
            # Forget the entry only if its own file is gone: a record naming another
            # category (a hostile or garbled line) must not hide a live entry.
            store._adopt_disk(record.id, parts)
        return
    if entry is not None and entry.revision >= record.rev:
        if store._pending.get(record.id, (0,))[0] <= entry.revision:
            store._pending.pop(record.id, None)
        return
    store._pending[record.id] = (record.rev, parts)  # the file has not landed (yet)


def adopt_disk(store: FileMemoryStore, entry_id: str, parts: Parts) -> None:
    """Take the entry as its file is now (or forget it when there is none)."""
    if store._load(parts) is not None:
        return
    known = store._parts.get(entry_id)
    if known is not None and known != parts and store._load(known) is not None:
        return
    store._forget(entry_id)


def settle(store: FileMemoryStore) -> None:
    """Resolve pending records: landed files are taken; when no write can be in flight
    (the lock is ours, or free) the disk wins — a writer repairs it in the journal."""
    for entry_id, (rev, parts) in list(store._pending.items()):
        entry = store._load(parts)
        if entry is not None and entry.revision >= rev:
            del store._pending[entry_id]
    if not store._pending:
        return
    if store._lock.held:
        store._repair()
    elif store._lock.is_free():
        for entry_id, (_, parts) in list(store._pending.items()):
            store._adopt_disk(entry_id, parts)
        store._pending.clear()


def repair(store: FileMemoryStore) -> None:
    """Under the lock: every pending record is a write that died before its file
    landed. Record that, so every reader converges on the file as it is."""
    records = []
    for entry_id, (rev, parts) in sorted(store._pending.items()):
        store._adopt_disk(entry_id, parts)
        current = store._entries.get(entry_id)
        # `rev` names the revision that never landed (the disk keeps the one before).
        records.append(
            store._record(
                JournalAction.REPAIRED,
                entry_id,
                parts,
                current,
                rev=rev,
                reason=f"revision {rev} never landed; the file on disk stands",
            )
        )
        log.warning(
            "memory store %s: repaired %s (a write of revision %d did not complete)",
            store.agent_id,
            entry_id,
            rev,
        )
    store._pending.clear()
    store._append(records)
