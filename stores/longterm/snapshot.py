"""The index snapshot: a cache that lets a large store open without reading every file.

`agents/{agent}/index-snapshot.bin` holds what a full open builds — every entry (compact
JSON, with its CRC-32 and category, which gives its path), the skipped files, the
applied-operation map, the BM25 index (slots, token ids, postings, statistics) — and the
journal offset it reflects. Opening a store with a valid snapshot maps it, installs it,
and replays only the journal after that offset (the records since, re-reading just the
files they name), like a reader that had been open all along. The entries' JSON is not
even read at open: each entry is read from the file, and checked, when first needed
(`stores.longterm.entry_table`); a snapshot changed since falls back to the entry's file.

It is only a cache; the entry files and the journal stay the truth:
- it is written only from a state with no pending record (every journaled write up to
  its offset is on disk and in the state), atomically (temp file, fsync, rename), by
  any process — two writers both write valid snapshots, the later rename wins;
- it is refused, and the store opens from the files, when it is missing, unreadable, of
  another version or agent, when its checksum (CRC-32 of everything after the header but
  the entries' JSON, which is checked entry by entry when read) fails, or when the
  journal no longer holds what it held at that offset (shorter, or other bytes just
  before the offset, or another first line: a replaced journal);
- it carries the store epoch of the state it was taken from (the writer's, never read
  from the journal at write time), and is refused by a store of another epoch: a
  process that had not seen a whole-agent forget cannot hand the erased entries to the
  store made again under the same agent id (docs/storage.md, store epochs);
- a journal that moved on past it is what it is made for: the tail is replayed.
Like a long-lived reader, a store opened from a snapshot does not notice an entry file
edited by hand outside the journal since; every write re-reads its target file first
(and takes the hand edit), and `reload()` rescans everything.

This module is the format, the same on every backend. The backend's business is where
the bytes are kept and the marks that tie a snapshot to its feed: a file, mapped, whose
entries stay in it until read (`stores.files.snapshot_file`), or a row
(`stores.postgres.memory_store`), whose entries' JSON is then held in memory, compressed
in blocks (`SnapshotRows.pack`).

The store hands its state over explicitly (`stores.longterm.entry_state.EntryState`, the
one object a store keeps current from its feed) and gets one back: this module knows the
format, never the store's insides.

Layout: `DKSNAP1\\n`, the header length (uint64 LE), the header (JSON: version, agent,
offset, journal hashes, counts, the category order, the index's shape and scalars, each
section's offset and length, and a CRC-32 of all those values and of every section but
the entries' JSON), then the sections, each 8-byte aligned, the entries' JSON last (each
entry with its own CRC-32, checked when it is read).
"""

from __future__ import annotations

import json
import mmap
import struct
import zlib
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores.contract.records import AppliedOp
from dreamkeeper.stores.longterm.entry_state import EntryState
from dreamkeeper.stores.longterm.entry_table import EntryTable, SnapshotRows
from dreamkeeper.stores.search import packing
from dreamkeeper.stores.search.bm25 import BM25Index

SNAPSHOT = ("index-snapshot.bin",)  # where a file store keeps it, in the agent's directory
MAGIC = b"DKSNAP1\n"
# 2: entries read from the file when first needed, each with its CRC-32; 3: the header's
# values are under the checksum too (a version 2 snapshot is refused and written again).
VERSION = 3
# A full open of at least this many entries writes a snapshot. Small stores too: a store
# of 200 entries opened on PostgreSQL in 26.5 ms rebuilding its index (tokenizing every
# entry) and in 4.9 ms from its snapshot row (sealed, same run), and a fleet's serve opens
# its cold agents on every request outside its cache.
MIN_ENTRIES = 100


class Unwritable(OSError):
    """The state cannot be written as a snapshot now (an entry it holds cannot be read)."""


def encode(agent_id: str, state: EntryState, marks: dict[str, str]) -> bytes:
    """The snapshot of `state` (which must have no pending record: every journaled write
    up to its offset on disk and in it). `marks` identify the feed it was taken from at
    its offset (checked on load)."""
    return encode_rows(agent_id, state, marks)[0]


