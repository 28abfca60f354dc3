"""`EntryTable`: a store's entries by id, read and parsed on first access.

A store opened from an index snapshot (`stores.longterm.snapshot`) holds, per entry, only
where its compact JSON lies in the snapshot (`SnapshotRows`: offset, length, CRC-32,
category) and turns it into a `MemoryEntry` when something reads it: a search touches
the few entries it returns, not the 100,000 it indexes. The JSON stays on disk for the
file store (read with `pread` on a short-lived descriptor), in memory, compressed a
block of rows at a time, for a snapshot that came from a database row.

A snapshot is a cache and may change under a reader (rewritten by another process,
deleted by `erase`, edited by hand). So each read is checked: the file must be the one
opened (device, inode, size, mtime) and the bytes must match their CRC-32 and parse as
the entry asked for. Anything else falls back to the entry's own file, which is the
truth (`fallback`). An entry whose file is gone too has vanished: it leaves the table
(a `KeyError`, a `get` of None), never comes back as another entry, never crashes.

It behaves as the dict it replaces (insertion order kept; a parsed entry replaces its
row in place). The file store's paths derive from the entries' ids and categories
(`category`), so a lazy entry's file is known without reading it.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Callable, ItemsView, Iterator, MutableMapping, ValuesView
from dataclasses import dataclass

import numpy as np
from pydantic import ValidationError

from dreamkeeper.core.models import MemoryEntry

log = logging.getLogger(__name__)

# Rows held in memory are kept compressed, this many consecutive rows to a zlib block: an
# entry's JSON alone compresses poorly (its field names are the repetition), eight
# together about 4x at the fastest level, and reading one costs a block's decompression
# (tens of microseconds, once: the parsed entry is kept).
PACK_ROWS = 8
PACK_LEVEL = 1


@dataclass
class SnapshotRows:
    """Where each entry's JSON lies in a snapshot: rows `offsets[i]` to `offsets[i+1]`
    (relative to `start`), each with its CRC-32 and category (`categories[codes[i]]`).
    The bytes are held in memory compressed (`packed`: blocks of PACK_ROWS rows, block
    `b` at `packed_off[b]` to `packed_off[b+1]`; `pack`) or whole (`blob`), else read from
    the file at `path`, which must still be `identity`."""

    offsets: np.ndarray
    crcs: np.ndarray
    codes: np.ndarray
    categories: list[str | None]
    start: int = 0
    blob: bytes | None = None
    packed: bytes | None = None
    packed_off: np.ndarray | None = None
    path: str | None = None
    identity: tuple[int, ...] | None = None
    # The entry's own file (id, category) → the entry, or None when it has none.
    fallback: Callable[[str, str | None], MemoryEntry | None] | None = None

    def category(self, row: int) -> str | None:
        return self.categories[int(self.codes[row])]

    def _bytes(self, row: int) -> bytes | None:
        start, end = int(self.offsets[row]), int(self.offsets[row + 1])
        data: bytes | None
        if self.packed is not None:
            data = self._unpacked(row, start, end)
        elif self.blob is not None:
            data = self.blob[start:end]
        else:
            data = self._pread(self.start + start, end - start)
        if data is None or zlib.crc32(data) != int(self.crcs[row]):
            return None
        return data

    def pack(self, data: bytes | memoryview) -> None:
        """Hold the rows' bytes (`data`, the snapshot's entries' JSON) in memory,
        compressed a block of PACK_ROWS rows at a time."""
        rows = len(self.offsets) - 1
        view = memoryview(data)
        count = -(-rows // PACK_ROWS)
        packed_off = np.zeros(count + 1, dtype=np.int64)
        # One growing buffer, each block appended as made: no block outlives its append,
        # so the heap is not left fragmented by thousands of them.
        out = bytearray()
        for block in range(count):
            first = block * PACK_ROWS
            start = int(self.offsets[first])
            end = int(self.offsets[min(first + PACK_ROWS, rows)])
            out += zlib.compress(view[start:end], PACK_LEVEL)
            packed_off[block + 1] = len(out)
        self.packed, self.packed_off, self.blob = bytes(out), packed_off, None

    def _unpacked(self, row: int, start: int, end: int) -> bytes | None:
        assert self.packed is not None and self.packed_off is not None
        block = row // PACK_ROWS
        base = int(self.offsets[block * PACK_ROWS])
        first, last = int(self.packed_off[block]), int(self.packed_off[block + 1])
        try:
            chunk = zlib.decompress(memoryview(self.packed)[first:last])
        except zlib.error:
            return None
        return chunk[start - base : end - base]

    def _pread(self, offset: int, length: int) -> bytes | None:
        if self.path is None:
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            self.path = None  # gone (erased, or never to come back as this file)
            return None
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) != self.identity:
                self.path = None  # replaced: another snapshot, our offsets mean nothing
                return None
            return os.pread(fd, length, offset)
        except OSError:
            return None
        finally:
            os.close(fd)

    def hold_in_memory(self) -> None:
        """Read every row's bytes now, in one read (each is still checked when used)."""
        if self.blob is not None or self.packed is not None or self.path is None:
            return
        data = self._pread(self.start, int(self.offsets[-1]))
        if data is not None and len(data) == int(self.offsets[-1]):
            self.blob = data

    def raw(self, row: int) -> bytes | None:
        """The row's JSON when it checks out."""
        return self._bytes(row)

    def entry(self, row: int, entry_id: str) -> MemoryEntry | None:
        """The entry of this row: from the snapshot when it checks out, else its file."""
        data = self._bytes(row)
        if data is not None:
            try:
                entry = MemoryEntry.model_validate_json(data)
            except (ValidationError, ValueError):
                entry = None
            if entry is not None and entry.id == entry_id:
                return entry
        log.info("entry %s: not as the index snapshot held it; reading its file", entry_id)
        if self.fallback is None:
            return None
        return self.fallback(entry_id, self.category(row))


