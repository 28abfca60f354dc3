"""`FileMemoryStore`: one agent's long-term memory, one JSON file per entry.

Layout under `{data}/agents/{agent_id}/`:
  memory/{category}/{id}.json    an entry (uncategorized entries at memory/{id}.json)
  memory/.embeddings/{id}.bin    its vector, when an embedding model is configured
  journal.jsonl                  append-only change journal (no content)
  .lock                          held by the one process writing at a time

Writes (every one under the inter-process writer lock):
  1. catch up with the journal, and repair what a crashed writer left (below);
  2. re-read the target's file and compare its revision with what the caller saw: a
     stale view is refused (`Conflict`), never written over newer state;
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

The class is kept whole, in one file: loading, the change feed, the writes and an entry's
end of life share one state (the entries, their files, the pending records, the index),
and one class owning it beats modules reaching into each other's insides. The index
snapshot and the vector pack are caches written and read with explicit arguments
(`stores.longterm.snapshot`, `stores.longterm.vector_pack`). The operations and their guarantees, shared
with any other backend, are `stores.contract.MemoryStore`.

Exactly once: a write made on behalf of an operation (a dedup save, a fold, an absorb)
records the operation id inside the entry file it changes — the same atomic rename — so
a retry asks `applied(op)` and never infers "done" from what the entry looks like.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from dreamkeeper.core.errors import Conflict, InvalidInput, NotFound
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
from dreamkeeper.policies.coverage import DEFAULT_VOCABULARY, Source, Vocabulary
from dreamkeeper.policies.coverage import find_missing_specifics as _missing
from dreamkeeper.policies.merge import Fold
from dreamkeeper.stores import faults
from dreamkeeper.stores.contract import IntentLog
from dreamkeeper.stores.files import AgentFiles
from dreamkeeper.stores.longterm import snapshot, vector_pack
from dreamkeeper.stores.longterm.entry_files import (
    EMBEDDINGS_DIR,
    MEMORY,
    Parts,
    entry_parts,
    load_entry,
    scan,
)
from dreamkeeper.stores.longterm.journal import Journal, JournalAction, JournalRecord
from dreamkeeper.stores.longterm.records import (
    AppliedOp,
    BulkReport,
    NewEntry,
    PurgeReport,
    Retirement,
    StoredVector,
    document_text,
    entry_version,
    imported_entry,
    new_entry,
    retired_into,
)
from dreamkeeper.stores.search.bm25 import BM25Index, tokenize
from dreamkeeper.stores.vectors.embedder import Embedder
from dreamkeeper.stores.vectors.vectors import (
    EntryVectors,
    VectorIndex,
    decode_any_model,
    encode_vector,
    read_vector,
    vector_path,
)

log = logging.getLogger(__name__)

BULK_CHUNK = 1_000  # entries per journal batch and filesystem sync
ERASED = "forgotten"  # the reason `erase` journals its purges with

__all__ = [
    "AppliedOp",
    "BulkReport",
    "EMBEDDINGS_DIR",
    "FileMemoryStore",
    "NewEntry",
    "PurgeReport",
    "Retirement",
    "document_text",
    "retired_into",
]


@dataclass(frozen=True)
class Change:
    """One entry write of a commit: the entry as it will be on disk, revision included."""

    entry: MemoryEntry
    action: JournalAction
    reason: str | None
    op: str | None
    parts: Parts
    old_parts: Parts | None = None  # a category move: the file to remove afterwards


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
        self._erased_seen = False  # a record of `erase` applied since the index was built
        self._snapshots = snapshots  # open from, and write, the index snapshot (a cache)
        self.opened_from_snapshot = False
        self.embeddings = embeddings
        self._vectors = (
            EntryVectors(self.embeddings_dir, embeddings.model_key) if embeddings else None
        )

    def now(self) -> datetime:
        return as_utc(self._clock())

    def path_for(self, entry_id: str, category: str | None) -> Path:
        return self.files.path(*entry_parts(entry_id, category))

    @property
    def feed_offset(self) -> int:
        """How far this instance has read the journal (its change feed), in bytes."""
        return self._offset

    @property
    def loaded(self) -> bool:
        """Whether anything has been read yet (a store opens on first use)."""
        return self._loaded

    # -- loading -----------------------------------------------------------------------

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._full_load()
        else:
            self._refresh()

    def reload(self) -> None:
        """Forget everything in memory and rescan the directory (not the snapshot)."""
        self._full_load(use_snapshot=False)

    def _full_load(self, *, use_snapshot: bool = True) -> None:
        self._erased_seen = False  # a fresh index; records replayed below may set it
        self._adopt_state(
            snapshot.SnapshotState(
                entries={},
                parts={},
                problems={},
                ops=None,
                index=BM25Index(),
                category_ids={},
                offset=0,
            )
        )
        self._pending.clear()
        if self._vectors is not None:
            self._vectors.reset()
        self.opened_from_snapshot = False
        if use_snapshot and self._snapshots:
            state = snapshot.load(self.files, self.agent_id, self.journal)
            if state is not None:
                # The state as of the snapshot's offset: replay only the journal after it.
                self._adopt_state(state)
                self.opened_from_snapshot = True
                self._loaded = True
                self._refresh()
                return
        # Records appended from here on name every file that changes during the scan;
        # the write in flight right now began at the last hold marker: replay from there.
        end = self.journal.size()
        replay_from = self.journal.last_hold_start(end)
        for parts, is_link in scan(self.files):
            if is_link:
                self._report(parts, "a symlink: refused (entries and categories are plain)")
            else:
                self._load(parts, scanning=True)
        self._offset = replay_from
        self._loaded = True
        self._refresh()
        if self._snapshots and len(self._entries) >= snapshot.MIN_ENTRIES:
            self.save_snapshot()

    def _adopt_state(self, state: snapshot.SnapshotState) -> None:
        self._entries = state.entries
        self._parts = state.parts
        self._problems = state.problems
        self._ops = state.ops
        self._index = state.index
        self._category_ids = state.category_ids
        self._offset = state.offset

    def _state(self) -> snapshot.SnapshotState:
        return snapshot.SnapshotState(
            entries=self._entries,
            parts=self._parts,
            problems=self._problems,
            ops=self._ops,
            index=self._index,
            category_ids=self._category_ids,
            offset=self._offset,
        )

    def save_snapshot(self) -> bool:
        """Write the index snapshot (`stores.longterm.snapshot`) of the state as it is now, after
        catching up with the journal; False when it could not be (a write is pending, or
        the directory is not writable — logged: it is only a cache)."""
        self._ensure_loaded()
        try:
            # Only a state with no pending record is exactly what the journal says up to
            # the offset.
            if self._pending or not self._loaded:
                return False
            if self._erased_seen:
                # Erased entries' terms are still in this index's vocabulary: a
                # snapshot of it would carry them (a forgotten name) to disk again.
                self._rebuild_index(snapshot_after=False)
            snapshot.write(self.files, self.agent_id, self._state(), self.journal)
            current = self._vectors.current if self._vectors is not None else None
            if current is not None and self._vectors is not None:
                index = self.vectors(current.dim)
                if index is not None:
                    self._write_pack(index)
            return True
        except OSError as exc:
            log.warning("memory store %s: index snapshot not written (%s)", self.agent_id, exc)
            return False

    def _write_pack(self, index: VectorIndex) -> bool:
        if self._pending or self._vectors is None:
            return False
        return vector_pack.write(
            self.files, self.agent_id, index, self._vectors.model_key, self._offset, self.journal
        )

    def approx_bytes(self) -> int:
        """Roughly what this store holds in memory (for the worker's store cache): per
        entry its index share and its entry (parsed or still JSON), plus the vectors."""
        if not self._loaded:
            return 4_096
        per_entry = 2_500 if isinstance(self._entries, dict) else 1_200
        vectors = self._vectors.current if self._vectors is not None else None
        matrix = 0 if vectors is None else len(vectors.row_keys) * vectors.dim * 4
        return 4_096 + per_entry * len(self._entries) + matrix

    def _load(self, parts: Parts, *, scanning: bool = False) -> MemoryEntry | None:
        loaded = load_entry(self.files, parts)
        entry = loaded.entry
        if entry is None:
            if loaded.problem is not None:
                self._report(parts, loaded.problem)
            return None
        known = self._parts.get(entry.id)
        if scanning and known is not None and known != parts:
            # Two files for one id: a category move interrupted between writing the new
            # file and removing the old. The later revision wins; the other is reported.
            if entry_version(entry) < entry_version(self._entries[entry.id]):
                self._report(parts, f"stale duplicate of {entry.id} at {'/'.join(known)}")
                return None
            self._report(known, f"stale duplicate of {entry.id} at {'/'.join(parts)}")
        self._problems.pop(self.files.path(*parts), None)
        self._install(entry, parts)
        return entry

    def _report(self, parts: Parts, reason: str) -> None:
        key = self.files.path(*parts)
        if self._problems.get(key) != reason:
            log.warning("memory store %s: skipped %s (%s)", self.agent_id, key, reason)
        self._problems[key] = reason

    def _category_id(self, category: str | None) -> int:
        cid = self._category_ids.get(category)
        if cid is None:
            cid = len(self._category_ids)
            self._category_ids[category] = cid
        return cid

    def _install(self, entry: MemoryEntry, parts: Parts) -> None:
        previous = self._entries.get(entry.id)
        if previous == entry and self._parts.get(entry.id) == parts:
            return
        self._entries[entry.id] = entry
        self._parts[entry.id] = parts
        if self._ops is not None:
            if previous is not None:
                for op in previous.applied_ops:
                    self._ops.pop(op, None)
            for op, value in entry.applied_ops.items():
                self._ops[op] = AppliedOp.parse(entry.id, value)
        self._index.put(
            entry.id,
            tokenize(document_text(entry)),
            archived=entry.is_archived,
            weight=0.5 + 0.5 * entry.importance_score,
            group=self._category_id(entry.category),
            importance=entry.importance_score,
            stamp=entry.last_seen_at.timestamp(),
        )
        if self._vectors is not None:
            self._vectors.mark(entry.id)

    def _forget(self, entry_id: str) -> None:
        previous = self._entries.pop(entry_id, None)
        self._parts.pop(entry_id, None)
        if self._ops is not None and previous is not None:
            for op in previous.applied_ops:
                self._ops.pop(op, None)
        self._index.remove(entry_id)
        if self._vectors is not None:
            self._vectors.forget(entry_id)

    # -- the change feed ---------------------------------------------------------------

    def _refresh(self) -> None:
        size = self.journal.size()
        if size < self._offset:  # journal replaced or truncated: trust nothing cached
            self._full_load()
            return
        if size > self._offset:
            records, self._offset = self.journal.read_from(self._offset)
            for record in records:
                self._apply_record(record)
        if self._pending:
            self._settle()

    def _apply_record(self, record: JournalRecord) -> None:
        if record.action is JournalAction.EMBEDDED:
            if self._vectors is not None:
                self._vectors.mark(record.id)  # only the vector file changed
            return
        try:
            parts = entry_parts(record.id, record.category)
        except InvalidInput as exc:
            log.warning("journal of %s: a record names an invalid path (%s)", self.agent_id, exc)
            return
        if record.action is JournalAction.REPAIRED:
            self._pending.pop(record.id, None)
            self._adopt_disk(record.id, parts)
            return
        if record.action is JournalAction.PURGED:
            if record.reason == ERASED:
                self._erased_seen = True  # another process's erase: see save_snapshot
            known = self._parts.get(record.id, parts)
            if any(os.path.lexists(self.files.path(*p)) for p in {parts, known}):
                # Its file is still there: a purge in flight, or a record that does not
                # match the files (then the disk wins when the lock is seen free).
                self._pending[record.id] = (record.rev or 0, known)
            else:
                self._pending.pop(record.id, None)
                self._forget(record.id)
            return
        entry = self._load(parts)
        if record.rev is None:  # a legacy record: the file is all there is
            if entry is None:
                # Forget the entry only if its own file is gone: a record naming another
                # category (a hostile or garbled line) must not hide a live entry.
                self._adopt_disk(record.id, parts)
            return
        if entry is not None and entry.revision >= record.rev:
            if self._pending.get(record.id, (0,))[0] <= entry.revision:
                self._pending.pop(record.id, None)
            return
        self._pending[record.id] = (record.rev, parts)  # the file has not landed (yet)

    def _adopt_disk(self, entry_id: str, parts: Parts) -> None:
        """Take the entry as its file is now (or forget it when there is none)."""
        if self._load(parts) is not None:
            return
        known = self._parts.get(entry_id)
        if known is not None and known != parts and self._load(known) is not None:
            return
        self._forget(entry_id)

    def _settle(self) -> None:
        """Resolve pending records: landed files are taken; when no write can be in
        flight (the lock is ours, or free) the disk wins — a writer repairs it in the
        journal."""
        for entry_id, (rev, parts) in list(self._pending.items()):
            entry = self._load(parts)
            if entry is not None and entry.revision >= rev:
                del self._pending[entry_id]
        if not self._pending:
            return
        if self._lock.held:
            self._repair()
        elif self._lock.is_free():
            for entry_id, (_, parts) in list(self._pending.items()):
                self._adopt_disk(entry_id, parts)
            self._pending.clear()

    def _repair(self) -> None:
        """Under the lock: every pending record is a write that died before its file
        landed. Record that, so every reader converges on the file as it is."""
        records = []
        for entry_id, (rev, parts) in sorted(self._pending.items()):
            self._adopt_disk(entry_id, parts)
            current = self._entries.get(entry_id)
            # `rev` names the revision that never landed (the disk keeps the one before).
            records.append(
                self._record(
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
                self.agent_id,
                entry_id,
                rev,
            )
        self._pending.clear()
        self._append(records)

    # -- reads -------------------------------------------------------------------------
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
            raise NotFound(f"no memory with id {entry_id} for agent {self.agent_id!r}")
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
            packed = vector_pack.load(
                self.files, self.agent_id, self.journal, self._vectors.model_key, dim, self._offset
            )
            if packed is not None:
                self._vectors.adopt(*packed)
                full = False
        index = self._vectors.index(dim, lambda: self._entries)
        if full and self._snapshots and len(index) >= snapshot.MIN_ENTRIES:
            self._write_pack(index)
        return index

    def unembedded(self) -> int:
        """How many live entries have no vector file at all (the backfill's backlog)."""
        try:
            names = os.listdir(self.embeddings_dir)
        except OSError:
            names = []
        have = {n[:-4] for n in names if n.endswith(".bin")}
        return sum(1 for e in self.entries() if e.id not in have)

    def stored_vector(
        self, entry: MemoryEntry, model_key: bytes | None = None, dim: int | None = None
    ) -> StoredVector | None:
        """The entry's stored vector if it was made from its current content (by
        `model_key` and of `dim` components, when given), or None."""
        if model_key is not None:
            vector = read_vector(self.embeddings_dir, entry.id, entry.fingerprint, model_key, dim)
            return None if vector is None else StoredVector(model_key, vector)
        try:
            data = vector_path(self.embeddings_dir, entry.id).read_bytes()
        except OSError:
            return None
        found = decode_any_model(data, entry.fingerprint)
        return None if found is None else StoredVector(*found)

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
            raise Conflict("no embedding model configured for this store")
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
                raise Conflict(f"memory {entry_id} already exists with other content")
            path = self.path_for(entry_id, category)
            if path.exists() or path.is_symlink():
                raise Conflict(f"{path} exists but could not be read; not overwriting it")
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

    # -- the bulk write path -----------------------------------------------------------

    def create_many(
        self, items: Iterable[NewEntry], *, now: datetime | None = None
    ) -> list[MemoryEntry]:
        """Create many entries under one lock hold: per chunk one journal batch, the files
        without a sync each, then one filesystem sync — with `create`'s guarantees (each
        entry atomic; a crash anywhere is repaired like a single write's, and nothing is
        durable-and-unjournaled). Every item is validated before anything is written; an
        explicit id is idempotent as in `create`."""
        at = as_utc(now) if now is not None else self.now()
        items = list(items)
        wanted = [new_entry(item, at) for item in items]
        fresh_ids = {e.id for e, item in zip(wanted, items, strict=True) if item.entry_id is None}
        report = self._bulk_write(wanted, reason=None, redraw=fresh_ids, strict=True)
        return report.entries

    def import_entries(self, entries: Iterable[MemoryEntry]) -> BulkReport:
        """Bring whole entries in as they are — ids, times, counts, archive state — on
        `create_many`'s bulk path: idempotent by id (an entry already here with the same
        content is left as it is), an id here with other content is a conflict, reported
        and left alone. Every entry is validated before anything is written."""
        wanted = [imported_entry(entry) for entry in entries]
        return self._bulk_write(wanted, reason="imported", redraw=set(), strict=False)

    def _bulk_write(
        self,
        wanted: list[MemoryEntry],
        *,
        reason: str | None,
        redraw: set[str],
        strict: bool,
    ) -> BulkReport:
        """One lock hold; per chunk a journal batch, the files, one sync (see `_commit`).
        `redraw`: ids the store chose, drawn again if taken. `strict`: a conflict raises."""
        report = BulkReport()
        with self.writing():
            taken: set[str] = set()
            for start in range(0, len(wanted), BULK_CHUNK):
                changes: list[Change] = []
                for entry in wanted[start : start + BULK_CHUNK]:
                    if entry.id in redraw:
                        while entry.id in self._entries or entry.id in taken:
                            entry = entry.model_copy(update={"id": new_entry_id()})
                    if entry.id in taken:
                        raise Conflict(f"memory {entry.id} is given twice")
                    taken.add(entry.id)
                    existing = self._fresh(entry.id)
                    if existing is not None:
                        if existing.content == entry.content:
                            report.entries.append(existing)
                            report.unchanged.append(existing.id)
                        elif strict:
                            raise Conflict(f"memory {entry.id} already exists with other content")
                        else:
                            report.conflicts.append(entry.id)
                        continue
                    written = entry.model_copy(update={"revision": 1})
                    parts = entry_parts(written.id, written.category)
                    changes.append(Change(written, JournalAction.CREATED, reason, None, parts))
                    report.entries.append(written)
                    report.created.append(written.id)
                if changes:
                    self._commit(changes)
        return report

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
                    raise Conflict(f"memory {entry.id} no longer exists; not recreating it")
                path = self.path_for(entry.id, entry.category)
                if path.exists() or path.is_symlink():
                    raise Conflict(f"{path} exists but could not be read; not overwriting")
            elif entry.revision != current.revision:
                raise Conflict(
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
                raise NotFound(f"no memory with id {entry_id} for agent {self.agent_id!r}")
            updated = change(current)
            if updated.id != current.id:
                raise Conflict("a mutation cannot change an entry's id")
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

    # -- an entry's end of life: archive, retirement, restore, purge -----------------

    def archive(self, entry_id: str, reason: str, *, now: datetime | None = None) -> MemoryEntry:
        """Hide an entry from search, keeping it on disk. Archiving twice is a no-op and
        the first reason is kept."""
        if not reason or not reason.strip():
            raise InvalidInput("an archive needs a reason")
        self.require(entry_id)  # reject unknown ids before taking (creating) the lock
        with self.writing():
            current = self._fresh(entry_id)
            if current is None:
                raise NotFound(f"no memory with id {entry_id} for agent {self.agent_id!r}")
            if current.is_archived:
                return current
            at = as_utc(now) if now is not None else self.now()
            archived = current.model_copy(update={"archived_at": at, "archive_reason": reason})
            return self._write(archived, current, JournalAction.ARCHIVED, reason)

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
        the intent in `ledger` first. True when it is archived for this reason now (a
        retry finds it already done)."""
        with self.writing():
            entry = self.get(entry_id)
            if entry is None:
                return False
            if entry.is_archived:
                return entry.archive_reason == reason
            if entry.fingerprint != fingerprint:
                return False
            ledger.note("prune", [(entry_id, entry)])
            self.archive(entry_id, reason, now=now)
            return True

    def retire_into(
        self,
        entry_id: str,
        into: Iterable[str],
        *,
        reason: str,
        expected_fingerprint: str | None = None,
        vocabulary: Vocabulary = DEFAULT_VOCABULARY,
        now: datetime | None = None,
        check: Callable[[MemoryEntry, list[MemoryEntry]], str | None] | None = None,
    ) -> Retirement:
        """Archive `entry_id` *into* its replacements — one store operation, under the
        lock — only if every replacement is live now and together they cover the entry's
        specifics (and `check`, a stricter rule, has no objection); otherwise change
        nothing and say why. Retiring again into the same replacements is a no-op."""
        targets = list(dict.fromkeys(validate_entry_id(i) for i in into))
        validate_entry_id(entry_id)
        if not targets or entry_id in targets:
            raise InvalidInput("an entry retires into one or more other entries")
        with self.writing():
            current = self._fresh(entry_id)
            if current is None:
                return Retirement(False, f"{entry_id} does not exist")
            if current.is_archived:
                if sorted(retired_into(current)) == sorted(targets):
                    return Retirement(True, "already retired into them")
                return Retirement(False, f"{entry_id} is already archived")
            if expected_fingerprint is not None and current.fingerprint != expected_fingerprint:
                return Retirement(False, f"{entry_id} changed since it was shown")
            replacements = []
            for target in targets:
                replacement = self._fresh(target)
                if replacement is None or replacement.is_archived:
                    return Retirement(False, f"replacement {target} is not live")
                replacements.append(replacement)
            missing = _missing(
                [Source(current.content, current.category)],
                "\n\n".join(r.content for r in replacements),
                vocabulary,
            )
            if missing:
                return Retirement(
                    False, f"the replacements miss {len(missing)} specific(s)", tuple(missing)
                )
            objection = check(current, replacements) if check is not None else None
            if objection:
                return Retirement(False, objection)
            at = as_utc(now) if now is not None else self.now()
            archived = current.model_copy(
                update={
                    "archived_at": at,
                    "archive_reason": reason,
                    "retired_into": sorted(targets),
                }
            )
            self._write(archived, current, JournalAction.ARCHIVED, reason)
            return Retirement(True)

    def fold(
        self,
        fold: Fold,
        *,
        op: str,
        reason: str,
        ledger: IntentLog,
        now: datetime | None = None,
    ) -> list[str]:
        """Save the survivor with the group's arithmetic — once: `op` and the copies it
        summed are recorded in it — then retire exactly those copies into it (`reason`).
        Each write's intent goes to `ledger` first. Returns the copies retired now or by
        an earlier attempt of the same op."""
        with self.writing():
            done = self.applied(op)
            if done is not None:
                copies = [c for c in done.detail.split(",") if c]
            else:
                copies = list(fold.copies)
                ledger.note("fold", [(fold.survivor.id, self.get(fold.survivor.id))])
                self.put(
                    fold.survivor,
                    action=JournalAction.MERGED,
                    op=op,
                    op_detail=",".join(copies),
                    reason=f"folded {len(copies)} exact duplicate(s)",
                )
            ledger.note(
                "fold", [(c, e) for c in copies if (e := self.get(c)) and not e.is_archived]
            )
            return [
                copy
                for copy in copies
                if self.retire_into(copy, [fold.survivor.id], reason=reason, now=now).retired
            ]

    def restore(self, entry_id: str, *, force: bool = False) -> MemoryEntry:
        """Bring an archived entry back. An entry archived into others that are still
        live is refused (they carry its content and reinforcements: restoring would count
        them twice) unless `force`."""
        self.require(entry_id)  # reject unknown ids before taking (creating) the lock
        with self.writing():
            current = self._fresh(entry_id)
            if current is None:
                raise NotFound(f"no memory with id {entry_id} for agent {self.agent_id!r}")
            if not current.is_archived:
                return current
            if not force:
                _refuse_restore(current, self._fresh)
            restored = current.model_copy(
                update={"archived_at": None, "archive_reason": None, "retired_into": []}
            )
            return self._write(restored, current, JournalAction.RESTORED, "restored")

    def check_restorable(self, entry_id: str, *, force: bool = False) -> None:
        """Raise what `restore` would refuse, writing nothing: a client asks before it
        starts a restore workflow, so a refused restore leaves no failed run behind."""
        entry = self.require(entry_id)
        if entry.is_archived and not force:
            _refuse_restore(entry, self.get)

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """A dry run's view: caught up with the journal, no writer lock taken."""
        self._ensure_loaded()
        yield

    def purge(
        self,
        retention: timedelta,
        *,
        keep: Callable[[MemoryEntry], bool] = lambda _: False,
        now: datetime | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        dry_run: bool = False,
        only: Callable[[MemoryEntry], bool] | None = None,
    ) -> PurgeReport:
        """Hard-delete entries archived before `now - retention`, except those `keep`
        protects. A retention of zero or less keeps everything. `dry_run`: report what
        would go, delete nothing; `only`: consider just the entries it accepts."""
        report = PurgeReport()
        if retention <= timedelta(0):
            return report
        with self.writing() if not dry_run else self._reading():
            cutoff = (as_utc(now) if now is not None else self.now()) - retention
            archived = [
                e for e in self._entries.values() if e.is_archived and (only is None or only(e))
            ]
            report.considered = len(archived)
            doomed = []
            for entry in archived:
                assert entry.archived_at is not None
                if entry.archived_at >= cutoff:
                    report.kept_in_retention += 1
                elif keep(entry):
                    report.kept_high_value.append(entry.id)
                else:
                    doomed.append(entry)
            if not dry_run:
                self._delete(doomed, on_progress)
            report.purged = [e.id for e in doomed]
        return report

    def _delete(
        self,
        doomed: list[MemoryEntry],
        on_progress: Callable[[int, int], None] | None,
    ) -> None:
        """Journal the purges first, then remove the files: a crash in between leaves
        pending purges that the next writer repairs (the files stand; purge runs again)."""
        records = []
        for entry in doomed:
            parts = self._parts[entry.id]
            records.append(
                self._record(
                    JournalAction.PURGED,
                    entry.id,
                    parts,
                    entry,
                    reason=entry.archive_reason,
                    rev=entry.revision + 1,
                )
            )
            self._pending[entry.id] = (entry.revision + 1, parts)
        self._append(records)
        for done, entry in enumerate(doomed, start=1):
            self.files.unlink(self._parts[entry.id])
            self.files.unlink((MEMORY, EMBEDDINGS_DIR, f"{entry.id}.bin"))
            self._forget(entry.id)
            self._pending.pop(entry.id, None)
            if on_progress is not None:
                on_progress(done, len(doomed))

    def erase(self, entry_ids: Iterable[str], *, reason: str = ERASED) -> list[str]:
        """Hard-delete entries now, live or archived, with their vectors: the one deletion
        outside purge's retention, for a person's request to be forgotten
        (`stores.forget`). Journaled first as purges (ids and `reason`, never content);
        a crash before the files go leaves them standing, and the forget request's own
        journal makes the next writer erase them again. Then the index snapshot and the
        vector packs, which quote every entry, are deleted (caches: the next open rebuilds
        them) and this instance rebuilds its index, so no term of the erased text stays
        in its vocabulary. Returns the ids erased now."""
        ids = list(dict.fromkeys(validate_entry_id(i) for i in entry_ids))
        with self.writing():
            doomed = [e for i in ids if (e := self._fresh(i)) is not None]
            records = []
            for entry in doomed:
                parts = self._parts[entry.id]
                records.append(
                    self._record(
                        JournalAction.PURGED,
                        entry.id,
                        parts,
                        None,
                        reason=reason,
                        rev=entry.revision + 1,
                    )
                )
                self._pending[entry.id] = (entry.revision + 1, parts)
            self._append(records)
            faults.crash_point(faults.ERASE_JOURNALED)
            for entry in doomed:
                self.files.unlink(self._parts[entry.id])
                self.files.unlink((MEMORY, EMBEDDINGS_DIR, f"{entry.id}.bin"))
                self._forget(entry.id)
                self._pending.pop(entry.id, None)
            self.files.unlink(snapshot.SNAPSHOT)
            try:
                names = os.listdir(self.embeddings_dir)
            except OSError:
                names = []
            for name in names:
                if name.startswith("pack-") and name.endswith(".vectors"):
                    self.files.unlink((MEMORY, EMBEDDINGS_DIR, name))
            if doomed:
                self._rebuild_index()
        return [e.id for e in doomed]

    def _rebuild_index(self, *, snapshot_after: bool = True) -> None:
        """The index keeps every term it has seen, postings or not: rebuilt from the
        entries held now, it no longer has the erased text's terms, so no snapshot
        written later can carry them. No file is read again."""
        held = [(entry, self._parts[entry.id]) for entry in list(self._entries.values())]
        self._entries, self._parts, self._ops = {}, {}, None
        self._index = BM25Index()
        self._category_ids = {}
        for entry, parts in held:
            self._install(entry, parts)
        self._erased_seen = False
        if snapshot_after and self._snapshots and len(self._entries) >= snapshot.MIN_ENTRIES:
            self.save_snapshot()

    def tags(self) -> list[str]:
        """The distinct tags of live entries, case-insensitively (as the tag filter
        matches), sorted; of two spellings of one tag the first in sort order."""
        spellings: dict[str, str] = {}
        for entry in self.entries():
            for tag in entry.tags:
                key = tag.lower()
                spellings[key] = min(spellings.get(key, tag), tag)
        return [spellings[key] for key in sorted(spellings)]


def _refuse_restore(entry: MemoryEntry, lookup: Callable[[str], MemoryEntry | None]) -> None:
    live = [i for i in retired_into(entry) if (e := lookup(i)) is not None and not e.is_archived]
    if live:
        raise Conflict(
            f"memory {entry.id} was archived into {', '.join(live)}, which still "
            "carries its content and reinforcements: archive that first (then "
            "restore this), or restore with force to keep both"
        )
