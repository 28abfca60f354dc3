"""The index snapshot: a cache that lets a large store open without reading every file.

`agents/{agent}/index-snapshot.bin` holds what a full open builds — every entry (compact
JSON), its path, the skipped files, the applied-operation map, the BM25 index (slots,
token ids, postings, statistics) — and the journal offset it reflects. Opening a store
with a valid snapshot maps it, installs it, and replays only the journal after that
offset (the records since, re-reading just the files they name), like a reader that
had been open all along. Entries stay JSON until read (`stores.longterm.entry_table`).

It is only a cache; the entry files and the journal stay the truth:
- it is written only from a state with no pending record (every journaled write up to
  its offset is on disk and in the state), atomically (temp file, fsync, rename), by
  any process — two writers both write valid snapshots, the later rename wins;
- it is refused, and the store opens from the files, when it is missing, unreadable, of
  another version or agent, when its checksum (CRC-32 of everything after the header)
  fails, or when the journal no longer holds what it held at that offset (shorter, or
  other bytes just before the offset, or another first line: a replaced journal);
- a journal that moved on past it is what it is made for: the tail is replayed.
Like a long-lived reader, a store opened from a snapshot does not notice an entry file
edited by hand outside the journal since; every write re-reads its target file first
(and takes the hand edit), and `reload()` rescans everything.

The format is the backend's business only in two places: where the bytes are kept (this
file for the file backend; a row for `stores.postgres.memory_store`, through `encode` and
`decode`) and the marks that tie a snapshot to its feed.

The store hands its state over explicitly (`SnapshotState`) and gets one back: this
module knows the file format, never the store's insides.

Layout: `DKSNAP1\\n`, the header length (uint64 LE), the header (JSON: version, agent,
offset, journal hashes, CRC, counts, the category order, the index's scalars, and each
section's offset and length), then the sections, each 8-byte aligned.
"""

from __future__ import annotations

import json
import logging
import mmap
import struct
import zlib
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores.files import AgentFiles
from dreamkeeper.stores.longterm.entry_files import Parts
from dreamkeeper.stores.longterm.entry_table import EntryTable
from dreamkeeper.stores.longterm.journal import Journal
from dreamkeeper.stores.longterm.records import AppliedOp
from dreamkeeper.stores.search import packing
from dreamkeeper.stores.search.bm25 import BM25Index

log = logging.getLogger(__name__)

SNAPSHOT = ("index-snapshot.bin",)
MAGIC = b"DKSNAP1\n"
VERSION = 1
MIN_ENTRIES = 1_000  # a full open of at least this many entries writes a snapshot


@dataclass
class SnapshotState:
    """What a full open builds, as of journal byte `offset`: the entries, the file each
    came from, the skipped files, the applied-operation map (None: not built yet), the
    BM25 index and the category groups it uses."""

    entries: MutableMapping[str, MemoryEntry]
    parts: dict[str, Parts]
    problems: dict[Path, str]
    ops: dict[str, AppliedOp] | None
    index: BM25Index
    category_ids: dict[str | None, int]
    offset: int


