"""The index snapshot: a cache that lets a large store open without reading every file.

`agents/{agent}/index-snapshot.bin` holds what a full open builds — every entry (compact
JSON), its path, the skipped files, the applied-operation map, the BM25 index (slots,
token ids, postings, statistics) — and the journal offset it reflects. Opening a store
with a valid snapshot maps it, installs it, and replays only the journal after that
offset (the records since, re-reading just the files they name), like a reader that
had been open all along. Entries stay JSON until read (`stores.entry_table`).

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

Layout: `DKSNAP1\\n`, the header length (uint64 LE), the header (JSON: version, agent,
offset, journal hashes, CRC, counts, the category order, the index's scalars, and each
section's offset and length), then the sections, each 8-byte aligned.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import struct
import zlib
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dreamkeeper.stores.bm25 import BM25Index
from dreamkeeper.stores.entry_table import EntryTable

if TYPE_CHECKING:
    from dreamkeeper.stores.memory_store import FileMemoryStore

log = logging.getLogger(__name__)

SNAPSHOT = ("index-snapshot.bin",)
MAGIC = b"DKSNAP1\n"
VERSION = 1
HASHED_BYTES = 4_096  # journal bytes hashed at its start and just before the offset
MIN_ENTRIES = 1_000  # a full open of at least this many entries writes a snapshot


def journal_marks(read: Callable[[int, int], bytes], offset: int) -> dict[str, str]:
    """Hashes of the journal's first bytes and of the bytes just before `offset`: a
    journal that still has them is the one the snapshot was taken from."""
    head = read(0, min(offset, HASHED_BYTES))
    start = max(0, offset - HASHED_BYTES)
    tail = read(start, offset - start)
    return {
        "head": hashlib.sha256(head).hexdigest(),
        "tail": hashlib.sha256(tail).hexdigest(),
        "lengths": f"{len(head)},{len(tail)}",
    }


def _strings(values: list[str]) -> bytes:
    return "\n".join(values).encode("utf-8")


def _flat(arrays: Sequence[array | None], typecode: str) -> tuple[bytes, np.ndarray]:
    lengths = np.fromiter((len(a) if a is not None else 0 for a in arrays), np.int64, len(arrays))
    offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    empty = array(typecode).tobytes()
    return b"".join(a.tobytes() if a is not None else empty for a in arrays), offsets


def encode(store: FileMemoryStore) -> bytes | None:
    """The snapshot of the store's current state, or None when a write is pending (the
    state is then not exactly what the journal says up to the offset)."""
    if store._pending or not store._loaded:
        return None
    entries = store._entries
    ids = list(entries)
    raw = [entries.raw(i) if isinstance(entries, EntryTable) else _json(entries[i]) for i in ids]
    lengths = np.fromiter((len(r) for r in raw), np.int64, len(raw))
    entry_off = np.zeros(len(raw) + 1, dtype=np.int64)
    np.cumsum(lengths, out=entry_off[1:])
    index = store._index
    tokens, token_off = _flat(index._tokens_of, "I")
    post_slots, post_off = _flat(index._post_slots, "I")
    post_tf, _ = _flat(index._post_tf, "f")
    ops = store._ops if store._ops is not None else None
    sections: dict[str, bytes] = {
        "entry_json": b"".join(raw),
        "entry_off": entry_off.tobytes(),
        "entry_ids": _strings(ids),
        "entry_paths": _strings(["/".join(store._parts[i]) for i in ids]),
        "problems": json.dumps({str(k): v for k, v in store._problems.items()}).encode(),
        "ops": json.dumps(
            None if ops is None else {k: [v.entry_id, v.action, v.detail] for k, v in ops.items()}
        ).encode(),
        "slot_keys": _strings([k or "" for k in index._key_of]),
        "tokens": tokens,
        "token_off": token_off.tobytes(),
        "doc_len": index._doc_len.view.tobytes(),
        "alive": index._alive.view.tobytes(),
        "live": index._live.view.tobytes(),
        "weight": index._weight.view.tobytes(),
        "group": index._group.view.tobytes(),
        "importance": index._importance.view.tobytes(),
        "stamp": index._stamp.view.tobytes(),
        "token_str": _strings(index._token_str),
        "post_slots": post_slots,
        "post_tf": post_tf,
        "post_off": post_off.tobytes(),
        "df_all": np.asarray(index._df_all, dtype=np.int64).tobytes(),
        "df_live": np.asarray(index._df_live, dtype=np.int64).tobytes(),
    }
    layout: dict[str, list[int]] = {}
    body = bytearray()
    for name, data in sections.items():
        body += b"\0" * (-len(body) % 8)
        layout[name] = [len(body), len(data)]
        body += data
    offset = store._offset
    header = {
        "version": VERSION,
        "agent": store.agent_id,
        "offset": offset,
        "journal": journal_marks(store._journal_bytes, offset),
        "crc": zlib.crc32(body),
        "entries": len(ids),
        "slots": len(index._key_of),
        "terms": len(index._token_str),
        "categories": [[c, cid] for c, cid in store._category_ids.items()],
        "scalars": [
            index._n_all,
            index._n_live,
            index._len_all,
            index._len_live,
            index._dead,
        ],
        "sections": layout,
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    prefix = MAGIC + struct.pack("<Q", len(head)) + head
    return prefix + b"\0" * (-len(prefix) % 8) + bytes(body)


def _json(entry: Any) -> bytes:
    return entry.model_dump_json(by_alias=True).encode("utf-8")


def write(store: FileMemoryStore) -> bool:
    """Write the snapshot atomically; False (nothing written) while a write is pending."""
    data = encode(store)
    if data is None:
        return False
    store.files.write(SNAPSHOT, data)
    return True


class Refused(ValueError):
    """The snapshot cannot be used (the reason is logged; the store opens from files)."""


def load(store: FileMemoryStore) -> bool:
    """Install the snapshot into a store about to open; False (store untouched) when
    there is none or it is refused."""
    try:
        mapped = store.files.map(SNAPSHOT)
    except FileNotFoundError:
        return False
    except OSError as exc:
        log.warning("memory store %s: index snapshot unreadable (%s)", store.agent_id, exc)
        return False
    try:
        with mapped:
            _install(store, mapped)
        return True
    except Refused as exc:
        log.warning("memory store %s: index snapshot not used (%s)", store.agent_id, exc)
    except Exception as exc:  # noqa: BLE001 - a cache: anything wrong with it means "rescan"
        log.warning(
            "memory store %s: index snapshot not used (%s: %s)",
            store.agent_id,
            type(exc).__name__,
            exc,
        )
    return False


def _header(data: mmap.mmap) -> tuple[dict[str, Any], int]:
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


def _install(store: FileMemoryStore, data: mmap.mmap) -> None:
    header, base = _header(data)
    if header.get("version") != VERSION or header.get("agent") != store.agent_id:
        raise Refused("another version or agent")
    offset = header["offset"]
    if not isinstance(offset, int) or offset < 0 or store.journal.size() < offset:
        raise Refused("the journal is shorter than the snapshot's offset")
    if journal_marks(store._journal_bytes, offset) != header["journal"]:
        raise Refused("the journal is not the one the snapshot was taken from")
    body = memoryview(data)[base:]
    try:
        if zlib.crc32(body) != header["crc"]:
            raise Refused("checksum mismatch (a corrupt or torn file)")
        _restore(store, header, body)
    finally:
        body.release()


def _section(body: memoryview, header: dict[str, Any], name: str) -> memoryview:
    start, length = header["sections"][name]
    if start < 0 or length < 0 or start + length > len(body):
        raise Refused(f"section {name} out of range")
    return body[start : start + length]


def _array(body: memoryview, header: dict[str, Any], name: str, dtype: Any) -> np.ndarray:
    return np.frombuffer(_section(body, header, name), dtype=dtype).copy()


def _split(view: memoryview, count: int) -> list[str]:
    if count == 0:
        return []
    values = bytes(view).decode("utf-8").split("\n")
    if len(values) != count:
        raise Refused("a string table has the wrong length")
    return values


def _restore(store: FileMemoryStore, header: dict[str, Any], body: memoryview) -> None:
    n, slots, terms = header["entries"], header["slots"], header["terms"]
    ids = _split(_section(body, header, "entry_ids"), n)
    paths = _split(_section(body, header, "entry_paths"), n)
    entry_off = _array(body, header, "entry_off", np.int64)
    blob = bytes(_section(body, header, "entry_json"))
    if len(entry_off) != n + 1 or (n and entry_off[-1] != len(blob)):
        raise Refused("entry offsets do not match")
    table = EntryTable()
    bounds = entry_off.tolist()
    for i, entry_id in enumerate(ids):
        table.put_raw(entry_id, blob[bounds[i] : bounds[i + 1]])
    parts = {entry_id: tuple(path.split("/")) for entry_id, path in zip(ids, paths, strict=True)}
    index = _index(body, header, slots, terms)
    missing = [k for k in index._slot_of if k not in parts]
    if missing or len(index._slot_of) != n:
        raise Refused("the index and the entries disagree")
    problems = json.loads(bytes(_section(body, header, "problems")))
    ops = json.loads(bytes(_section(body, header, "ops")))
    from dreamkeeper.stores.memory_store import AppliedOp

    store._entries = table
    store._parts = parts
    store._problems = {Path(k): v for k, v in problems.items()}
    store._ops = None if ops is None else {k: AppliedOp(v[0], v[1], v[2]) for k, v in ops.items()}
    store._index = index
    store._category_ids = {c: cid for c, cid in header["categories"]}
    store._offset = header["offset"]


def _arrays(
    flat: memoryview, offsets: np.ndarray, typecode: str, count: int, itemsize: int = 4
) -> list[array]:
    if len(offsets) != count + 1 or (count and offsets[-1] * itemsize != len(flat)):
        raise Refused("a postings table does not match its offsets")
    out = []
    bounds = (offsets * itemsize).tolist()
    raw = bytes(flat)
    for i in range(count):
        a = array(typecode)
        a.frombytes(raw[bounds[i] : bounds[i + 1]])
        out.append(a)
    return out


def _grown(target: Any, values: np.ndarray) -> None:
    target._data = np.concatenate([values, np.zeros(64, dtype=values.dtype)])
    target.size = len(values)


def _index(body: memoryview, header: dict[str, Any], slots: int, terms: int) -> BM25Index:
    index = BM25Index()
    keys = _split(_section(body, header, "slot_keys"), slots)
    index._key_of = [k or None for k in keys]
    index._slot_of = {k: i for i, k in enumerate(keys) if k}
    tokens_of: list[array | None] = list(
        _arrays(
            _section(body, header, "tokens"),
            _array(body, header, "token_off", np.int64),
            "I",
            slots,
        )
    )
    for i, k in enumerate(keys):
        if not k:
            tokens_of[i] = None
    index._tokens_of = tokens_of
    index._token_str = _split(_section(body, header, "token_str"), terms)
    index._token_id = {t: i for i, t in enumerate(index._token_str)}
    if len(index._token_id) != terms:
        raise Refused("duplicate terms")
    post_off = _array(body, header, "post_off", np.int64)
    index._post_slots = _arrays(_section(body, header, "post_slots"), post_off, "I", terms)
    index._post_tf = _arrays(_section(body, header, "post_tf"), post_off, "f", terms)
    for name, dtype in (
        ("doc_len", np.float64),
        ("alive", np.bool_),
        ("live", np.bool_),
        ("weight", np.float64),
        ("group", np.int64),
        ("importance", np.float64),
        ("stamp", np.float64),
    ):
        values = _array(body, header, name, dtype)
        if len(values) != slots:
            raise Refused(f"{name} has the wrong length")
        _grown(getattr(index, f"_{name}"), values)
    index._df_all = _array(body, header, "df_all", np.int64).tolist()
    index._df_live = _array(body, header, "df_live", np.int64).tolist()
    if len(index._df_all) != terms or len(index._df_live) != terms:
        raise Refused("document frequencies have the wrong length")
    index._n_all, index._n_live, index._len_all, index._len_live, index._dead = header["scalars"]
    index.generation += 1
    return index