def encode_rows(
    agent_id: str, state: EntryState, marks: dict[str, str]
) -> tuple[bytes, SnapshotRows]:
    """The snapshot, and where its entries lie in it."""
    entries, index = state.entries, state.index
    # Entry rows go by index slot (a removed document's row is empty): a reader keeps
    # one row number per entry, the slot number the index already holds.
    order = [index.slot(i) for i in entries]
    if None in order:
        raise Unwritable("the index and the entries disagree")
    slots = index.slot_count
    raw, codes, categories = _entry_rows(entries, order, slots)
    lengths = np.fromiter((len(r) for r in raw), np.int64, slots)
    entry_off = np.zeros(slots + 1, dtype=np.int64)
    np.cumsum(lengths, out=entry_off[1:])
    crcs = np.fromiter((zlib.crc32(r) for r in raw), np.uint32, slots)
    index_sections, shape = index.to_sections()
    ops = state.ops
    sections: dict[str, bytes] = {
        "entry_order": np.asarray(order, dtype=np.uint32).tobytes(),
        "entry_off": entry_off.tobytes(),
        "entry_crc": crcs.tobytes(),
        "entry_cat": codes.tobytes(),
        "entry_categories": json.dumps(list(categories)).encode(),
        "problems": json.dumps({str(k): v for k, v in state.problems.items()}).encode(),
        "ops": json.dumps(
            None if ops is None else {k: [v.entry_id, v.action, v.detail] for k, v in ops.items()}
        ).encode(),
        **index_sections,
        # Last, and outside the body's CRC: each entry has its own, checked when read.
        "entry_json": b"".join(raw),
    }
    layout, body = _laid_out(sections)
    header: dict[str, Any] = {
        "version": VERSION,
        "agent": agent_id,
        "offset": state.offset,
        "journal": marks,
        "entries": len(order),
        "index": shape,
        "categories": [[c, cid] for c, cid in state.category_ids.items()],
        "sections": layout,
    }
    header["crc"] = _checksum(header, memoryview(body)[: layout["entry_json"][0]])
    head = json.dumps(header, separators=(",", ":")).encode()
    prefix = MAGIC + struct.pack("<Q", len(head)) + head
    prefix += b"\0" * (-len(prefix) % 8)
    rows = SnapshotRows(
        offsets=entry_off,
        crcs=crcs,
        codes=codes.astype(np.min_scalar_type(max(len(categories) - 1, 0))),
        categories=list(categories),
        start=len(prefix) + layout["entry_json"][0],
    )
    return prefix + bytes(body), rows


def _entry_rows(
    entries: MutableMapping[str, MemoryEntry], order: list[int | None], slots: int
) -> tuple[list[bytes], np.ndarray, dict[str | None, int]]:
    """Each entry's JSON at its index slot, and its category's code (in first-seen
    order); an entry that vanished meanwhile makes the snapshot unwritable."""
    table = entries if isinstance(entries, EntryTable) else None
    raw = [b""] * slots
    categories: dict[str | None, int] = {}
    codes = np.zeros(slots, dtype=np.uint32)
    try:
        for entry_id, slot in zip(entries, order, strict=True):
            assert slot is not None
            raw[slot] = table.raw(entry_id) if table is not None else _json(entries[entry_id])
            category = table.category(entry_id) if table is not None else entries[entry_id].category
            codes[slot] = categories.setdefault(category, len(categories))
    except KeyError as exc:
        raise Unwritable(f"entry {exc} vanished") from None
    return raw, codes, categories


def _laid_out(sections: dict[str, bytes]) -> tuple[dict[str, list[int]], bytearray]:
    """The sections one after another, each at an 8-byte boundary, and where each lies."""
    layout: dict[str, list[int]] = {}
    body = bytearray()
    for name, data in sections.items():
        body += b"\0" * (-len(body) % 8)
        layout[name] = [len(body), len(data)]
        body += data
    return layout, body


def _checksum(header: dict[str, Any], covered: memoryview) -> int:
    """The CRC-32 of the header's values (all but this checksum) and of the body before
    the entries' JSON. The header is covered too: a changed digit in a section's offset, a
    count or a category id would read other, intact bytes as a valid-looking index."""
    values = json.dumps({k: v for k, v in header.items() if k != "crc"}, separators=(",", ":"))
    return zlib.crc32(covered, zlib.crc32(values.encode()))


def _json(entry: Any) -> bytes:
    return entry.model_dump_json(by_alias=True).encode("utf-8")


class Refused(ValueError):
    """The snapshot cannot be used (the reason is logged; the store opens from files)."""


@dataclass(frozen=True)
class RowSource:
    """Where a snapshot's entries stay when it is not copied into memory: the file it was
    read from (`path`, as it was when opened: `identity`); `fallback` reads an entry from
    the store itself when the file changed since."""

    path: str
    identity: tuple[int, ...]
    fallback: Callable[[str, str | None], MemoryEntry | None]