def encode(agent_id: str, state: SnapshotState, marks: dict[str, str]) -> bytes:
    """The snapshot of `state` (which must have no pending record: every journaled write
    up to its offset on disk and in it). `marks` identify the feed it was taken from at
    its offset (checked on load). A backend with no entry paths passes empty `parts`."""
    entries = state.entries
    ids = list(entries)
    raw = [entries.raw(i) if isinstance(entries, EntryTable) else _json(entries[i]) for i in ids]
    lengths = np.fromiter((len(r) for r in raw), np.int64, len(raw))
    entry_off = np.zeros(len(raw) + 1, dtype=np.int64)
    np.cumsum(lengths, out=entry_off[1:])
    index_sections, shape = state.index.to_sections()
    ops = state.ops
    sections: dict[str, bytes] = {
        "entry_json": b"".join(raw),
        "entry_off": entry_off.tobytes(),
        "entry_ids": packing.strings(ids),
        "entry_paths": packing.strings(["/".join(state.parts.get(i, ())) for i in ids]),
        "problems": json.dumps({str(k): v for k, v in state.problems.items()}).encode(),
        "ops": json.dumps(
            None if ops is None else {k: [v.entry_id, v.action, v.detail] for k, v in ops.items()}
        ).encode(),
        **index_sections,
    }
    layout: dict[str, list[int]] = {}
    body = bytearray()
    for name, data in sections.items():
        body += b"\0" * (-len(body) % 8)
        layout[name] = [len(body), len(data)]
        body += data
    header = {
        "version": VERSION,
        "agent": agent_id,
        "offset": state.offset,
        "journal": marks,
        "paths": bool(state.parts) or not ids,
        "crc": zlib.crc32(body),
        "entries": len(ids),
        "slots": shape["slots"],
        "terms": shape["terms"],
        "categories": [[c, cid] for c, cid in state.category_ids.items()],
        "scalars": shape["scalars"],
        "sections": layout,
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    prefix = MAGIC + struct.pack("<Q", len(head)) + head
    return prefix + b"\0" * (-len(prefix) % 8) + bytes(body)


def _json(entry: Any) -> bytes:
    return entry.model_dump_json(by_alias=True).encode("utf-8")


def write(files: AgentFiles, agent_id: str, state: SnapshotState, journal: Journal) -> None:
    """Write the snapshot of `state` atomically (the caller checked nothing is pending)."""
    files.write(SNAPSHOT, encode(agent_id, state, journal.marks(state.offset)))


class Refused(ValueError):
    """The snapshot cannot be used (the reason is logged; the store opens from files)."""


def load(files: AgentFiles, agent_id: str, journal: Journal) -> SnapshotState | None:
    """The state the agent's snapshot holds, or None when there is none or it is
    refused (logged)."""
    try:
        mapped = files.map(SNAPSHOT)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("memory store %s: index snapshot unreadable (%s)", agent_id, exc)
        return None
    try:
        with mapped:
            return _read(agent_id, journal, mapped)
    except Refused as exc:
        log.warning("memory store %s: index snapshot not used (%s)", agent_id, exc)
    except Exception as exc:  # noqa: BLE001 - a cache: anything wrong with it means "rescan"
        log.warning(
            "memory store %s: index snapshot not used (%s: %s)",
            agent_id,
            type(exc).__name__,
            exc,
        )
    return None


def _header(data: mmap.mmap | bytes) -> tuple[dict[str, Any], int]:
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


def _read(agent_id: str, journal: Journal, data: mmap.mmap) -> SnapshotState:
    def accept(offset: int, marks: object) -> None:
        if journal.size() < offset:
            raise Refused("the journal is shorter than the snapshot's offset")
        if journal.marks(offset) != marks:
            raise Refused("the journal is not the one the snapshot was taken from")

    return decode(agent_id, data, accept)


def decode(
    agent_id: str, data: mmap.mmap | bytes, accept: Callable[[int, object], None]
) -> SnapshotState:
    """The state a snapshot holds; `accept(offset, marks)` raises `Refused` when the feed
    is not the one it was taken from. `Refused` for anything else wrong with it."""
    header, base = _header(data)
    if header.get("version") != VERSION or header.get("agent") != agent_id:
        raise Refused("another version or agent")
    offset = header["offset"]
    if not isinstance(offset, int) or offset < 0:
        raise Refused("its offset is not a feed offset")
    accept(offset, header["journal"])
    body = memoryview(data)[base:]
    try:
        if zlib.crc32(body) != header["crc"]:
            raise Refused("checksum mismatch (a corrupt or torn file)")
        return _restore(header, body)
    except ValueError as exc:
        raise Refused(str(exc)) from None
    finally:
        body.release()


def _section(body: memoryview, header: dict[str, Any], name: str) -> memoryview:
    start, length = header["sections"][name]
    if start < 0 or length < 0 or start + length > len(body):
        raise Refused(f"section {name} out of range")
    return body[start : start + length]


def _restore(header: dict[str, Any], body: memoryview) -> SnapshotState:
    n = header["entries"]
    ids = packing.split(_section(body, header, "entry_ids"), n)
    paths = packing.split(_section(body, header, "entry_paths"), n)
    entry_off = np.frombuffer(_section(body, header, "entry_off"), dtype=np.int64).copy()
    blob = bytes(_section(body, header, "entry_json"))
    if len(entry_off) != n + 1 or (n and entry_off[-1] != len(blob)):
        raise Refused("entry offsets do not match")
    table = EntryTable()
    bounds = entry_off.tolist()
    for i, entry_id in enumerate(ids):
        table.put_raw(entry_id, blob[bounds[i] : bounds[i + 1]])
    parts = (
        {entry_id: tuple(path.split("/")) for entry_id, path in zip(ids, paths, strict=True)}
        if header.get("paths", True)
        else {}
    )
    index = BM25Index.from_sections(
        lambda name: _section(body, header, name),
        header["slots"],
        header["terms"],
        header["scalars"],
    )
    if (
        len(table) != n
        or (header.get("paths", True) and len(parts) != n)
        or len(index) != n
        or any(index.slot(k) is None for k in ids)
    ):
        raise Refused("the index and the entries disagree")
    problems = json.loads(bytes(_section(body, header, "problems")))
    ops = json.loads(bytes(_section(body, header, "ops")))
    return SnapshotState(
        entries=table,
        parts=parts,
        problems={Path(k): v for k, v in problems.items()},
        ops=None if ops is None else {k: AppliedOp(v[0], v[1], v[2]) for k, v in ops.items()},
        index=index,
        category_ids={c: cid for c, cid in header["categories"]},
        offset=header["offset"],
    )
