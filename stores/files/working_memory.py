"""Working memory as files: entries grouped by top-level segment into
`working-memory/{segment}.json`, each replaced atomically under an inter-process lock.
A reader stats the directory's files on every call and reloads only a file that
changed, so a write by another process is seen on the next read. Expired entries are
dropped on load and swept from the files hourly (by the next write after the hour). The
rules are `stores.working.working_memory`'s; vectors, with an embedding model, are files
of `working-memory/.embeddings/` (`stores.files.working_vectors`)."""

from __future__ import annotations

import builtins
import json
import logging
import os
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Unpack

from pydantic import ValidationError

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract.backend import TierOptions
from dreamkeeper.stores.contract.working import WorkingEntry
from dreamkeeper.stores.files.agent_files import (
    atomic_write_bytes,
    path_lock,
    real_directory,
    unlink_within,
)
from dreamkeeper.stores.files.working_vectors import VectorFiles
from dreamkeeper.stores.vectors.working_vectors import vector_name
from dreamkeeper.stores.working.working_memory import (
    Segments,
    StoredSegment,
    WorkingMemory,
    WorkingMemoryFull,
    check_stored_entry,
)

log = logging.getLogger(__name__)

# A segment file (every namespace under one top-level segment): the reader refuses a
# larger one, so the writer refuses to make one.
MAX_SEGMENT_FILE_BYTES = 64 * 1_048_576
MAX_FILE_DEPTH = 4  # {"entries": [{"tags": [...]}]}


class FileWorkingMemoryStore(WorkingMemory):
    """Working memory in `working-memory/{segment}.json` files (this module's docstring):
    the shared rules over `WorkingFiles`."""

    def __init__(self, data_dir: Path | str, agent_id: str, **options: Unpack[TierOptions]) -> None:
        storage = WorkingFiles(Path(data_dir), validate_agent_id(agent_id))
        vectors = VectorFiles(storage.root / ".embeddings", within=storage.agent_root)
        super().__init__(agent_id, storage, vectors, **options)
        self.root = storage.root