def _header(data: mmap.mmap | bytes | bytearray) -> tuple[dict[str, Any], int]:
    if data[: len(MAGIC)] != MAGIC:
        raise Refused("not a snapshot")
    (length,) = struct.unpack_from("<Q", data, len(MAGIC))
    start = len(MAGIC) + 8
    if length > 1 << 26 or start + length > len(data):
        raise Refused("torn header")
    header = json.loads(bytes(data[start : start + length]))
    if not isinstance(header, dict):
        raise Refused("torn header")
    body = start + length
    return header, body + (-body % 8)


def decode(
    agent_id: str,
    data: mmap.mmap | bytes | bytearray,
    accept: Callable[[int, object], None],
    source: RowSource | None = None,
) -> EntryState:
    """The state a snapshot holds; `accept(offset, marks)` raises `Refused` when the feed
    is not the one it was taken from. `Refused` for anything else wrong with it. The
    entries' JSON is held in memory compressed, unless `source` names the file it came from
    (then it is read from there when first needed)."""
    header, base = _header(data)
    if header.get("version") != VERSION or header.get("agent") != agent_id:
        raise Refused("another version or agent")
    body = memoryview(data)[base:]
    try:
        json_start, json_length = header["sections"]["entry_json"]
        if json_start < 0 or json_start + json_length != len(body):
            raise Refused("torn file")
        # Before anything of the header is used: its values are under the checksum.
        if _checksum(header, body[:json_start]) != header.get("crc"):
            raise Refused("checksum mismatch (a corrupt or torn file)")
        offset = header["offset"]
        if not isinstance(offset, int) or offset < 0:
            raise Refused("its offset is not a feed offset")
        accept(offset, header["journal"])
        return _restore(header, body, base, source)
    except ValueError as exc:
        raise Refused(str(exc)) from None
    finally:
        body.release()


def _section(body: memoryview, header: dict[str, Any], name: str) -> memoryview:
    start, length = header["sections"][name]
    if start < 0 or length < 0 or start + length > len(body):
        raise Refused(f"section {name} out of range")
    return body[start : start + length]


def _restore(
    header: dict[str, Any], body: memoryview, base: int, source: RowSource | None
) -> EntryState:
    n = header["entries"]
    index = BM25Index.from_sections(lambda name: _section(body, header, name), header["index"])
    slots = header["index"]["slots"]

    def column(name: str, dtype: Any, count: int) -> np.ndarray:
        values = np.frombuffer(_section(body, header, name), dtype=dtype).copy()
        if len(values) != count:
            raise Refused(f"{name} has the wrong length")
        return values

    order = column("entry_order", np.uint32, n)
    entry_off = column("entry_off", np.int64, slots + 1)
    json_start, json_length = header["sections"]["entry_json"]
    packing.check_offsets(entry_off, slots, json_length)
    categories = json.loads(bytes(_section(body, header, "entry_categories")))
    if not isinstance(categories, list) or not all(
        c is None or isinstance(c, str) for c in categories
    ):
        raise Refused("entry categories are not a list of categories")
    codes = column("entry_cat", np.uint32, slots)
    if slots and int(codes.max()) >= max(len(categories), 1):
        raise Refused("an entry category out of range")
    rows = SnapshotRows(
        offsets=entry_off,
        crcs=column("entry_crc", np.uint32, slots),
        codes=codes.astype(np.min_scalar_type(max(len(categories) - 1, 0))),
        categories=categories,
    )
    if source is None:
        rows.pack(_section(body, header, "entry_json"))
    else:
        rows.start, rows.path = base + json_start, source.path
        rows.identity, rows.fallback = source.identity, source.fallback
    table = EntryTable(rows)
    if n and int(order.max()) >= slots:
        raise Refused("an entry's slot is out of range")
    for slot in order.tolist():
        key = index.key_at(slot)
        if key is None:
            raise Refused("an entry's slot holds no document")
        # The index's own key and slot objects: one string and one int per entry.
        table.put_row(key, index.slot(key))  # type: ignore[arg-type]
    if len(table) != n or len(index) != n:
        raise Refused("the index and the entries disagree")
    problems = json.loads(bytes(_section(body, header, "problems")))
    ops = json.loads(bytes(_section(body, header, "ops")))
    return EntryState(
        entries=table,
        problems={Path(k): v for k, v in problems.items()},
        ops=None if ops is None else {k: AppliedOp(v[0], v[1], v[2]) for k, v in ops.items()},
        index=index,
        category_ids={c: cid for c, cid in header["categories"]},
        offset=header["offset"],
    )
