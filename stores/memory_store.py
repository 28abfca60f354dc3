"""`FileMemoryStore`: one agent's long-term memory, one JSON file per entry.

Layout under `{data}/agents/{agent_id}/`:
  memory/{category}/{id}.json    an entry (uncategorized entries at memory/{id}.json)
  memory/.embeddings/{id}.bin    its vector, when an embedding model is configured
  journal.jsonl                  append-only change journal (no content)
  .lock                          held by the one process writing at a time

Writes (every one under the inter-process writer lock):
  1. catch up with the journal, and repair what a crashed writer left (below);
  2. re-read the target's file and compare its revision with what the caller saw: a
     stale view is refused (`StoreConflict`), never written over newer state;
  3. append the journal record (write-ahead: it names the entry's next revision);
  4. replace the entry file atomically, carrying that revision.
A crash between 3 and 4 leaves a record whose file still has the older revision (or
none). The next writer, holding the lock and so knowing no write is in flight, appends a
`repaired` record: the file on disk stands (the crashed operation was never acknowledged;
its retry does it again). Readers never lock. They re-read only the files named by new
journal records; a record whose file has not landed yet stays *pending* (the previous
version is served) until the file lands, a `repaired` record arrives, or the writer lock
is seen free — then the disk wins. Opening a store scans the files and replays the
journal from the start of the write that may have been in flight at that moment.

Exactly once: a write made on behalf of an operation (a dedup save, a fold, an absorb)
records the operation id inside the entry file it changes — the same atomic rename — so
a retry asks `applied(op)` and never infers "done" from what the entry looks like.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import numpy as np

from dreamkeeper.core.errors import MemoryNotFound, StoreConflict
from dreamkeeper.core.models import MAX_APPLIED_OPS, MemoryEntry, as_utc, utc_now
from dreamkeeper.core.validation import (
    new_entry_id,
    validate_agent_id,
    validate_category,
    validate_content,
    validate_entry_id,
    validate_importance,
    validate_metadata,
    validate_tags,
)
from dreamkeeper.stores import (
    faults,
    snapshot,
    store_bulk,
    store_lifecycle,
    store_loading,
    vector_pack,
)
from dreamkeeper.stores.bm25 import BM25Index
from dreamkeeper.stores.embedding_client import Embedder
from dreamkeeper.stores.entry_files import (
    EMBEDDINGS_DIR,
    MEMORY,
    Parts,
    entry_parts,
    load_entry,
)
from dreamkeeper.stores.files import AgentFiles
from dreamkeeper.stores.journal import Journal, JournalAction, JournalRecord
from dreamkeeper.stores.store_records import (
    AppliedOp,
    BulkReport,
    Change,
    NewEntry,
    PurgeReport,
    Retirement,
    document_text,
    retired_into,
)
from dreamkeeper.stores.vectors import EntryVectors, VectorIndex, encode_vector

log = logging.getLogger(__name__)


__all__ = [
    "AppliedOp",
    "BulkReport",
    "FileMemoryStore",
    "NewEntry",
    "PurgeReport",
    "Retirement",
    "document_text",
    "retired_into",
]


class FileMemoryStore:
    def __init__(
        self,
        data_dir: Path | str,
        agent_id: str,
        *,
        clock: Callable[[], datetime] = utc_now,
        embeddings: Embedder | None = None,
        snapshots: bool = True,
    ) -> None:
        self.agent_id = validate_agent_id(agent_id)
        self.files = AgentFiles(data_dir, agent_id)
        self.root = self.files.root
        self.memory_dir = self.files.path(MEMORY)
        self.embeddings_dir = self.files.path(MEMORY, EMBEDDINGS_DIR)
        self.journal = Journal(self.files)
        self._lock = self.files.lock((".lock",))
        self._clock = clock
        self._entries: MutableMapping[str, MemoryEntry] = {}
        self._parts: dict[str, Parts] = {}
        self._problems: dict[Path, str] = {}
        self._pending: dict[str, tuple[int, Parts]] = {}  # id -> (announced revision, path)
        self._ops: dict[str, AppliedOp] | None = None  # lazily built from entries
        self._index = BM25Index()
        self._category_ids: dict[str | None, int] = {}
        self._offset = 0
        self._loaded = False
        self._hold_appended = False
        self._snapshots = snapshots  # open from, and write, the index snapshot (a cache)
        self.opened_from_snapshot = False
        self.embeddings = embeddings
        self._vectors = (
            EntryVectors(self.embeddings_dir, embeddings.model_key) if embeddings else None
        )

    # -- loading and change feed -------------------------------------------------------

    def now(self) -> datetime:
        return as_utc(self._clock())

    def path_for(self, entry_id: str, category: str | None) -> Path:
        return self.files.path(*entry_parts(entry_id, category))

    # Loading and the change feed live in stores/store_loading.py; bound here as methods.
    _ensure_loaded = store_loading.ensure_loaded
    reload = store_loading.reload
    _full_load = store_loading.full_load
    save_snapshot = store_loading.save_snapshot
    approx_bytes = store_loading.approx_bytes
    _journal_bytes = store_loading.journal_bytes
    _load = store_loading.load
    _report = store_loading.report
    _category_id = store_loading.category_id
    _install = store_loading.install
    _forget = store_loading.forget
    _refresh = store_loading.refresh
    _apply_record = store_loading.apply_record
    _adopt_disk = store_loading.adopt_disk
    _settle = store_loading.settle
    _repair = store_loading.repair

    def get(self, entry_id: str) -> MemoryEntry | None:
        """The entry, live or archived, or None."""
        validate_entry_id(entry_id)
        self._ensure_loaded()
        return self._entries.get(entry_id)

    def cached(self, entry_id: str) -> MemoryEntry | None:
        """The entry as last loaded, without checking for other processes' writes: for a
        caller that has just refreshed (a search walking its hits)."""
        return self._entries.get(entry_id)

    def require(self, entry_id: str) -> MemoryEntry:
        entry = self.get(entry_id)
        if entry is None:
            raise MemoryNotFound(f"no memory with id {entry_id} for agent {self.agent_id!r}")
        return entry

    def entries(self, *, include_archived: bool = False) -> list[MemoryEntry]:
        self._ensure_loaded()
        return [e for e in self._entries.values() if include_archived or not e.is_archived]

    def archived(self) -> list[MemoryEntry]:
        self._ensure_loaded()
        return sorted(
            (e for e in self._entries.values() if e.is_archived),
            key=lambda e: e.archived_at or e.created_at,
            reverse=True,
        )

    def categories(self) -> dict[str, int]:
        """Live entry counts per category (uncategorized under "")."""
        counts: dict[str, int] = {}
        for entry in self.entries():
            key = entry.category or ""
            counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items()))

    def problems(self) -> dict[Path, str]:
        """Files skipped (unreadable, misplaced, symlinked) and links where the store's
        own files should be, with the reason."""
        self._ensure_loaded()
        found = dict(self._problems)
        for name in (".lock", "journal.jsonl", MEMORY, f"{MEMORY}/{EMBEDDINGS_DIR}"):
            path = self.root / name
            if path.is_symlink():
                found[path] = "a symlink: refused (the store never follows links)"
        return found

    def applied(self, op: str) -> AppliedOp | None:
        """The write that applied operation `op`, or None. Ask it under `writing()` so
        no other writer can apply it in between."""
        self._ensure_loaded()
        if self._ops is None:
            self._ops = {
                o: AppliedOp.parse(e.id, v)
                for e in self._entries.values()
                for o, v in e.applied_ops.items()
            }
        return self._ops.get(op)

    def index(self) -> BM25Index:
        """The live search index (kept current by every read)."""
        self._ensure_loaded()
        return self._index

    def vectors(self, dim: int) -> VectorIndex | None:
        """The in-memory vectors of `dim` components (current with every write), or None
        with no embedding model configured."""
        if self._vectors is None:
            return None
        self._ensure_loaded()
        full = self._vectors.needs_full(dim)
        if full and self._snapshots and not self._pending:
            packed = vector_pack.load(self, self._vectors.model_key, dim)
            if packed is not None:
                self._vectors.adopt(*packed)
                full = False
        index = self._vectors.index(dim, lambda: self._entries)
        if full and self._snapshots and len(index) >= snapshot.MIN_ENTRIES:
            vector_pack.write(self, index, self._vectors.model_key)
        return index

    def categories_by_group(self) -> dict[int, str | None]:
        return {cid: cat for cat, cid in self._category_ids.items()}

    def __len__(self) -> int:
        return len(self.entries())

    # -- the write protocol ------------------------------------------------------------

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the store's writer lock (re-entrant): for a lookup and a write that must
        see no other writer in between. The outermost hold catches up and repairs."""
        with self._lock.hold() as outermost:
            if outermost:
                self._hold_appended = False
                self._ensure_loaded()
            yield

    def _fresh(self, entry_id: str) -> MemoryEntry | None:
        """Under the lock: the entry as its file is now. A file changed behind the
        journal's back (a hand edit) is taken as it is, with a warning."""
        parts = self._parts.get(entry_id)
        if parts is None:
            return None
        loaded = load_entry(self.files, parts)
        if loaded.entry is None:
            self._report(parts, loaded.problem or "vanished outside the journal")
            self._forget(entry_id)
            return None
        if loaded.entry != self._entries.get(entry_id):
            log.warning(
                "memory store %s: %s changed on disk outside the journal; using the file",
                self.agent_id,
                entry_id,
            )
            self._install(loaded.entry, parts)
        return loaded.entry

    def _record(
        self,
        action: JournalAction,
        entry_id: str,
        parts: Parts,
        entry: MemoryEntry | None,
        *,
        reason: str | None = None,
        rev: int | None = None,
        op: str | None = None,
    ) -> JournalRecord:
        category = "/".join(parts[1:-1]) or None
        return JournalRecord(
            at=self.now(),
            action=action,
            id=entry_id,
            category=category,
            fingerprint=entry.fingerprint if entry else None,
            reason=reason,
            rev=rev if rev is not None else (entry.revision if entry else None),
            op=op,
        )

    def _append(self, records: list[JournalRecord]) -> None:
        if not records:
            return
        if not self._hold_appended:
            records[0] = dataclasses.replace(records[0], first=True)
        self._offset = self.journal.append(records)
        self._hold_appended = True

    def _commit(self, changes: list[Change]) -> None:
        """Journal first, then each file (lock held by the caller)."""
        batch = len(changes) > 1
        self._append(
            [
                self._record(c.action, c.entry.id, c.parts, c.entry, reason=c.reason, op=c.op)
                for c in changes
            ]
        )
        for c in changes:
            self._pending[c.entry.id] = (c.entry.revision, c.parts)
        faults.crash_point(faults.BATCH_JOURNALED if batch else faults.JOURNAL_APPENDED)
        half = len(changes) // 2
        groups = [changes[:half], changes[half:]] if batch else [changes]
        for number, group in enumerate(groups):
            if number == 1:
                faults.crash_point(faults.BATCH_HALF_WRITTEN)
            self.files.write_many(
                [(c.parts, c.entry.to_json().encode("utf-8")) for c in group], durable=not batch
            )
            for c in group:
                if c.old_parts is not None and c.old_parts != c.parts:
                    faults.crash_point(faults.FILE_REPLACED)
                    self.files.unlink(c.old_parts)
                self._install(c.entry, c.parts)
        if batch:
            self.files.sync_filesystem()
        for c in changes:
            self._pending.pop(c.entry.id, None)

    def _write(
        self,
        entry: MemoryEntry,
        base: MemoryEntry | None,
        action: JournalAction,
        reason: str | None,
        op: str | None = None,
        op_detail: str = "",
    ) -> MemoryEntry:
        """Write `entry` as the next revision after `base` (None: a new entry)."""
        applied = dict(entry.applied_ops)
        if op is not None:
            applied.pop(op, None)
            applied[op] = f"{action}:{op_detail}" if op_detail else str(action)
            while len(applied) > MAX_APPLIED_OPS:
                del applied[next(iter(applied))]
        written = entry.model_copy(
            update={
                "revision": (base.revision if base else 0) + 1,
                "applied_ops": applied,
            }
        )
        parts = entry_parts(written.id, written.category)
        old = self._parts.get(written.id) if base is not None else None
        self._commit([Change(written, action, reason, op, parts, old)])
        return written

    # -- writes ------------------------------------------------------------------------

    def write_vector(self, entry_id: str, vector: np.ndarray, fingerprint: str) -> bool:
        """Store the vector made from `fingerprint`'s content; False (nothing written) when
        the entry is gone or its content changed since. The vector file goes first: it is
        keyed to the content, so a crash before its record costs at most a long-lived
        reader's noticing it before its next reload."""
        if self._vectors is None:
            raise StoreConflict("no embedding model configured for this store")
        with self.writing():
            entry = self._fresh(entry_id)
            if entry is None or entry.fingerprint != fingerprint:
                return False
            self.files.write(
                (MEMORY, EMBEDDINGS_DIR, f"{entry_id}.bin"),
                encode_vector(vector, fingerprint, self._vectors.model_key),
            )
            self._vectors.mark(entry_id)
            self._append(
                [self._record(JournalAction.EMBEDDED, entry_id, self._parts[entry_id], entry)]
            )
            return True

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
    ) -> MemoryEntry:
        """Create an entry. With an explicit id the call is idempotent: an existing entry
        with the same content is returned unchanged; different content is a conflict."""
        content = validate_content(content)
        category = validate_category(category)
        tag_list = validate_tags(tags)
        metadata = validate_metadata(metadata)
        importance = validate_importance(importance)
        entry_id = validate_entry_id(entry_id) if entry_id is not None else None
        with self.writing():
            if entry_id is None:
                entry_id = new_entry_id()
                while entry_id in self._entries:
                    entry_id = new_entry_id()
            existing = self._fresh(entry_id)
            if existing is not None:
                if existing.content == content:
                    return existing
                raise StoreConflict(f"memory {entry_id} already exists with other content")
            path = self.path_for(entry_id, category)
            if path.exists() or path.is_symlink():
                raise StoreConflict(f"{path} exists but could not be read; not overwriting it")
            at = as_utc(now) if now is not None else self.now()
            entry = MemoryEntry(
                id=entry_id,
                content=content,
                category=category,
                tags=tag_list,
                created_at=at,
                last_seen_at=at,
                metadata=metadata,
                importance_score=importance,
            )
            return self._write(entry, None, JournalAction.CREATED, None)

    # The bulk write path: stores/store_bulk.py.
    create_many = store_bulk.create_many
    import_entries = store_bulk.import_entries
    _bulk_write = store_bulk.bulk_write

    def put(
        self,
        entry: MemoryEntry,
        *,
        action: JournalAction,
        reason: str | None = None,
        op: str | None = None,
        op_detail: str = "",
    ) -> MemoryEntry:
        """Write a whole entry (validated), computed by the caller from the revision it
        carries: if the file moved past that revision since, the write is refused.
        `op` (with `op_detail`) is recorded in the entry, for `applied()`."""
        validate_entry_id(entry.id)
        validate_content(entry.content)
        validate_category(entry.category)
        validate_tags(entry.tags)
        validate_metadata(entry.metadata)
        validate_importance(entry.importance_score)
        with self.writing():
            current = self._fresh(entry.id)
            if current is None:
                if entry.revision != 0:
                    raise StoreConflict(f"memory {entry.id} no longer exists; not recreating it")
                path = self.path_for(entry.id, entry.category)
                if path.exists() or path.is_symlink():
                    raise StoreConflict(f"{path} exists but could not be read; not overwriting")
            elif entry.revision != current.revision:
                raise StoreConflict(
                    f"memory {entry.id} changed since it was read (revision {entry.revision}, "
                    f"now {current.revision}); not overwriting newer state"
                )
            elif current == entry:
                return current
            return self._write(entry, current, action, reason, op, op_detail)

    def update(
        self,
        entry_id: str,
        *,
        action: JournalAction = JournalAction.UPDATED,
        reason: str | None = None,
        **changes: object,
    ) -> MemoryEntry:
        """Apply field changes (snake_case names) to an existing entry."""
        return self.mutate(
            entry_id,
            lambda current: MemoryEntry.model_validate({**current.model_dump(), **changes}),
            action=action,
            reason=reason,
        )

    def mutate(
        self,
        entry_id: str,
        change: Callable[[MemoryEntry], MemoryEntry],
        *,
        action: JournalAction = JournalAction.UPDATED,
        reason: str | None = None,
        op: str | None = None,
    ) -> MemoryEntry:
        """Read-modify-write under the lock: `change` sees the entry as its file is now,
        including every other process's writes, and returns the new one."""
        self.require(entry_id)  # reject unknown ids before taking (creating) the lock
        with self.writing():
            current = self._fresh(entry_id)
            if current is None:
                raise MemoryNotFound(f"no memory with id {entry_id} for agent {self.agent_id!r}")
            updated = change(current)
            if updated.id != current.id:
                raise StoreConflict("a mutation cannot change an entry's id")
            if updated == current:
                return current
            return self.put(
                updated.model_copy(update={"revision": current.revision}),
                action=action,
                reason=reason,
                op=op,
            )

    def update_importance(self, entry_id: str, importance: float) -> MemoryEntry:
        importance = validate_importance(importance)
        return self.update(
            entry_id,
            importance_score=importance,
            updated_at=self.now(),
            reason=f"importance set to {importance:.2f}",
        )

    # Archive, retirement, restore and purge: stores/store_lifecycle.py.
    archive = store_lifecycle.archive
    retire_into = store_lifecycle.retire_into
    restore = store_lifecycle.restore
    check_restorable = store_lifecycle.check_restorable
    purge = store_lifecycle.purge
    _delete = store_lifecycle.delete

    def tags(self) -> list[str]:
        """The distinct tags of live entries, case-insensitively (as the tag filter
        matches), sorted; of two spellings of one tag the first in sort order."""
        spellings: dict[str, str] = {}
        for entry in self.entries():
            for tag in entry.tags:
                key = tag.lower()
                spellings[key] = min(spellings.get(key, tag), tag)
        return [spellings[key] for key in sorted(spellings)]
