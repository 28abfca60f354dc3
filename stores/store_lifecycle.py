"""An entry's end of life: archive, retirement into replacements, restore, purge.
Functions of `FileMemoryStore`, bound as its methods there."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from dreamkeeper.core.errors import InvalidInput, MemoryNotFound, StoreConflict
from dreamkeeper.core.models import MemoryEntry, as_utc
from dreamkeeper.core.validation import (
    validate_entry_id,
)
from dreamkeeper.policies.coverage import DEFAULT_VOCABULARY, Source, Vocabulary
from dreamkeeper.policies.coverage import find_missing_specifics as _missing
from dreamkeeper.stores.entry_files import (
    EMBEDDINGS_DIR,
    MEMORY,
)
from dreamkeeper.stores.journal import JournalAction
from dreamkeeper.stores.store_records import (
    PurgeReport,
    Retirement,
    reading,
    retired_into,
)

if TYPE_CHECKING:
    from dreamkeeper.stores.memory_store import FileMemoryStore


def archive(
    store: FileMemoryStore, entry_id: str, reason: str, *, now: datetime | None = None
) -> MemoryEntry:
    """Hide an entry from search, keeping it on disk. Archiving twice is a no-op and
    the first reason is kept."""
    if not reason or not reason.strip():
        raise InvalidInput("an archive needs a reason")
    store.require(entry_id)  # reject unknown ids before taking (creating) the lock
    with store.writing():
        current = store._fresh(entry_id)
        if current is None:
            raise MemoryNotFound(f"no memory with id {entry_id} for agent {store.agent_id!r}")
        if current.is_archived:
            return current
        at = as_utc(now) if now is not None else store.now()
        archived = current.model_copy(update={"archived_at": at, "archive_reason": reason})
        return store._write(archived, current, JournalAction.ARCHIVED, reason)


def retire_into(
    store: FileMemoryStore,
    entry_id: str,
    into: Iterable[str],
    *,
    reason: str,
    expected_fingerprint: str | None = None,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    now: datetime | None = None,
    check: Callable[[MemoryEntry, list[MemoryEntry]], str | None] | None = None,
) -> Retirement:
    """Archive `entry_id` *into* its replacements — one store operation, under the
    lock — only if every replacement is live now and together they cover the entry's
    specifics (and `check`, a stricter rule, has no objection); otherwise change
    nothing and say why. Retiring again into the same replacements is a no-op."""
    targets = list(dict.fromkeys(validate_entry_id(i) for i in into))
    validate_entry_id(entry_id)
    if not targets or entry_id in targets:
        raise InvalidInput("an entry retires into one or more other entries")
    with store.writing():
        current = store._fresh(entry_id)
        if current is None:
            return Retirement(False, f"{entry_id} does not exist")
        if current.is_archived:
            if sorted(retired_into(current)) == sorted(targets):
                return Retirement(True, "already retired into them")
            return Retirement(False, f"{entry_id} is already archived")
        if expected_fingerprint is not None and current.fingerprint != expected_fingerprint:
            return Retirement(False, f"{entry_id} changed since it was shown")
        replacements = []
        for target in targets:
            replacement = store._fresh(target)
            if replacement is None or replacement.is_archived:
                return Retirement(False, f"replacement {target} is not live")
            replacements.append(replacement)
        missing = _missing(
            [Source(current.content, current.category)],
            "\n\n".join(r.content for r in replacements),
            vocabulary,
        )
        if missing:
            return Retirement(
                False, f"the replacements miss {len(missing)} specific(s)", tuple(missing)
            )
        objection = check(current, replacements) if check is not None else None
        if objection:
            return Retirement(False, objection)
        at = as_utc(now) if now is not None else store.now()
        archived = current.model_copy(
            update={
                "archived_at": at,
                "archive_reason": reason,
                "retired_into": sorted(targets),
            }
        )
        store._write(archived, current, JournalAction.ARCHIVED, reason)
        return Retirement(True)


def restore(store: FileMemoryStore, entry_id: str, *, force: bool = False) -> MemoryEntry:
    """Bring an archived entry back. An entry archived into others that are still
    live is refused (they carry its content and reinforcements: restoring would count
    them twice) unless `force`."""
    store.require(entry_id)  # reject unknown ids before taking (creating) the lock
    with store.writing():
        current = store._fresh(entry_id)
        if current is None:
            raise MemoryNotFound(f"no memory with id {entry_id} for agent {store.agent_id!r}")
        if not current.is_archived:
            return current
        if not force:
            _refuse_restore(current, store._fresh)
        restored = current.model_copy(
            update={"archived_at": None, "archive_reason": None, "retired_into": []}
        )
        return store._write(restored, current, JournalAction.RESTORED, "restored")


def check_restorable(store: FileMemoryStore, entry_id: str, *, force: bool = False) -> None:
    """Raise what `restore` would refuse, writing nothing: a client asks before it starts
    a restore workflow, so a refused restore leaves no failed run behind."""
    entry = store.require(entry_id)
    if entry.is_archived and not force:
        _refuse_restore(entry, store.get)


def _refuse_restore(entry: MemoryEntry, lookup: Callable[[str], MemoryEntry | None]) -> None:
    live = [i for i in retired_into(entry) if (e := lookup(i)) is not None and not e.is_archived]
    if live:
        raise StoreConflict(
            f"memory {entry.id} was archived into {', '.join(live)}, which still "
            "carries its content and reinforcements: archive that first (then "
            "restore this), or restore with force to keep both"
        )


def purge(
    store: FileMemoryStore,
    retention: timedelta,
    *,
    keep: Callable[[MemoryEntry], bool] = lambda _: False,
    now: datetime | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    dry_run: bool = False,
    only: Callable[[MemoryEntry], bool] | None = None,
) -> PurgeReport:
    """Hard-delete entries archived before `now - retention`, except those `keep`
    protects. A retention of zero or less keeps everything. `dry_run`: report what
    would go, delete nothing; `only`: consider just the entries it accepts."""
    report = PurgeReport()
    if retention <= timedelta(0):
        return report
    with store.writing() if not dry_run else reading(store):
        cutoff = (as_utc(now) if now is not None else store.now()) - retention
        archived = [
            e for e in store._entries.values() if e.is_archived and (only is None or only(e))
        ]
        report.considered = len(archived)
        doomed = []
        for entry in archived:
            assert entry.archived_at is not None
            if entry.archived_at >= cutoff:
                report.kept_in_retention += 1
            elif keep(entry):
                report.kept_high_value.append(entry.id)
            else:
                doomed.append(entry)
        if not dry_run:
            store._delete(doomed, on_progress)
        report.purged = [e.id for e in doomed]
    return report


def delete(
    store: FileMemoryStore,
    doomed: list[MemoryEntry],
    on_progress: Callable[[int, int], None] | None,
) -> None:
    """Journal the purges first, then remove the files: a crash in between leaves
    pending purges that the next writer repairs (the files stand; purge runs again)."""
    records = []
    for entry in doomed:
        parts = store._parts[entry.id]
        records.append(
            store._record(
                JournalAction.PURGED,
                entry.id,
                parts,
                entry,
                reason=entry.archive_reason,
                rev=entry.revision + 1,
            )
        )
        store._pending[entry.id] = (entry.revision + 1, parts)
    store._append(records)
    for done, entry in enumerate(doomed, start=1):
        store.files.unlink(store._parts[entry.id])
        store.files.unlink((MEMORY, EMBEDDINGS_DIR, f"{entry.id}.bin"))
        store._forget(entry.id)
        store._pending.pop(entry.id, None)
        if on_progress is not None:
            on_progress(done, len(doomed))
