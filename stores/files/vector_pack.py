"""The vector pack: one contiguous file per embedding model, memory-mapped on open.

`memory/.embeddings/pack-{model key hex}.vectors` holds a store's `VectorIndex` as it
was at a journal offset: the unit rows (float32, row-major), each row's entry id and
live flag. The first hybrid search maps it (copy-on-write: a row changed later lives in
this process only) and re-reads, from the per-entry files, only the vectors of entries
named by journal records after that offset — instead of opening one file per entry.

Like the index snapshot it is a cache, with the same rules (`stores.longterm.snapshot`): written
atomically from a state with no pending record, refused — and the vectors read from
their files — when it is missing, of another model, dimension or version, when its
CRC-32 fails, when the journal no longer holds what it held at the offset, or when the
offset is past what the store has read (a pack newer than the store's view).

Layout: `DKVPACK1`, the header length (uint64 LE), the header (JSON), then at 64-byte
aligned offsets: the ids (12 ASCII bytes per row, zeros for a free row), the live
flags (one byte per row) and the matrix.
"""

from __future__ import annotations

import json
import logging
import mmap
import struct
import zlib
from typing import Any

import numpy as np

from dreamkeeper.stores.files.agent_files import AgentFiles
from dreamkeeper.stores.files.entry_files import EMBEDDINGS_DIR, MEMORY
from dreamkeeper.stores.files.journal import Journal
from dreamkeeper.stores.vectors.vectors import VectorIndex

log = logging.getLogger(__name__)

MAGIC = b"DKVPACK1"
VERSION = 1
ID_BYTES = 12


def pack_parts(model_key: bytes) -> tuple[str, ...]:
    return (MEMORY, EMBEDDINGS_DIR, f"pack-{model_key.hex()}.vectors")


def _align(n: int) -> int:
    return n + (-n % 64)


def encode(index: VectorIndex, model_key: bytes, offset: int, marks: dict[str, str]) -> bytes:
    rows = len(index.row_keys)
    ids = b"".join((k or "").encode("ascii").ljust(ID_BYTES, b"\0") for k in index.row_keys)
    live = index.live_rows.astype(np.uint8).tobytes()
    matrix = np.ascontiguousarray(index.rows, dtype="<f4").tobytes()
    header = {
        "version": VERSION,
        "model": model_key.hex(),
        "dim": index.dim,
        "rows": rows,
        "offset": offset,
        "journal": marks,
        "crc": zlib.crc32(matrix, zlib.crc32(live, zlib.crc32(ids))),
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    out = bytearray(MAGIC + struct.pack("<Q", len(head)) + head)
    for part in (ids, live, matrix):
        out += b"\0" * (_align(len(out)) - len(out))
        out += part
    return bytes(out)


def write(
    files: AgentFiles,
    agent_id: str,
    index: VectorIndex,
    model_key: bytes,
    offset: int,
    journal: Journal,
    epoch: str,
) -> bool:
    """Pack the index, current as of journal byte `offset` of the store of `epoch` (the
    caller checked that no write is pending); False when it could not be written
    (logged: it is a cache)."""
    marks = {**journal.marks(offset), "epoch": epoch}
    try:
        files.write(pack_parts(model_key), encode(index, model_key, offset, marks))
    except OSError as exc:
        log.warning("memory store %s: vector pack not written (%s)", agent_id, exc)
        return False
    return True


def load(
    files: AgentFiles,
    agent_id: str,
    journal: Journal,
    model_key: bytes,
    dim: int,
    offset: int,
    epoch: str,
) -> tuple[VectorIndex, set[str]] | None:
    """The packed index and the ids changed since it was written, or None. `offset`: how
    far the caller has read the journal (a pack written past it is refused); `epoch`: the
    store's (a pack another epoch's process wrote is refused)."""
    try:
        data = files.map(pack_parts(model_key), private=True)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("memory store %s: vector pack unreadable (%s)", agent_id, exc)
        return None
    try:
        return _install(journal, offset, epoch, data, model_key, dim)
    except Exception as exc:  # noqa: BLE001 - a cache: anything wrong means "read the files"
        log.warning(
            "memory store %s: vector pack not used (%s: %s)",
            agent_id,
            type(exc).__name__,
            exc,
        )
        data.close()
        return None


def _install(
    journal: Journal, read_up_to: int, epoch: str, data: mmap.mmap, model_key: bytes, dim: int
) -> tuple[VectorIndex, set[str]] | None:
    if data[: len(MAGIC)] != MAGIC:
        raise ValueError("not a vector pack")
    (length,) = struct.unpack_from("<Q", data, len(MAGIC))
    start = len(MAGIC) + 8
    if length > 1 << 20 or start + length > len(data):
        raise ValueError("torn header")
    header: dict[str, Any] = json.loads(bytes(data[start : start + length]))
    if header.get("version") != VERSION or header.get("model") != model_key.hex():
        raise ValueError("another version or model")
    if header.get("dim") != dim:
        data.close()
        return None  # vectors of another dimension: not an error, just not these
    offset, rows = header["offset"], header["rows"]
    if not isinstance(offset, int) or not 0 <= offset <= read_up_to:
        raise ValueError("its offset is past what the store has read")
    if {**journal.marks(offset), "epoch": epoch} != header["journal"]:
        raise ValueError("the journal is not the one the pack was written against")
    at = _align(start + length)
    ids_end = at + rows * ID_BYTES
    live_at = _align(ids_end)
    matrix_at = _align(live_at + rows)
    if matrix_at + rows * dim * 4 != len(data):
        raise ValueError("its length does not match its header")
    view = memoryview(data)
    crc = zlib.crc32(view[at:ids_end])
    crc = zlib.crc32(view[live_at : live_at + rows], crc)
    crc = zlib.crc32(view[matrix_at:], crc)
    view.release()
    if crc != header["crc"]:
        raise ValueError("checksum mismatch (a corrupt or torn file)")
    raw_ids = np.frombuffer(data, dtype=f"S{ID_BYTES}", count=rows, offset=at).tolist()
    ids = [i.decode("ascii") for i in raw_ids]  # numpy drops the zero padding
    live = np.frombuffer(data, dtype=np.uint8, count=rows, offset=live_at).astype(np.bool_)
    matrix = np.frombuffer(data, dtype="<f4", count=rows * dim, offset=matrix_at).reshape(rows, dim)
    index = VectorIndex.from_rows(dim, matrix, [i or None for i in ids], live)
    records, _ = journal.read_from(offset)
    changed = {r.id for r in records}
    return index, changed
