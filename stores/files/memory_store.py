"""`FileMemoryStore`: one agent's long-term memory, one JSON file per entry.

Layout under `{data}/agents/{agent_id}/`:
  memory/{category}/{id}.json    an entry (uncategorized entries at memory/{id}.json)
  memory/.embeddings/{id}.bin    its vector, when an embedding model is configured
  journal.jsonl                  append-only change journal (no content), compacted by
                                 the writer into a new generation (`compact_journal`)
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

The operations themselves (create, put, archive, retire-into, fold, restore, purge, the
bulk path) are written once for every backend in `stores.longterm.operations`;
`FileMemoryStore` is them over a `FileEntryStorage`, this backend's steps: the writer
lock (`writing`), catching up (`catch_up`), the entry as its file is now (`fresh`) and
the journaled write (`write`). Loading, the change feed and the writes share one state
(the shared `EntryState`, and the pending records), owned by the storage. The index snapshot and the vector pack are
caches written and read with explicit arguments (`stores.files.snapshot_file`,
`stores.files.vector_pack`). The guarantees are `stores.contract.MemoryStore`'s.

Exactly once: a write made on behalf of an operation (a dedup save, a fold, an absorb)
records the operation id inside the entry file it changes — the same atomic rename — so
a retry asks `applied(op)` and never infers "done" from what the entry looks like.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry, utc_now
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores import faults
from dreamkeeper.stores.contract.documents import AgentDocuments
from dreamkeeper.stores.contract.feed import MAX_LINE_BYTES, JournalAction, JournalRecord
from dreamkeeper.stores.files import snapshot_file, vector_pack
from dreamkeeper.stores.files.agent_files import AgentFiles
from dreamkeeper.stores.files.documents import FileDocuments
from dreamkeeper.stores.files.entry_files import (
    EMBEDDINGS_DIR,
    MEMORY,
    Parts,
    entry_parts,
    load_entry,
    scan,
)
from dreamkeeper.stores.files.journal import JOURNAL, NEXT_GENERATION, Journal, epoch_of
from dreamkeeper.stores.files.vector_files import file_reader, vector_path
from dreamkeeper.stores.longterm import snapshot
from dreamkeeper.stores.longterm.entry_state import EntryState
from dreamkeeper.stores.longterm.operations import StoreOperations
from dreamkeeper.stores.longterm.records import entry_version
from dreamkeeper.stores.longterm.storage import ERASED, EntryWrite
from dreamkeeper.stores.vectors.embedder import Embedder
from dreamkeeper.stores.vectors.vectors import EntryVectors, VectorIndex

log = logging.getLogger(__name__)

# Journal compaction (`compact_journal`, docs/storage.md "Compacting the file journal"):
# the writer compacts at the end of a hold when the journal has reached COMPACT_BYTES
# (about 5,000 records), or COMPACT_BYTES_PER_ENTRY per entry held when that is more.
COMPACT_BYTES = 1 << 20
COMPACT_BYTES_PER_ENTRY = 256


class _HeldJournal:
    """The journal file an instance has read, kept open: while it is, no other file can
    take its inode, so "the journal at the path is another file" (the agent was erased
    and its store made again) is a fact, not a guess from sizes or times."""

    def __init__(self, fd: int) -> None:
        st = os.fstat(fd)
        self.identity = (st.st_dev, st.st_ino)
        self.epoch = epoch_of(os.pread(fd, MAX_LINE_BYTES, 0))
        self.fd = fd
        self._close = weakref.finalize(self, os.close, fd)

    def close(self) -> None:
        self._close()


@dataclass(frozen=True)
class Change:
    """One entry write of a commit: the entry as it will be on disk, revision included."""

    entry: MemoryEntry
    action: JournalAction
    reason: str | None
    op: str | None
    parts: Parts
    old_parts: Parts | None = None  # a category move: the file to remove afterwards


class FileEntryStorage:
    """One agent's entry files, journal and writer lock: the file backend's steps for the
    long-term operations (`EntryStorage`). `now` is the store's clock (journal times)."""

    def __init__(
        self,
        data_dir: Path | str,
        agent_id: str,
        *,
        now: Callable[[], datetime],
        embeddings: Embedder | None,
        snapshots: bool,
    ) -> None:
        self.agent_id = validate_agent_id(agent_id)
        self.files = AgentFiles(data_dir, agent_id)
        self.root = self.files.root
        # What dream cycles keep between runs (ledgers, cluster state, settings, the
        # conversation log): files under the agent's directory, as they always were.
        self.documents: AgentDocuments = FileDocuments(self.files)
        self.memory_dir = self.files.path(MEMORY)
        self.embeddings_dir = self.files.path(MEMORY, EMBEDDINGS_DIR)
        self.journal = Journal(self.files)
        self._lock = self.files.lock((".lock",))
        self._now = now
        self.embeddings = embeddings
        # The entries, the index, the skipped files and the journal offset. An entry's
        # file is where its id and category say (a file is loaded only from there): no
        # path is kept per entry (`_parts_of`).
        self.state = EntryState(
            vectors=EntryVectors(embeddings.model_key, file_reader(self.embeddings_dir))
            if embeddings
            else None
        )
        self._pending: dict[str, tuple[int, Parts]] = {}  # id -> (announced revision, path)
        # id -> the latest revision journaled by a write that never landed (`_note_dead`)
        self._dead_revisions: dict[str, int] = {}
        # The journal read (store epochs, docs/storage.md); None: there was none.
        self._journal_held: _HeldJournal | None = None
        self._loaded = False
        self._hold_appended = False
        self._erased_seen = False  # a record of `erase` applied since the index was built
        self._snapshots = snapshots  # open from, and write, the index snapshot (a cache)
        self.opened_from_snapshot = False

    def path_for(self, entry_id: str, category: str | None) -> Path:
        return self.files.path(*entry_parts(entry_id, category))

    def _held(self, entry_id: str) -> Parts:
        parts = self._parts_of(entry_id)
        if parts is None:
            raise KeyError(entry_id)
        return parts

    def _parts_of(self, entry_id: str) -> Parts | None:
        """The file of the entry as held (None: not held), without reading the entry."""
        try:
            category = self.state.entries.category(entry_id)
        except KeyError:
            return None
        return entry_parts(entry_id, category)

    @property
    def loaded(self) -> bool:
        """Whether anything has been read yet (a store opens on first use)."""
        return self._loaded

    # -- loading -----------------------------------------------------------------------

    def reload(self) -> None:
        """Forget everything in memory and rescan the directory (not the snapshot)."""
        self._full_load(use_snapshot=False)

    def _full_load(self, *, use_snapshot: bool = True) -> None:
        self._take_journal()  # before anything is read: what follows belongs to it
        self._erased_seen = False  # a fresh index; records replayed below may set it
        self.state.clear()
        self._pending.clear()
        self.opened_from_snapshot = False
        if use_snapshot and self._snapshots:
            state = snapshot_file.load(self.files, self.agent_id, self.journal, self._epoch)
            if state is not None:
                # The state as of the snapshot's offset: replay only the journal after it.
                self.state.adopt(state)
                self.opened_from_snapshot = True
                self._loaded = True
                self.catch_up()
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
        self.state.offset = replay_from
        self._loaded = True
        self.catch_up()
        if self._snapshots and len(self.state.entries) >= snapshot.MIN_ENTRIES:
            self.save_snapshot()

    @property
    def _epoch(self) -> str:
        held = self._journal_held
        return "" if held is None else held.epoch

    def _take_journal(self) -> None:
        """Hold the journal at the path as it is now (or nothing, when there is none)."""
        if self._journal_held is not None:
            self._journal_held.close()
            self._journal_held = None
        try:
            fd = self.files.open_read(JOURNAL)
        except OSError:
            return  # none yet; or a link or not a file, which `problems()` reports
        self._journal_held = _HeldJournal(fd)

    def _journal_replaced(self, st: os.stat_result | None) -> bool:
        """Whether the journal at the path (`st`, None: there is none) is not the one
        this instance read: the agent was erased (whole-agent forget) and perhaps
        written again since."""
        if st is None:
            return self._journal_held is not None
        held = self._journal_held
        if held is None:
            if not stat.S_ISREG(st.st_mode):
                return False  # a link or no file: refused and reported, never read
            # No journal when this instance loaded: the one that has appeared since may
            # have been compacted past what this instance never read (every record of the
            # entries there are may be gone): load again, and hold it.
            return True
        return (st.st_dev, st.st_ino) != held.identity

    def save_snapshot(self) -> bool:
        """Write the index snapshot (`stores.files.snapshot_file`) of the state as it is now, after
        catching up with the journal; False when it could not be (a write is pending, or
        the directory is not writable — logged: it is only a cache)."""
        self.catch_up()
        try:
            # Only a state with no pending record is exactly what the journal says up to
            # the offset.
            if self._pending or not self._loaded:
                return False
            if self._erased_seen:
                # Erased entries' terms are still in this index's vocabulary: a
                # snapshot of it would carry them (a forgotten name) to disk again.
                self._rebuild_index(snapshot_after=False)
            snapshot_file.write(self.files, self.agent_id, self.state, self.journal, self._epoch)
            current = self.state.vectors.current if self.state.vectors is not None else None
            if current is not None:
                self._write_pack(self.vector_index(current.dim))
            return True
        except OSError as exc:
            log.warning("memory store %s: index snapshot not written (%s)", self.agent_id, exc)
            return False

    def _write_pack(self, index: VectorIndex) -> bool:
        if self._pending or self.state.vectors is None:
            return False
        return vector_pack.write(
            self.files,
            self.agent_id,
            index,
            self.state.vectors.model_key,
            self.state.offset,
            self.journal,
            self._epoch,
        )

    def _load(self, parts: Parts, *, scanning: bool = False) -> MemoryEntry | None:
        loaded = load_entry(self.files, parts)
        entry = loaded.entry
        if entry is None:
            if loaded.problem is not None:
                self._report(parts, loaded.problem)
            return None
        known = self._parts_of(entry.id)
        if scanning and known is not None and known != parts:
            # Two files for one id: a category move interrupted between writing the new
            # file and removing the old. The later revision wins; the other is reported.
            if entry_version(entry) < entry_version(self.state.entries[entry.id]):
                self._report(parts, f"stale duplicate of {entry.id} at {'/'.join(known)}")
                return None
            self._report(known, f"stale duplicate of {entry.id} at {'/'.join(parts)}")
        self.state.problems.pop(self.files.path(*parts), None)
        self.state.install(entry)
        return entry

    def _report(self, parts: Parts, reason: str) -> None:
        key = self.files.path(*parts)
        if self.state.problems.get(key) != reason:
            log.warning("memory store %s: skipped %s (%s)", self.agent_id, key, reason)
        self.state.problems[key] = reason

    # -- the change feed ---------------------------------------------------------------

    def catch_up(self) -> None:
        """Load the store on first use; after that, apply the journal's new records."""
        if not self._loaded:
            self._full_load()
            return
        try:
            st: os.stat_result | None = os.lstat(self.journal.path)
        except FileNotFoundError:
            st = None
        if self._journal_replaced(st):
            # Another store under this agent id, at whatever offset: nothing held is its.
            log.info("memory store %s: the store's journal was replaced; reloading", self.agent_id)
            self._full_load()
            return
        size = 0 if st is None else st.st_size
        if size < self.state.offset:  # journal replaced or truncated: trust nothing cached
            self._full_load()
            return
        if size > self.state.offset:
            # Through the descriptor held: a compaction renaming the next generation in
            # now must not have this offset read in it (the next catch-up sees the swap).
            held = self._journal_held
            records, self.state.offset = self.journal.read_from(
                self.state.offset, None if held is None else held.fd
            )
            for record in records:
                self._apply_record(record)
        if self._pending:
            self._settle()

    def _apply_record(self, record: JournalRecord) -> None:
        if record.action is JournalAction.EMBEDDED:
            if self.state.vectors is not None:
                self.state.vectors.mark(record.id)  # only the vector file changed
            return
        try:
            parts = entry_parts(record.id, record.category)
        except InvalidInput as exc:
            log.warning("journal of %s: a record names an invalid path (%s)", self.agent_id, exc)
            return
        if record.action is JournalAction.REPAIRED:
            self._pending.pop(record.id, None)
            self._note_dead(record.id, record.rev)
            self._adopt_disk(record.id, parts)
            return
        if record.action is JournalAction.PURGED:
            if record.reason == ERASED:
                self._erased_seen = True  # another process's erase: see save_snapshot
            known = self._parts_of(record.id) or parts
            if any(os.path.lexists(self.files.path(*p)) for p in {parts, known}):
                # Its file is still there: a purge in flight, or a record that does not
                # match the files (then the disk wins when the lock is seen free).
                self._pending[record.id] = (record.rev or 0, known)
            else:
                self._pending.pop(record.id, None)
                self.state.forget(record.id)
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
        known = self._parts_of(entry_id)
        if known is not None and known != parts and self._load(known) is not None:
            return
        self.state.forget(entry_id)

    def _settle(self) -> None:
        """Resolve pending records: landed files are taken; when no write can be in
        flight (the lock is ours, or free) the disk wins, and the repair is journaled —
        by this store itself when the lock is free, taken without waiting, so a process
        that reads before it writes never leaves a dead write unrepaired."""
        for entry_id, (rev, parts) in list(self._pending.items()):
            entry = self._load(parts)
            if entry is not None and entry.revision >= rev:
                del self._pending[entry_id]
        if not self._pending:
            return
        if self._lock.held:
            self._repair()
        elif self._lock.is_free() and not self._repair_while_free():
            # A store this process cannot write (read-only): the disk wins here; the
            # next writer reads the same records and journals the repair.
            for entry_id, (_, parts) in list(self._pending.items()):
                self._adopt_disk(entry_id, parts)
            self._pending.clear()

    def _repair_while_free(self) -> bool:
        """Take the writer lock if it is still free, catch up under it (another writer
        may have repaired or landed the write meanwhile) and repair what is left. True
        when that happened or a writer now holds the lock (its hold repairs); False when
        this process cannot take the lock for writing."""
        try:
            with self._lock.hold_if_free() as held:
                if held:
                    self._hold_appended = False
                    self.catch_up()  # under the lock: ends in _repair
                return True
        except OSError as exc:
            log.debug("memory store %s: cannot journal a repair here (%s)", self.agent_id, exc)
            return False

    def _repair(self) -> None:
        """Under the lock: every pending record is a write that died before its file
        landed. Record that, so every reader converges on the file as it is; the dead
        revision's number is not written again (`write`)."""
        records = []
        for entry_id, (rev, parts) in sorted(self._pending.items()):
            self._adopt_disk(entry_id, parts)
            self._note_dead(entry_id, rev)
            current = self.state.entries.get(entry_id)
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

    def _note_dead(self, entry_id: str, rev: int | None) -> None:
        """A revision of the entry journaled by a write that never landed: the entry's
        next write takes a number after it, so no two records name one revision for
        two different writes (an audit then counts the retried operation once)."""
        if rev is not None and rev > self._dead_revisions.get(entry_id, 0):
            self._dead_revisions[entry_id] = rev

    # -- reads -------------------------------------------------------------------------

    def problems(self) -> dict[Path, str]:
        """Files skipped (unreadable, misplaced, symlinked) and links where the store's
        own files should be, with the reason."""
        self.catch_up()
        found = dict(self.state.problems)
        for name in (".lock", "journal.jsonl", MEMORY, f"{MEMORY}/{EMBEDDINGS_DIR}"):
            path = self.root / name
            if path.is_symlink():
                found[path] = "a symlink: refused (the store never follows links)"
        return found

    def vector_index(self, dim: int) -> VectorIndex:
        """The in-memory vectors of `dim` components, current with every write: from the
        vector pack when every one would have to be read."""
        assert self.state.vectors is not None
        full = self.state.vectors.needs_full(dim)
        if full and self._snapshots and not self._pending:
            packed = vector_pack.load(
                self.files,
                self.agent_id,
                self.journal,
                self.state.vectors.model_key,
                dim,
                self.state.offset,
                self._epoch,
            )
            if packed is not None:
                self.state.vectors.adopt(*packed)
                full = False
        index = self.state.vectors.index(dim, lambda: self.state.entries)
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
        self.catch_up()
        live = (e for e in self.state.entries.values() if not e.is_archived)
        return sum(1 for e in live if e.id not in have)

    def vector_bytes(self, entry_id: str) -> bytes | None:
        try:
            return vector_path(self.embeddings_dir, entry_id).read_bytes()
        except OSError:
            return None

    def changes(self) -> list[JournalRecord]:
        """The whole journal, oldest first (a torn or malformed line skipped)."""
        return self.journal.read_all()

    # -- the write protocol ------------------------------------------------------------

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the store's writer lock (re-entrant): for a lookup and a write that must
        see no other writer in between. The outermost hold catches up and repairs."""
        with self._lock.hold() as outermost:
            if outermost:
                self._hold_appended = False
                self.catch_up()
            yield
            if outermost and self.state.offset >= self._compact_at():
                self._compact_after_writes()

    # -- compaction --------------------------------------------------------------------

    def _compact_at(self) -> int:
        """The journal size at which the writer compacts (docs/storage.md, "Compacting
        the file journal"): COMPACT_BYTES, or more for a large store, whose snapshot (an
        O(entries) write) must stay a small share of the writes between compactions."""
        return max(COMPACT_BYTES, COMPACT_BYTES_PER_ENTRY * len(self.state.entries))

    def _compact_after_writes(self) -> None:
        """The hold's writes are durable already: a compaction that fails is logged, never
        the caller's failure (the journal is left whole; the next hold tries again)."""
        try:
            self.compact_journal()
        except OSError as exc:
            log.warning("memory store %s: journal not compacted (%s)", self.agent_id, exc)

    def compact_journal(self) -> bool:
        """Replace the journal with its next generation: the epoch line and a `COMPACTED`
        record, every record before dropped (`stores.files.journal`). Under the writer
        lock, caught up and with no write pending, every record is resolved: the entry
        files are the state, and the journal's old records are needed by no one — a reader
        holding the old generation sees another file at the path and loads again (from
        the snapshot written here); migrate and forget read the entries. False when a
        write is pending (it must stay journaled until it lands or is repaired).

        Steps, each a crash point: the new generation is written and fsynced beside the
        journal (`JOURNAL_COMPACTING`: the journal is whole, a leftover dot file is
        written over next time), renamed over it and the directory fsynced
        (`JOURNAL_COMPACTED`: the old snapshot no longer matches and is refused, so an
        open scans the files), then the index snapshot is written for the new generation."""
        with self.writing():
            if self._pending or self.journal.size() == 0:
                return False  # (no journal: nothing to compact, and no epoch to keep)
            generation = self.journal.generation() + 1
            marker = JournalRecord(
                at=self._now(),
                action=JournalAction.COMPACTED,
                id=f"generation-{generation}",
                category=None,
                fingerprint=None,
                reason=f"{self.state.offset} bytes of records before this line compacted",
                rev=generation,
            )
            data = self.journal.next_generation(marker)
            self.files.write(NEXT_GENERATION, data)
            faults.crash_point(faults.JOURNAL_COMPACTING)
            self.files.rename(NEXT_GENERATION, JOURNAL)
            self._take_journal()  # the lock is held: the file at the path is the one written
            self.state.offset = len(data)
            self._hold_appended = False  # the new generation has no hold marker yet
            faults.crash_point(faults.JOURNAL_COMPACTED)
            if self._snapshots and len(self.state.entries) >= snapshot.MIN_ENTRIES:
                self.save_snapshot()
            else:
                # Taken from the old generation, it is refused from now on: not kept.
                self.files.unlink(snapshot.SNAPSHOT)
            log.info(
                "memory store %s: journal compacted (generation %d)", self.agent_id, generation
            )
            return True

    def fresh(self, entry_id: str) -> MemoryEntry | None:
        """Under the lock: the entry as its file is now. A file changed behind the
        journal's back (a hand edit) is taken as it is, with a warning."""
        parts = self._parts_of(entry_id)
        if parts is None:
            return None
        loaded = load_entry(self.files, parts)
        if loaded.entry is None:
            self._report(parts, loaded.problem or "vanished outside the journal")
            self.state.forget(entry_id)
            return None
        if loaded.entry != self.state.entries.get(entry_id):
            log.warning(
                "memory store %s: %s changed on disk outside the journal; using the file",
                self.agent_id,
                entry_id,
            )
            self.state.install(loaded.entry)
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
            at=self._now(),
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
        self.state.offset = self.journal.append(records)
        self._hold_appended = True
        if self._journal_held is None:
            # The journal this write started (the lock is held: it is the one at the path).
            self._take_journal()

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
                self.state.install(c.entry)
        if batch:
            self.files.sync_filesystem()
        for c in changes:
            self._pending.pop(c.entry.id, None)

    def write(self, change: EntryWrite) -> MemoryEntry:
        """Journal the entry, then replace its file (and remove its base's, when the
        write moves it to another category)."""
        entry = change.entry
        dead = self._dead_revisions.pop(entry.id, 0)
        if entry.revision <= dead:  # a write that died journaled that number
            entry = entry.model_copy(update={"revision": dead + 1})
        parts = entry_parts(entry.id, entry.category)
        old = self._parts_of(entry.id) if change.base is not None else None
        self._commit([Change(entry, change.action, change.reason, change.op, parts, old)])
        return entry

    # -- writes ------------------------------------------------------------------------

    def unreadable(self, entry_id: str, category: str | None) -> str | None:
        path = self.path_for(entry_id, category)
        return str(path) if path.exists() or path.is_symlink() else None

    def insert_batch(self, entries: list[MemoryEntry], reason: str | None) -> None:
        self._commit(
            [
                Change(e, JournalAction.CREATED, reason, None, entry_parts(e.id, e.category))
                for e in entries
            ]
        )

    def store_vector(self, entry: MemoryEntry, data: bytes) -> bool:
        """The vector file first, then its record: the file is keyed to the content, so a
        crash before the record costs at most a long-lived reader's noticing it before
        its next reload."""
        assert self.state.vectors is not None
        self.files.write((MEMORY, EMBEDDINGS_DIR, f"{entry.id}.bin"), data)
        self.state.vectors.mark(entry.id)
        self._append([self._record(JournalAction.EMBEDDED, entry.id, self._held(entry.id), entry)])
        return True

    def delete(
        self,
        doomed: list[MemoryEntry],
        on_progress: Callable[[int, int], None] | None,
    ) -> None:
        """Journal the purges first, then remove the files: a crash in between leaves
        pending purges that the next writer repairs (the files stand; purge runs again)."""
        self._journal_purges(doomed, None)
        self._remove(doomed, on_progress)

    def _journal_purges(self, doomed: list[MemoryEntry], erased: str | None) -> None:
        """Journal each entry's purge, pending until its file is gone. `erased`: the
        reason of an erase, whose records name no fingerprint (nothing of the content);
        None: a purge's, each with its entry's archive reason."""
        records = []
        for entry in doomed:
            parts = self._held(entry.id)
            shown, reason = (entry, entry.archive_reason) if erased is None else (None, erased)
            rev = entry.revision + 1
            records.append(
                self._record(JournalAction.PURGED, entry.id, parts, shown, reason=reason, rev=rev)
            )
            self._pending[entry.id] = (rev, parts)
        self._append(records)

    def _remove(
        self, doomed: list[MemoryEntry], on_progress: Callable[[int, int], None] | None = None
    ) -> None:
        """Remove the journaled purges' files and vectors, and let go of the entries."""
        for done, entry in enumerate(doomed, start=1):
            self.files.unlink(self._held(entry.id))
            self.files.unlink((MEMORY, EMBEDDINGS_DIR, f"{entry.id}.bin"))
            self.state.forget(entry.id)
            self._pending.pop(entry.id, None)
            if on_progress is not None:
                on_progress(done, len(doomed))

    def erase(self, doomed: list[MemoryEntry], reason: str) -> None:
        """Journaled first as purges (ids and `reason`, never content); a crash before
        the files go leaves them standing, and the forget request's own journal makes
        the next writer erase them again. Then the index snapshot and the vector packs,
        which quote every entry, are deleted (caches: the next open rebuilds them)."""
        self._journal_purges(doomed, reason)
        faults.crash_point(faults.ERASE_JOURNALED)
        self._remove(doomed)
        if doomed:
            # The index is rebuilt from the entries below: read those still in the
            # snapshot in one go first, not each from its own file once it is gone.
            self.state.entries.hold_in_memory()
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

    def _rebuild_index(self, *, snapshot_after: bool = True) -> None:
        """The index rebuilt without the erased text's terms (`EntryState.reindex`), so no
        snapshot written later can carry them."""
        self.state.reindex()
        self._erased_seen = False
        if snapshot_after and self._snapshots and len(self.state.entries) >= snapshot.MIN_ENTRIES:
            self.save_snapshot()


class FileMemoryStore(StoreOperations):
    """One agent's long-term memory in a data directory: the shared operations over its
    `FileEntryStorage` (the module docstring has the layout and the write protocol)."""

    storage: FileEntryStorage

    def __init__(
        self,
        data_dir: Path | str,
        agent_id: str,
        *,
        clock: Callable[[], datetime] = utc_now,
        embeddings: Embedder | None = None,
        snapshots: bool = True,
    ) -> None:
        storage = FileEntryStorage(
            data_dir, agent_id, now=self.now, embeddings=embeddings, snapshots=snapshots
        )
        super().__init__(storage, clock=clock)
        self.files, self.root, self.journal = storage.files, storage.root, storage.journal
        self.memory_dir, self.embeddings_dir = storage.memory_dir, storage.embeddings_dir

    def path_for(self, entry_id: str, category: str | None) -> Path:
        return self.storage.path_for(entry_id, category)

    def compact_journal(self) -> bool:
        """Replace the journal with its next generation (`FileEntryStorage.compact_journal`)."""
        return self.storage.compact_journal()