class EntryTable(MutableMapping[str, MemoryEntry]):
    def __init__(self, rows: SnapshotRows | None = None) -> None:
        self._items: dict[str, MemoryEntry | int] = {}
        self._rows = rows
        self._lazy = 0  # entries still rows

    def put_row(self, entry_id: str, row: int) -> None:
        """Add an entry as a row of the snapshot (read when first accessed)."""
        self._drop(entry_id)
        self._items[entry_id] = row
        self._lazy += 1

    def hold_in_memory(self) -> None:
        """Read the entries still rows into memory now (before their snapshot goes)."""
        if self._rows is not None and self._lazy:
            self._rows.hold_in_memory()

    def repoint(self, rows: SnapshotRows, row_of: Callable[[str], int | None]) -> None:
        """Every entry becomes a row of `rows` (a snapshot just written of exactly these
        entries; `row_of` gives each one's row)."""
        items = self._items
        for key in items:
            row = row_of(key)
            assert row is not None
            items[key] = row
        self._rows = rows
        self._lazy = len(items)

    def _drop(self, entry_id: str) -> None:
        if isinstance(self._items.pop(entry_id, None), int):
            self._lazy -= 1

    def _vanished(self, entry_id: str) -> KeyError:
        log.warning("entry %s: neither the index snapshot nor its file holds it", entry_id)
        self._drop(entry_id)
        return KeyError(entry_id)

    def raw(self, entry_id: str) -> bytes:
        """The entry as compact JSON, without parsing it when its row checks out."""
        value = self._items[entry_id]
        if isinstance(value, int):
            assert self._rows is not None
            data = self._rows.raw(value)
            if data is not None:
                return data
            value = self[entry_id]
        return value.model_dump_json(by_alias=True).encode("utf-8")

    def category(self, entry_id: str) -> str | None:
        """The entry's category, without reading it (KeyError when absent)."""
        value = self._items[entry_id]
        if isinstance(value, int):
            assert self._rows is not None
            return self._rows.category(value)
        return value.category

    def __getitem__(self, entry_id: str) -> MemoryEntry:
        value = self._items[entry_id]
        if isinstance(value, int):
            assert self._rows is not None
            entry = self._rows.entry(value, entry_id)
            if entry is None:
                raise self._vanished(entry_id)
            self._items[entry_id] = value = entry
            self._lazy -= 1
        return value

    def get(self, entry_id: str, default: MemoryEntry | None = None) -> MemoryEntry | None:  # type: ignore[override]
        try:
            return self[entry_id]
        except KeyError:
            return default

    def __setitem__(self, entry_id: str, entry: MemoryEntry) -> None:
        if isinstance(self._items.get(entry_id), int):
            self._lazy -= 1
        self._items[entry_id] = entry

    def __delitem__(self, entry_id: str) -> None:
        if entry_id not in self._items:
            raise KeyError(entry_id)
        self._drop(entry_id)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._items

    def __iter__(self) -> Iterator[str]:
        # Over a copy: reading an entry that vanished removes it.
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        self._items.clear()
        self._lazy = 0

    def values(self) -> ValuesView[MemoryEntry]:
        return _Values(self)

    def items(self) -> ItemsView[str, MemoryEntry]:
        return _Items(self)

    @property
    def parsed(self) -> int:
        """How many entries have been parsed (the rest are still rows)."""
        return len(self._items) - self._lazy

    @property
    def held_bytes(self) -> int:
        """The snapshot's entries held in memory (a snapshot from a database row),
        compressed or whole."""
        rows = self._rows
        if rows is None:
            return 0
        held = rows.packed if rows.packed is not None else rows.blob
        return 0 if held is None else len(held)


class _Values(ValuesView[MemoryEntry]):
    """The entries, skipping any that vanished while being read."""

    _mapping: EntryTable

    def __iter__(self) -> Iterator[MemoryEntry]:
        for key in self._mapping:
            entry = self._mapping.get(key)
            if entry is not None:
                yield entry


class _Items(ItemsView[str, MemoryEntry]):
    _mapping: EntryTable

    def __iter__(self) -> Iterator[tuple[str, MemoryEntry]]:
        for key in self._mapping:
            entry = self._mapping.get(key)
            if entry is not None:
                yield key, entry
