"""Working memory as files: entries grouped by top-level segment into
`working-memory/{segment}.json`, each replaced atomically under an inter-process lock.
A reader stats the directory's files on every call and reloads only a file that
changed, so a write by another process is seen on the next read. Expired entries are
dropped on load and swept from the files hourly (by the next write after the hour). The
rules are `stores.working.working_memory`'s; vectors, with an embedding model, are files
of `working-memory/.embeddings/` (`stores.files.working_vectors`)."""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import utc_now
from dreamkeeper.core.validation import validate_agent_id
from dreamkeeper.stores import safe_json
from dreamkeeper.stores.contract.working import WorkingEntry
from dreamkeeper.stores.files.agent_files import (
    atomic_write_bytes,
    path_lock,
    real_directory,
    unlink_within,
)
from dreamkeeper.stores.files.working_vectors import WorkingVectors, vector_name
from dreamkeeper.stores.vectors.embedder import Embedder
from dreamkeeper.stores.working.working_memory import (
    WorkingMemoryBase,
    WorkingMemoryFull,
    check_stored_entry,
)

log = logging.getLogger(__name__)

# A segment file (every namespace under one top-level segment): the reader refuses a
# larger one, so the writer refuses to make one.
MAX_SEGMENT_FILE_BYTES = 64 * 1_048_576
MAX_FILE_DEPTH = 4  # {"entries": [{"tags": [...]}]}


class FileWorkingMemoryStore(WorkingMemoryBase):
    """Working memory in `working-memory/{segment}.json` files (this module's docstring)."""

    def __init__(
        self,
        data_dir: Path | str,
        agent_id: str,
        *,
        clock: Callable[[], datetime] = utc_now,
        embeddings: Embedder | None = None,
    ) -> None:
        agent_root = Path(data_dir) / "agents" / validate_agent_id(agent_id)
        root = agent_root / "working-memory"
        super().__init__(
            agent_id,
            clock=clock,
            embeddings=embeddings,
            vectors=WorkingVectors(root / ".embeddings", embeddings, within=agent_root)
            if embeddings
            else None,
        )
        self.agent_root = agent_root
        self.root = root
        self._lock = path_lock(self.root / ".lock", within=self.agent_root)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[object]:
        with self._lock.hold():
            self._refresh()
            yield None

    def _path(self, segment: str) -> Path:
        return self.root / f"{segment}.json"

    def _refresh(self) -> None:
        """Reload the segment files that changed on disk (stat only when none did)."""
        seen: set[str] = set()
        try:
            if not real_directory(self.agent_root, self.root, create=False):
                raise FileNotFoundError(self.root)
            listing = [item for item in os.scandir(self.root) if not item.is_symlink()]
        except FileNotFoundError:
            listing = []
        except OSError as exc:  # a file or a dangling link where the directory should be
            log.warning("working memory %s: cannot list %s (%s)", self.agent_id, self.root, exc)
            listing = []
        for item in listing:
            if not item.name.endswith(".json") or item.name.startswith("."):
                continue
            segment = item.name[: -len(".json")]
            seen.add(segment)
            try:
                st = item.stat()
            except FileNotFoundError:
                continue
            signature = (st.st_mtime_ns, st.st_size, st.st_ino)
            cached = self._segments.get(segment)
            if cached is None or cached.signature != signature:
                self._load(segment, signature)
        for gone in set(self._segments) - seen:
            self._install(gone, {}, None)

    def _load(self, segment: str, signature: tuple[int, int, int]) -> None:
        path = self._path(segment)
        now = self.now()
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
                if not entry.expired(now):  # expired entries are dropped on load
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
        self._install(segment, entries, signature)

    def erase_matching(self, mentions: Callable[[str], bool]) -> builtins.list[str]:
        """Delete every entry, live or expired but not yet swept, whose key or value
        `mentions` the forgotten text (`stores.forget`), with its vector; returns the
        keys removed. Expired entries still lie in the files until a sweep, so the files
        are read raw, not through the live view."""
        removed: builtins.list[str] = []
        with self._lock.hold():
            self._refresh()
            now = self.now()
            for segment in builtins.list(self._segments):
                raw = _raw_items(self._path(segment))
                hits = [k for k, v in raw if mentions(v) or mentions(k)]
                if not hits:
                    continue
                kept = {
                    k: e
                    for k, e in self._segments[segment].entries.items()
                    if k not in hits and not e.expired(now)
                }
                self._write(segment, kept)
                removed.extend(hits)
            if self._vectors is not None and removed:
                self._vectors.prune(
                    e.key for seg in self._segments.values() for e in seg.entries.values()
                )
            for key in removed:  # made by a process that had an embedding model
                unlink_within(
                    self.root / ".embeddings" / f"{vector_name(key)}.bin", self.agent_root
                )
        return removed

    def sweep(self) -> int:
        """Drop expired entries from the files; returns how many went."""
        removed = 0
        with self._lock.hold():
            self._refresh()
            now = self.now()
            for segment, seg in list(self._segments.items()):
                on_disk = _read_keys(self._path(segment))
                live = {k: e for k, e in seg.entries.items() if not e.expired(now)}
                if on_disk != set(live):
                    removed += len(on_disk - set(live))
                    self._write(segment, live)
            if self._vectors is not None:
                self._vectors.prune(
                    e.key for seg in self._segments.values() for e in seg.entries.values()
                )
            self._last_sweep = now
        return removed

    def _write(self, segment: str, entries: dict[str, WorkingEntry]) -> None:
        """Replace a segment file (lock held), install what was written, and delete the
        vectors of entries that left it."""
        self._forget_vectors(segment, entries)
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
        self._install(segment, entries, (st.st_mtime_ns, st.st_size, st.st_ino))


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
