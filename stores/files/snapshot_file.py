"""The index snapshot of a file store (`stores.longterm.snapshot` is its format):
`agents/{agent}/index-snapshot.bin`, written atomically from a state with no pending
record, tied to the journal by hashes of its bytes at the snapshot's offset and to the
store's epoch, and opened mapped: the entries' JSON stays in the file and is read, and
checked, when first needed (an entry's own file when the snapshot changed since)."""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores.files.agent_files import AgentFiles
from dreamkeeper.stores.files.entry_files import entry_parts, load_entry
from dreamkeeper.stores.files.journal import Journal
from dreamkeeper.stores.longterm.entry_state import EntryState
from dreamkeeper.stores.longterm.snapshot import (
    SNAPSHOT,
    Refused,
    RowSource,
    decode,
    encode_rows,
)

log = logging.getLogger(__name__)


def write(
    files: AgentFiles, agent_id: str, state: EntryState, journal: Journal, epoch: str
) -> None:
    """Write the snapshot of `state`, read from the store of `epoch`, atomically (the
    caller checked nothing is pending). Its entries then become rows of the file
    written: the old file's rows would all fall back to the entries' files once it is
    replaced, and parsed entries give their memory back (read again when needed)."""
    data, rows = encode_rows(agent_id, state, {**journal.marks(state.offset), "epoch": epoch})
    files.write(SNAPSHOT, data)
    path = str(files.path(*SNAPSHOT))
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return
    # Replaced again in between (another process)? Then the identity is the other
    # file's and reads check its bytes, which do not match: they fall back.
    rows.path, rows.identity = path, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    rows.fallback = _entry_file(files)
    state.entries.repoint(rows, state.index.slot)


def _entry_file(files: AgentFiles) -> Callable[[str, str | None], MemoryEntry | None]:
    def fallback(entry_id: str, category: str | None) -> MemoryEntry | None:
        try:
            parts = entry_parts(entry_id, category)
        except InvalidInput:
            return None
        return load_entry(files, parts).entry

    return fallback


def load(files: AgentFiles, agent_id: str, journal: Journal, epoch: str) -> EntryState | None:
    """The state the agent's snapshot holds, or None when there is none or it is
    refused (logged): it must have been taken from the store of `epoch`. Its entries are
    read from the file when first accessed."""
    path = str(files.path(*SNAPSHOT))
    try:
        mapped = files.map(SNAPSHOT)
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("memory store %s: index snapshot unreadable (%s)", agent_id, exc)
        return None

    identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    source = RowSource(path, identity, _entry_file(files))
    try:
        with mapped:
            return _read(agent_id, journal, epoch, mapped, source)
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


def _read(
    agent_id: str, journal: Journal, epoch: str, data: mmap.mmap, source: RowSource
) -> EntryState:
    def accept(offset: int, marks: object) -> None:
        if not isinstance(marks, dict) or marks.get("epoch") != epoch:
            raise Refused("it was taken from another epoch of the store")
        if journal.size() < offset:
            raise Refused("the journal is shorter than the snapshot's offset")
        if {**journal.marks(offset), "epoch": epoch} != marks:
            raise Refused("the journal is not the one the snapshot was taken from")

    return decode(agent_id, data, accept, source)
