"""The append-only journal of every change to an agent's long-term memory on files.

One JSON object per line (a `stores.contract.feed.JournalRecord`): time, action, entry
id, category, content fingerprint, the entry's revision after the change, the operation
id that caused it and a reason — never the content. It is the file store's write-ahead
log and its change feed:

- A writer appends the record *before* it replaces the entry file (write-ahead), so no
  file version ever exists without a record naming it; a crash in between leaves a
  record whose file has an older revision, which the next writer repairs (`REPAIRED`)
  and every reader converges to (see `stores.files.memory_store`).
- A reader notices other processes' writes by reading the journal's new lines and
  re-reading just the files they name.
- The first record a writer appends in one hold of the writer lock carries `first`, so a
  reader opening the store can find where the write in flight at that moment began.
- The journal's first line is the store's epoch (`EPOCH`, a random id in `id`), written
  when a writer starts an empty journal: a store erased and written again under the same
  agent id has another one (docs/storage.md, store epochs). A journal from before epochs
  has none: its epoch is the empty string.

The journal is compacted by the writer (`FileMemoryStore.compact_journal`, docs/storage.md
"Compacting the file journal"): under the writer lock, with no write pending, it is
replaced by a new generation — the epoch line, then one `COMPACTED` record carrying the
generation number — written beside it, fsynced and renamed into place. Every record
before that point is dropped: the entry files are the state, and readers holding the old
generation (an inode they keep open) see the journal at the path is another file and
load again, as after an erasure, keeping the epoch. Readers read through the descriptor
they hold, so a byte offset of one generation is never read in another.

Lines are read defensively: a torn line (a crash mid-append), garbage, NULs, an oversized
or deeply nested line is skipped with a warning; writers terminate a torn last line
before appending, so a record never glues onto it.
"""

from __future__ import annotations

import hashlib
import logging
import os

from dreamkeeper.stores.contract.feed import MAX_LINE_BYTES, JournalAction, JournalRecord
from dreamkeeper.stores.files.agent_files import AgentFiles

log = logging.getLogger(__name__)

JOURNAL = ("journal.jsonl",)
# Where the next generation is written before it is renamed over the journal (a dot file:
# ignored by every reader; a crash leaves it, and the next compaction writes over it).
NEXT_GENERATION = (".journal.jsonl.next",)
_BACKWARD_CHUNK = 65_536
HASHED_BYTES = 4_096  # hashed at the journal's start and just before a cache's offset


class Journal:
    def __init__(self, files: AgentFiles) -> None:
        self._files = files
        self.path = files.path(*JOURNAL)

    def append(self, records: list[JournalRecord]) -> int:
        """Append records with one write and fsync (caller holds the writer lock);
        returns the journal's size afterwards. An empty journal gets the store's epoch
        first."""
        if records and self.size() == 0:
            epoch = JournalRecord(
                at=records[0].at,
                action=JournalAction.EPOCH,
                id=os.urandom(8).hex(),
                category=None,
                fingerprint=None,
            )
            records = [epoch, *records]
        data = "".join(r.to_line() + "\n" for r in records).encode("ascii")
        return self._files.append(JOURNAL, data, ensure_newline_before=True)

    def size(self) -> int:
        return self._files.size(JOURNAL)

    def epoch(self) -> str:
        """The store's epoch: the id of the journal's first record when that is an
        `EPOCH` record; the empty string for a journal from before epochs or none."""
        return epoch_of(self._files.read_from(JOURNAL, 0, MAX_LINE_BYTES))

    def marks(self, offset: int) -> dict[str, str]:
        """Hashes of the journal's first bytes and of the bytes just before `offset`: a
        journal that still has them is the one a cache written at `offset` was taken from
        (`stores.files.snapshot_file`, `stores.files.vector_pack`)."""
        head = self._bytes(0, min(offset, HASHED_BYTES))
        start = max(0, offset - HASHED_BYTES)
        tail = self._bytes(start, offset - start)
        return {
            "head": hashlib.sha256(head).hexdigest(),
            "tail": hashlib.sha256(tail).hexdigest(),
            "lengths": f"{len(head)},{len(tail)}",
        }

    def _bytes(self, start: int, length: int) -> bytes:
        return self._files.read_from(JOURNAL, start, length) if length > 0 else b""

    def read_from(self, offset: int, fd: int | None = None) -> tuple[list[JournalRecord], int]:
        """Complete records from byte `offset` on, and the offset after the last one;
        with `fd`, of the journal open at that descriptor (the generation the caller's
        offset belongs to), else of the one at the path.

        A trailing line without its newline is a write in progress: left for next time
        (once a writer terminates it, it is read as the garbage it is and skipped).
        """
        data = self._files.read_from(JOURNAL, offset) if fd is None else _read_fd(fd, offset)
        end = data.rfind(b"\n") + 1
        records: list[JournalRecord] = []
        for raw in data[:end].split(b"\n"):
            if not raw.strip():
                continue
            try:
                record = JournalRecord.from_line(raw)
            except ValueError as exc:
                log.warning("journal %s: skipped a malformed line (%s)", self.path, exc)
                continue
            if record.action not in _NO_CHANGE:
                records.append(record)
        return records, offset + end

    def read_all(self) -> list[JournalRecord]:
        return self.read_from(0)[0]

    def generation(self) -> int:
        """How many times the journal was compacted (the `COMPACTED` record's `rev`,
        right after the epoch line; 0 when there is none)."""
        for line in self._files.read_from(JOURNAL, 0, 2 * MAX_LINE_BYTES).split(b"\n")[:2]:
            try:
                record = JournalRecord.from_line(line)
            except ValueError:
                continue
            if record.action is JournalAction.COMPACTED:
                return record.rev or 0
        return 0

    def next_generation(self, marker: JournalRecord) -> bytes:
        """The bytes of the journal's next generation: its epoch line as it is (none for a
        journal from before epochs, which keeps the empty epoch), then `marker`."""
        head = self._files.read_from(JOURNAL, 0, MAX_LINE_BYTES + 1).split(b"\n", 1)[0]
        epoch = head + b"\n" if epoch_of(head) else b""
        return epoch + (marker.to_line() + "\n").encode("ascii")

    def last_hold_start(self, end: int) -> int:
        """The offset of the last record marked `first` before `end` (0 if none): where
        the writer-lock hold that may be in flight at `end` began."""
        position = end
        while position > 0:
            start = max(0, position - _BACKWARD_CHUNK)
            # Overlap by a line's length so a marker split across chunks is still seen.
            chunk = self._files.read_from(JOURNAL, start, min(end, position + 64) - start)
            at = chunk.rfind(b'"first":true')
            if at != -1:
                marker = start + at
                head = self._files.read_from(
                    JOURNAL, max(0, marker - MAX_LINE_BYTES), min(marker, MAX_LINE_BYTES)
                )
                newline = head.rfind(b"\n")
                return (
                    0
                    if newline == -1 and marker <= MAX_LINE_BYTES
                    else (marker - len(head) + newline + 1)
                )
            position = start
        return 0


_NO_CHANGE = frozenset({JournalAction.EPOCH, JournalAction.COMPACTED})  # no entry named


def _read_fd(fd: int, offset: int) -> bytes:
    chunks = []
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def epoch_of(head: bytes) -> str:
    """The epoch a journal starting with `head` names ("" when its first line is not an
    epoch record)."""
    line = head.split(b"\n", 1)[0]
    try:
        record = JournalRecord.from_line(line)
    except ValueError:
        return ""
    return record.id if record.action is JournalAction.EPOCH else ""
