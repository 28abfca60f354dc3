"""`FileMemoryStore`: one agent's long-term memory, one JSON file per entry.

Layout under `{data}/agents/{agent_id}/`:
  memory/{category}/{id}.json    an entry (uncategorized entries at memory/{id}.json)
  memory/.embeddings/{id}.bin    its vector, when an embedding model is configured
  journal.jsonl                  append-only change journal (no content)
  .lock                          held by the one process writing at a time

Concurrency: every write takes the inter-process lock, first catches up with the journal
(so decisions see other processes' writes), writes the file atomically, then appends a
journal record. Readers never lock: each read stats the journal and, if it grew,
re-reads just the files the new records name.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dreamkeeper.stores.bm25 import BM25Index, tokenize
from dreamkeeper.stores.files import InterProcessLock, atomic_write_text
from dreamkeeper.stores.journal import Journal, JournalAction, JournalRecord
from dreamkeeper.stores.models import MemoryEntry, as_utc
from dreamkeeper.stores.validation import (
    InvalidInput,
    new_entry_id,
    validate_agent_id,
    validate_category,
    validate_content,
    validate_entry_id,
    validate_importance,
    validate_metadata,
    validate_tags,
)

log = logging.getLogger(__name__)

EMBEDDINGS_DIR = ".embeddings"


class MemoryNotFound(InvalidInput):
    """No entry with that id (live or archived)."""


class StoreConflict(InvalidInput):
    """The write would clobber something that is not what the caller expects."""


def utc_now() -> datetime:
    return datetime.now(UTC)


def document_text(entry: MemoryEntry) -> str:
    """What BM25 indexes: content, tags, and the category with / and - as spaces."""
    category = (entry.category or "").replace("/", " ").replace("-", " ")
    return " ".join([entry.content, " ".join(entry.tags), category])


@dataclass
class PurgeReport:
    considered: int = 0
    purged: list[str] = field(default_factory=list)
    kept_high_value: list[str] = field(default_factory=list)
    kept_in_retention: int = 0


class FileMemoryStore:
    def __init__(
        self,
        data_dir: Path | str,
        agent_id: str,
        *,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.agent_id = validate_agent_id(agent_id)
        self.root = Path(data_dir) / "agents" / agent_id
        self.memory_dir = self.root / "memory"
        self.embeddings_dir = self.memory_dir / EMBEDDINGS_DIR
        self.journal = Journal(self.root / "journal.jsonl")
        self._lock = InterProcessLock(self.root / ".lock")
        self._clock = clock
        self._entries: dict[str, MemoryEntry] = {}
        self._paths: dict[str, str] = {}  # str, not Path: cold open builds 10k+ of them
        self._problems: dict[Path, str] = {}
        self._index = BM25Index()
        self._category_ids: dict[str | None, int] = {}
        self._offset = 0
        self._loaded = False

    # -- loading and change feed -------------------------------------------------------

    def now(self) -> datetime:
        return as_utc(self._clock())

    def path_for(self, entry_id: str, category: str | None) -> Path:
        base = self.memory_dir if category is None else self.memory_dir / category
        return base / f"{entry_id}.json"

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._full_load()
        else:
            self._refresh()

    def reload(self) -> None:
        """Forget everything in memory and rescan the directory."""
        self._full_load()

    def _full_load(self) -> None:
        self._entries.clear()
        self._paths.clear()
        self._problems.clear()
        self._index = BM25Index()
        # Take the journal offset first: anything written during the scan is replayed.
        self._offset = self.journal.size()
        if self.memory_dir.is_dir():
            for dirpath, dirnames, filenames in os.walk(self.memory_dir):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for name in filenames:
                    if name.endswith(".json") and not name.startswith("."):
                        self._load_file(os.path.join(dirpath, name), scanning=True)
        self._loaded = True
        self._refresh()

    def _load_file(self, path: str, *, scanning: bool = False) -> MemoryEntry | None:
        try:
            with open(path, "rb") as handle:
                entry = MemoryEntry.from_json(handle.read())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self._report_problem(path, f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
            return None
        if os.path.basename(path) != f"{entry.id}.json":
            self._report_problem(path, f"file name does not match its id {entry.id!r}")
            return None
        known_path = self._paths.get(entry.id)
        if scanning and known_path is not None and known_path != path:
            # Two files for one id: a category move interrupted between writing the new
            # file and removing the old. The newer record wins; the other is reported.
            if _version(entry) < _version(self._entries[entry.id]):
                self._report_problem(path, f"stale duplicate of {entry.id} at {known_path}")
                return None
            self._report_problem(known_path, f"stale duplicate of {entry.id} at {path}")
        if self._problems:
            self._problems.pop(Path(path), None)
        self._install(entry, path)
        return entry

    def _report_problem(self, path: str, reason: str) -> None:
        key = Path(path)
        if self._problems.get(key) != reason:
            log.warning("memory store %s: skipped %s (%s)", self.agent_id, path, reason)
        self._problems[key] = reason

    def _category_id(self, category: str | None) -> int:
        cid = self._category_ids.get(category)
        if cid is None:
            cid = len(self._category_ids)
            self._category_ids[category] = cid
        return cid

    def _install(self, entry: MemoryEntry, path: str) -> None:
        self._entries[entry.id] = entry
        self._paths[entry.id] = path
        self._index.put(
            entry.id,
            tokenize(document_text(entry)),
            archived=entry.is_archived,
            weight=0.5 + 0.5 * entry.importance_score,
            group=self._category_id(entry.category),
        )

    def _forget(self, entry_id: str) -> None:
        self._entries.pop(entry_id, None)
        self._paths.pop(entry_id, None)
        self._index.remove(entry_id)

    def _refresh(self) -> None:
        size = self.journal.size()
        if size == self._offset:
            return
        if size < self._offset:  # journal replaced or truncated: trust nothing cached
            self._full_load()
            return
        records, self._offset = self.journal.read_from(self._offset)
        for record in records:
            self._apply_record(record)

    def _apply_record(self, record: JournalRecord) -> None:
        if record.action is JournalAction.PURGED:
            self._forget(record.id)
            return
        path = str(self.path_for(record.id, record.category))
        if self._load_file(path) is not None:
            return
        known_path = self._paths.get(record.id)
        if not os.path.exists(path) and known_path not in (None, path):
            # Moved again by a later write whose record comes next; keep it until then.
            if self._load_file(known_path) is not None:
                return
        # Gone, or unreadable (reported): a skipped file is not served from a stale copy.
        self._forget(record.id)

    # -- reads -------------------------------------------------------------------------

    def get(self, entry_id: str) -> MemoryEntry | None:
        """The entry, live or archived, or None."""
        validate_entry_id(entry_id)
        self._ensure_loaded()
        return self._entries.get(entry_id)

    def cached(self, entry_id: str) -> MemoryEntry | None:
        """The entry as last loaded, without checking for other processes' writes: for a
        caller that has just refreshed (a search walking its hits)."""
        return self._entries.get(entry_id)

    def require(self, entry_id: str) -> MemoryEntry:
        entry = self.get(entry_id)
        if entry is None:
            raise MemoryNotFound(f"no memory with id {entry_id} for agent {self.agent_id!r}")
        return entry

    def entries(self, *, include_archived: bool = False) -> list[MemoryEntry]:
        self._ensure_loaded()
        return [e for e in self._entries.values() if include_archived or not e.is_archived]

    def archived(self) -> list[MemoryEntry]:
        self._ensure_loaded()
        return sorted(
            (e for e in self._entries.values() if e.is_archived),
            key=lambda e: e.archived_at or e.created_at,
            reverse=True,
        )

    def categories(self) -> dict[str, int]:
        """Live entry counts per category (uncategorized under "")."""
        counts: dict[str, int] = {}
        for entry in self.entries():
            key = entry.category or ""
            counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items()))

    def problems(self) -> dict[Path, str]:
        """Files skipped because they could not be read, with the reason."""
        self._ensure_loaded()
        return dict(self._problems)

    def index(self) -> BM25Index:
        """The live search index (kept current by every read)."""
        self._ensure_loaded()
        return self._index

    def categories_by_group(self) -> dict[int, str | None]:
        return {cid: cat for cat, cid in self._category_ids.items()}

    def __len__(self) -> int:
        return len(self.entries())

    # -- writes ------------------------------------------------------------------------

    def _write(self, entry: MemoryEntry, action: JournalAction, reason: str | None) -> MemoryEntry:
        """Persist `entry` (lock held by the caller) and record it in the journal."""
        path = self.path_for(entry.id, entry.category)
        old_path = self._paths.get(entry.id)
        atomic_write_text(path, entry.to_json())
        if old_path is not None and old_path != str(path):
            Path(old_path).unlink(missing_ok=True)
        self._install(entry, str(path))
        self._append(action, entry, reason)
        return entry

    def _append(self, action: JournalAction, entry: MemoryEntry, reason: str | None) -> None:
        record = JournalRecord(
            at=self.now(),
            action=action,
            id=entry.id,
            category=entry.category,
            fingerprint=entry.fingerprint,
            reason=reason,
        )
        self._offset = self.journal.append(record)

    def writing(self):
        """Hold the store's writer lock (re-entrant): for a lookup and a write that must
        see no other writer in between, as save-time dedup needs."""
        return self._lock.hold()

    def create(
        self,
        content: str,
        *,
        category: str | None = None,
        tags: Iterable[str] | None = None,
        metadata: dict[str, str] | None = None,
        importance: float = 0.5,
        entry_id: str | None = None,
        now: datetime | None = None,
    ) -> MemoryEntry:
        """Create an entry. With an explicit id the call is idempotent: an existing entry
        with the same content is returned unchanged; different content is a conflict."""
        content = validate_content(content)
        category = validate_category(category)
        tag_list = validate_tags(tags)
        metadata = validate_metadata(metadata)
        importance = validate_importance(importance)
        entry_id = validate_entry_id(entry_id) if entry_id is not None else None
        with self.writing():
            self._ensure_loaded()
            if entry_id is None:
                entry_id = new_entry_id()
                while entry_id in self._entries:
                    entry_id = new_entry_id()
            existing = self._entries.get(entry_id)
            if existing is not None:
                if existing.content == content:
                    return existing
                raise StoreConflict(f"memory {entry_id} already exists with other content")
            path = self.path_for(entry_id, category)
            if path.exists():
                raise StoreConflict(f"{path} exists but could not be read; not overwriting it")
            at = as_utc(now) if now is not None else self.now()
            entry = MemoryEntry(
                id=entry_id,
                content=content,
                category=category,
                tags=tag_list,
                created_at=at,
                last_seen_at=at,
                metadata=metadata,
                importance_score=importance,
            )
            return self._write(entry, JournalAction.CREATED, None)

    def put(
        self, entry: MemoryEntry, *, action: JournalAction, reason: str | None = None
    ) -> MemoryEntry:
        """Write a whole entry (validated). For callers that computed it themselves."""
        validate_entry_id(entry.id)
        validate_content(entry.content)
        validate_category(entry.category)
        validate_tags(entry.tags)
        validate_metadata(entry.metadata)
        validate_importance(entry.importance_score)
        with self.writing():
            self._ensure_loaded()
            if self._entries.get(entry.id) == entry:
                return entry
            return self._write(entry, action, reason)

    def update(
        self,
        entry_id: str,
        *,
        action: JournalAction = JournalAction.UPDATED,
        reason: str | None = None,
        **changes: object,
    ) -> MemoryEntry:
        """Apply field changes (snake_case names) to an existing entry."""
        return self.mutate(
            entry_id,
            lambda current: MemoryEntry.model_validate({**current.model_dump(), **changes}),
            action=action,
            reason=reason,
        )

    def mutate(
        self,
        entry_id: str,
        change: Callable[[MemoryEntry], MemoryEntry],
        *,
        action: JournalAction = JournalAction.UPDATED,
        reason: str | None = None,
    ) -> MemoryEntry:
        """Read-modify-write under the lock: `change` sees the current entry, including
        every other process's writes, and returns the new one."""
        self.require(entry_id)  # reject unknown ids before taking (creating) the lock
        with self.writing():
            current = self.require(entry_id)
            updated = change(current)
            if updated.id != current.id:
                raise StoreConflict("a mutation cannot change an entry's id")
            if updated == current:
                return current
            return self.put(updated, action=action, reason=reason)

    def update_importance(self, entry_id: str, importance: float) -> MemoryEntry:
        importance = validate_importance(importance)
        return self.update(
            entry_id,
            importance_score=importance,
            updated_at=self.now(),
            reason=f"importance set to {importance:.2f}",
        )

    def archive(self, entry_id: str, reason: str, *, now: datetime | None = None) -> MemoryEntry:
        """Hide an entry from search, keeping it on disk. Archiving twice is a no-op and
        the first reason is kept."""
        if not reason or not reason.strip():
            raise InvalidInput("an archive needs a reason")
        self.require(entry_id)  # reject unknown ids before taking (creating) the lock
        with self.writing():
            current = self.require(entry_id)
            if current.is_archived:
                return current
            at = as_utc(now) if now is not None else self.now()
            archived = current.model_copy(update={"archived_at": at, "archive_reason": reason})
            return self._write(archived, JournalAction.ARCHIVED, reason)

    def restore(self, entry_id: str) -> MemoryEntry:
        self.require(entry_id)  # reject unknown ids before taking (creating) the lock
        with self.writing():
            current = self.require(entry_id)
            if not current.is_archived:
                return current
            restored = current.model_copy(update={"archived_at": None, "archive_reason": None})
            return self._write(restored, JournalAction.RESTORED, "restored")

    def purge(
        self,
        retention: timedelta,
        *,
        keep: Callable[[MemoryEntry], bool] = lambda _: False,
        now: datetime | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> PurgeReport:
        """Hard-delete entries archived before `now - retention`, except those `keep`
        protects. A retention of zero or less keeps everything."""
        report = PurgeReport()
        if retention <= timedelta(0):
            return report
        with self.writing():
            self._ensure_loaded()
            cutoff = (as_utc(now) if now is not None else self.now()) - retention
            archived = [e for e in self._entries.values() if e.is_archived]
            report.considered = len(archived)
            for done, entry in enumerate(archived, start=1):
                assert entry.archived_at is not None
                if entry.archived_at >= cutoff:
                    report.kept_in_retention += 1
                elif keep(entry):
                    report.kept_high_value.append(entry.id)
                else:
                    self._delete_files(entry)
                    report.purged.append(entry.id)
                if on_progress is not None:
                    on_progress(done, len(archived))
        return report

    def _delete_files(self, entry: MemoryEntry) -> None:
        path = self._paths.get(entry.id) or self.path_for(entry.id, entry.category)
        Path(path).unlink(missing_ok=True)
        (self.embeddings_dir / f"{entry.id}.bin").unlink(missing_ok=True)
        self._forget(entry.id)
        self._append(JournalAction.PURGED, entry, entry.archive_reason)


def _version(entry: MemoryEntry) -> tuple[datetime, datetime]:
    return (entry.updated_at or entry.created_at, entry.last_seen_at)