class WorkingFiles:
    """An agent's working memory as `working-memory/{segment}.json` files under one lock
    file (`stores.working.working_memory.WorkingStorage`); a segment's signature is its
    file's stat."""

    def __init__(self, data_dir: Path, agent_id: str) -> None:
        self.agent_id = agent_id
        self.agent_root = data_dir / "agents" / agent_id
        self.root = self.agent_root / "working-memory"
        self._lock = path_lock(self.root / ".lock", within=self.agent_root)

    def writing(self) -> AbstractContextManager[bool]:
        return self._lock.hold()

    def _path(self, segment: str) -> Path:
        return self.root / f"{segment}.json"

    def changed(
        self, known: Mapping[str, object], now: datetime
    ) -> dict[str, StoredSegment | None]:
        """The segment files that changed on disk (stat only when none did)."""
        changes: dict[str, StoredSegment | None] = {}
        seen: set[str] = set()
        for item in self._listing():
            if not item.name.endswith(".json") or item.name.startswith("."):
                continue
            segment = item.name[: -len(".json")]
            seen.add(segment)
            try:
                st = item.stat()
            except FileNotFoundError:
                continue
            signature = (st.st_mtime_ns, st.st_size, st.st_ino)
            if known.get(segment) != signature:
                changes[segment] = StoredSegment(signature, self._load(segment, now))
        for gone in known.keys() - seen:
            changes[gone] = None
        return changes

    def _listing(self) -> builtins.list[os.DirEntry[str]]:
        try:
            if not real_directory(self.agent_root, self.root, create=False):
                raise FileNotFoundError(self.root)
            return [item for item in os.scandir(self.root) if not item.is_symlink()]
        except FileNotFoundError:
            return []
        except OSError as exc:  # a file or a dangling link where the directory should be
            log.warning("working memory %s: cannot list %s (%s)", self.agent_id, self.root, exc)
            return []

    def _load(self, segment: str, now: datetime) -> dict[str, WorkingEntry]:
        """A segment file's well-formed live entries (an unreadable file reads as none;
        expired entries are dropped on load)."""
        path = self._path(segment)
        entries: dict[str, WorkingEntry] = {}
        skipped = 0
        try:
            raw = safe_json.load_file(
                path, max_bytes=MAX_SEGMENT_FILE_BYTES, max_depth=MAX_FILE_DEPTH
            )
            items = raw.get("entries") if isinstance(raw, dict) else None
            if not isinstance(items, list):
                raise ValueError("no 'entries' list")
            for item in items:
                try:
                    entry = WorkingEntry.model_validate(item)
                    check_stored_entry(entry, segment)
                except (ValidationError, InvalidInput):
                    skipped += 1
                    continue
                if not entry.expired(now):
                    entries[entry.key] = entry
            if skipped:
                log.warning(
                    "working memory %s: skipped %d malformed or misplaced entr(ies) in %s",
                    self.agent_id,
                    skipped,
                    path,
                )
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.warning("working memory %s: skipped unreadable %s (%s)", self.agent_id, path, exc)
        return entries

    def write(
        self, segment: str, entries: dict[str, WorkingEntry], old: Mapping[str, WorkingEntry]
    ) -> object:
        """Replace a segment file (lock held); its new stat."""
        path = self._path(segment)
        body = {"entries": [e.model_dump(mode="json", by_alias=True) for e in entries.values()]}
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        if len(data) > MAX_SEGMENT_FILE_BYTES:
            raise WorkingMemoryFull(
                f"working memory under {segment!r}/ would take {len(data)} bytes (at most "
                f"{MAX_SEGMENT_FILE_BYTES}): delete or shorten some of its entries"
            )
        atomic_write_bytes(path, data, within=self.agent_root)
        st = path.stat()
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def sweep(self, now: datetime, live: Segments) -> tuple[int, dict[str, object]]:
        """Rewrite the segment files that hold more than their live entries."""
        removed = 0
        rewritten: dict[str, object] = {}
        for segment, entries in live.items():
            on_disk = _read_keys(self._path(segment))
            if on_disk != set(entries):
                removed += len(on_disk - set(entries))
                rewritten[segment] = self.write(segment, entries, {})
        return removed, rewritten

    def erase_matching(
        self, mentions: Callable[[str], bool], live: Segments
    ) -> tuple[builtins.list[str], dict[str, StoredSegment]]:
        """Expired entries still lie in the files until a sweep, so the files are read
        raw; a segment with a match is written again with its other live entries."""
        removed: builtins.list[str] = []
        rewritten: dict[str, StoredSegment] = {}
        for segment, entries in live.items():
            raw = _raw_items(self._path(segment))
            hits = [k for k, v in raw if mentions(v) or mentions(k)]
            if not hits:
                continue
            kept = {k: e for k, e in entries.items() if k not in hits}
            rewritten[segment] = StoredSegment(self.write(segment, kept, {}), kept)
            removed.extend(hits)
        for key in removed:  # made by a process that had an embedding model
            unlink_within(self.root / ".embeddings" / f"{vector_name(key)}.bin", self.agent_root)
        return removed, rewritten


def _raw_items(path: Path) -> builtins.list[tuple[str, str]]:
    """(key, value) of every item in a segment file as it lies on disk, expired ones too."""
    try:
        raw = safe_json.load_file(path, max_bytes=MAX_SEGMENT_FILE_BYTES, max_depth=MAX_FILE_DEPTH)
        return [
            (str(item.get("key")), str(item.get("value")))
            for item in raw.get("entries", [])
            if isinstance(item, dict)
        ]
    except (OSError, ValueError, AttributeError, TypeError):
        return []


def _read_keys(path: Path) -> set[str]:
    try:
        raw = safe_json.load_file(path, max_bytes=MAX_SEGMENT_FILE_BYTES, max_depth=MAX_FILE_DEPTH)
        return {str(item.get("key")) for item in raw.get("entries", []) if isinstance(item, dict)}
    except (OSError, ValueError, AttributeError, TypeError):
        return set()
