"""`StoreOperations`: the long-term store, written once for every backend.

Everything a `MemoryStore` does above its storage — validation, compare-and-set, the
op-id bookkeeping, archive, retire-into's live and coverage check, fold, restore's
refusal, purge's selection, erase's and write_vector's checks, the bulk path's
per-entry rules — is here, in terms of the steps the backend's storage object takes
(`stores.longterm.storage.EntrySteps`: the writer lock, catching up, the entry as stored
now, the compare-and-set write, the bulk insert, the purge's delete). What the contract
asks that only the storage can answer (problems, the vector index, reload, the snapshot,
the feed) is passed through to it.

The shape, and why: composition, not inherited private state. The storage is a
separate object (`FileEntryStorage`, `PostgresEntryStorage`) that `StoreOperations`
receives at construction and calls through a Protocol, with the one `EntryState` the
storage keeps current from its feed. Nothing here is a hook for a subclass to override
and no field is one for a subclass to fill in, so the Protocol is the whole seam. Each
backend's `MemoryStore` (`FileMemoryStore`, `PostgresMemoryStore`) is this class built
over its storage, plus the few calls only that backend has (`compact_journal`,
`compact_feed`, its paths or database): it subclasses this class only to be the public
store, so the operations are the store's own methods — not a wall of forwarding methods
written again in each backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from dreamkeeper.core.errors import Conflict, InvalidInput, NotFound
from dreamkeeper.core.models import MAX_APPLIED_OPS, MemoryEntry, as_utc
from dreamkeeper.core.validation import (
    new_entry_id,
    validate_category,
    validate_content,
    validate_entry_id,
    validate_importance,
    validate_metadata,
    validate_tags,
)
from dreamkeeper.policies.coverage import DEFAULT_VOCABULARY, Source, Vocabulary
from dreamkeeper.policies.coverage import find_missing_specifics as _missing
from dreamkeeper.policies.merge import Fold
from dreamkeeper.stores.contract import IntentLog
from dreamkeeper.stores.contract.feed import JournalAction, JournalRecord
from dreamkeeper.stores.contract.records import (
    AppliedOp,
    BulkReport,
    NewEntry,
    PurgeReport,
    Retirement,
    StoredVector,
)
from dreamkeeper.stores.longterm.records import (
    checked_entry,
    checked_valid_from,
    imported_entry,
    new_entry,
    retired_into,
    screened,
)
from dreamkeeper.stores.longterm.storage import ERASED, EntryStorage, EntryWrite
from dreamkeeper.stores.search.bm25 import BM25Index
from dreamkeeper.stores.vectors.vectors import (
    VectorIndex,
    decode_any_model,
    decode_vector,
    encode_vector,
)

BULK_CHUNK = 1_000  # entries per bulk batch (a journal batch, or a transaction)


class StoreOperations:
    """A long-term store over a backend's storage (see the module docstring)."""

    def __init__(self, storage: EntryStorage, *, clock: Callable[[], datetime]) -> None:
        self.storage = storage
        self.state = storage.state
        self.agent_id = storage.agent_id
        self.embeddings = storage.embeddings
        self.documents = storage.documents
        self._clock = clock

    def now(self) -> datetime:
        return as_utc(self._clock())

    def writing(self) -> AbstractContextManager[None]:
        """The agent's writer lock (re-entrant): for a lookup and a write that must see
        no other writer in between. The outermost hold catches up."""
        return self.storage.writing()

    # -- what the storage answers ------------------------------------------------------

    @property
    def feed_offset(self) -> int:
        """How far this instance has read its change feed (journal bytes, or a feed seq)."""
        return self.state.offset

    @property
    def loaded(self) -> bool:
        """Whether anything has been read yet (a store opens on first use)."""
        return self.storage.loaded

    @property
    def opened_from_snapshot(self) -> bool:
        return self.storage.opened_from_snapshot

    def problems(self) -> dict[Path, str]:
        return self.storage.problems()

    def vectors(self, dim: int) -> VectorIndex | None:
        """The in-memory vectors of `dim` components (current with the feed), or None
        with no embedding model configured."""
        if self.state.vectors is None:
            return None
        self.storage.catch_up()
        return self.storage.vector_index(dim)

    def unembedded(self) -> int:
        return self.storage.unembedded()

    def reload(self) -> None:
        self.storage.reload()

    def save_snapshot(self) -> bool:
        return self.storage.save_snapshot()

    def changes(self) -> list[JournalRecord]:
        return self.storage.changes()

    # -- reads -------------------------------------------------------------------------

    def get(self, entry_id: str) -> MemoryEntry | None:
        """The entry, live or archived, or None."""
        validate_entry_id(entry_id)
        self.storage.catch_up()
        return self.state.entries.get(entry_id)

    def cached(self, entry_id: str) -> MemoryEntry | None:
        """The entry as last loaded, without checking for other processes' writes: for a
        caller that has just refreshed (a search walking its hits)."""
        return self.state.entries.get(entry_id)

    def require(self, entry_id: str) -> MemoryEntry:
        entry = self.get(entry_id)
        if entry is None:
            raise NotFound(f"no memory with id {entry_id} for agent {self.agent_id!r}")
        return entry

    def entries(self, *, include_archived: bool = False) -> list[MemoryEntry]:
        self.storage.catch_up()
        return [e for e in self.state.entries.values() if include_archived or not e.is_archived]

    def archived(self) -> list[MemoryEntry]:
        self.storage.catch_up()
        return sorted(
            (e for e in self.state.entries.values() if e.is_archived),
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

    def tags(self) -> list[str]:
        """The distinct tags of live entries, case-insensitively (as the tag filter
        matches), sorted; of two spellings of one tag the first in sort order."""
        spellings: dict[str, str] = {}
        for entry in self.entries():
            for tag in entry.tags:
                key = tag.lower()
                spellings[key] = min(spellings.get(key, tag), tag)
        return [spellings[key] for key in sorted(spellings)]

    def applied(self, op: str) -> AppliedOp | None:
        """The write that applied operation `op`, or None. Ask it under `writing()` so
        no other writer can apply it in between."""
        self.storage.catch_up()
        return self.state.applied_ops().get(op)

    def index(self) -> BM25Index:
        """The live search index (kept current by every read)."""
        self.storage.catch_up()
        return self.state.index

    def categories_by_group(self) -> dict[int, str | None]:
        return self.state.categories_by_group()

    def __len__(self) -> int:
        return len(self.entries())

    def stored_vector(
        self, entry: MemoryEntry, model_key: bytes | None = None, dim: int | None = None
    ) -> StoredVector | None:
        """The entry's stored vector if it was made from its current content (by
        `model_key` and of `dim` components, when given), or None."""
        data = self.storage.vector_bytes(entry.id)
        if data is None:
            return None
        if model_key is not None:
            vector = decode_vector(data, entry.fingerprint, model_key, dim)
            return None if vector is None else StoredVector(model_key, vector)
        found = decode_any_model(data, entry.fingerprint)
        return None if found is None else StoredVector(*found)

    def approx_bytes(self) -> int:
        """Roughly what this store holds in memory (for the worker's store cache): per
        entry its index share and its entry (parsed or still JSON), plus the vectors."""
        if not self.storage.loaded:
            return 4_096
        entries = self.state.entries
        # Per entry its index share (~600 B at 100k, measured), per parsed entry ~2 KB
        # more; an entry still a snapshot row costs its row (in the share), or its JSON
        # (compressed) when the snapshot's entries are held in memory.
        parsed, held = entries.parsed, entries.held_bytes
        tracker = self.state.vectors
        vectors = tracker.current if tracker is not None else None
        matrix = 0 if vectors is None else len(vectors.row_keys) * vectors.dim * 4
        return 4_096 + 600 * len(entries) + 2_000 * parsed + held + matrix

    # -- writes ------------------------------------------------------------------------

    def _next_revision(
        self,
        entry: MemoryEntry,
        base: MemoryEntry | None,
        action: JournalAction,
        op: str | None,
        op_detail: str,
    ) -> MemoryEntry:
        """`entry` as the revision after `base` (None: a new entry), `op` recorded in it."""
        applied = dict(entry.applied_ops)
        if op is not None:
            applied.pop(op, None)
            applied[op] = f"{action}:{op_detail}" if op_detail else str(action)
            while len(applied) > MAX_APPLIED_OPS:
                del applied[next(iter(applied))]
        return entry.model_copy(
            update={
                "revision": (base.revision if base else 0) + 1,
                "applied_ops": applied,
            }
        )

    def _write(
        self,
        entry: MemoryEntry,
        base: MemoryEntry | None,
        action: JournalAction,
        reason: str | None,
        op: str | None = None,
        op_detail: str = "",
    ) -> MemoryEntry:
        """Store `entry` as the revision after `base` (None: a new entry), `op` in it."""
        written = self._next_revision(entry, base, action, op, op_detail)
        return self.storage.write(EntryWrite(written, base, action, reason, op))

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
        valid_from: datetime | None = None,
    ) -> MemoryEntry:
        """Create an entry. With an explicit id the call is idempotent: an existing entry
        with the same content is returned unchanged; different content is a conflict.
        `valid_from`: when the fact became true, if not when it is saved (no later than
        a year past the store's clock)."""
        content = validate_content(content)
        category = validate_category(category)
        tag_list = validate_tags(tags)
        metadata, importance = screened(
            content, validate_metadata(metadata), validate_importance(importance)
        )
        entry_id = validate_entry_id(entry_id) if entry_id is not None else None
        with self.writing():
            if entry_id is None:
                entry_id = new_entry_id()
                while entry_id in self.state.entries:
                    entry_id = new_entry_id()
            existing = self.storage.fresh(entry_id)
            if existing is not None:
                if existing.content == content:
                    return existing
                raise Conflict(f"memory {entry_id} already exists with other content")
            unreadable = self.storage.unreadable(entry_id, category)
            if unreadable is not None:
                raise Conflict(f"{unreadable} exists but could not be read; not overwriting it")
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
                valid_from=checked_valid_from(valid_from, max(at, self.now())),
            )
            return self._write(entry, None, JournalAction.CREATED, None)

    # -- the bulk write path -----------------------------------------------------------

    def create_many(
        self, items: Iterable[NewEntry], *, now: datetime | None = None
    ) -> list[MemoryEntry]:
        """Create many entries under one lock hold, in chunks (one journal batch or one
        transaction each), with `create`'s guarantees per entry: each is atomic, and a
        crash anywhere leaves every entry written or not. Every item is validated before
        anything is written; an explicit id is idempotent as in `create`. An item's own
        `created_at` (a note from years ago) and `valid_from` are checked as `create`
        checks them: well-formed, and not in the future."""
        clock = self.now()
        at = as_utc(now) if now is not None else clock
        items = list(items)
        wanted = [new_entry(item, at, clock=max(at, clock)) for item in items]
        fresh_ids = {e.id for e, item in zip(wanted, items, strict=True) if item.entry_id is None}
        report = self._bulk_write(wanted, reason=None, redraw=fresh_ids, strict=True)
        return report.entries

    def import_entries(self, entries: Iterable[MemoryEntry]) -> BulkReport:
        """Bring whole entries in as they are — ids, times, counts, archive state — on
        `create_many`'s bulk path: idempotent by id (an entry already here with the same
        content is left as it is), an id here with other content is a conflict, reported
        and left alone. Every entry is validated before anything is written, its times
        too (none in the future)."""
        clock = self.now()
        wanted = [imported_entry(entry, clock=clock) for entry in entries]
        return self._bulk_write(wanted, reason="imported", redraw=set(), strict=False)

    def _fresh_many(self, entry_ids: list[str]) -> dict[str, MemoryEntry]:
        """Under the lock: the entries as stored now, of those that exist."""
        return {i: e for i in entry_ids if (e := self.storage.fresh(i)) is not None}

    def _bulk_write(
        self,
        wanted: list[MemoryEntry],
        *,
        reason: str | None,
        redraw: set[str],
        strict: bool,
    ) -> BulkReport:
        """One lock hold; per chunk one `insert_batch`. `redraw`: ids the store chose,
        drawn again if taken. `strict`: a conflict raises."""
        report = BulkReport()
        with self.writing():
            taken: set[str] = set()
            for start in range(0, len(wanted), BULK_CHUNK):
                chunk: list[MemoryEntry] = []
                for entry in wanted[start : start + BULK_CHUNK]:
                    if entry.id in redraw:
                        while entry.id in self.state.entries or entry.id in taken:
                            entry = entry.model_copy(update={"id": new_entry_id()})
                    if entry.id in taken:
                        raise Conflict(f"memory {entry.id} is given twice")
                    taken.add(entry.id)
                    chunk.append(entry)
                stored = self._fresh_many([e.id for e in chunk])
                created: list[MemoryEntry] = []
                for entry in chunk:
                    existing = stored.get(entry.id)
                    if existing is not None:
                        if existing.content == entry.content:
                            report.entries.append(existing)
                            report.unchanged.append(existing.id)
                        elif strict:
                            raise Conflict(f"memory {entry.id} already exists with other content")
                        else:
                            report.conflicts.append(entry.id)
                        continue
                    written = entry.model_copy(update={"revision": 1})
                    created.append(written)
                    report.entries.append(written)
                    report.created.append(written.id)
                if created:
                    self.storage.insert_batch(created, reason)
        return report

    def put(
        self,
        entry: MemoryEntry,
        *,
        action: JournalAction,
        reason: str | None = None,
        op: str | None = None,
        op_detail: str = "",
    ) -> MemoryEntry:
        """Write a whole entry (validated), computed by the caller from the revision it
        carries: if the stored entry moved past that revision since, the write is refused.
        `op` (with `op_detail`) is recorded in the entry, for `applied()`."""
        entry = checked_entry(entry)
        with self.writing():
            current = self.storage.fresh(entry.id)
            if current is None:
                if entry.revision != 0:
                    raise Conflict(f"memory {entry.id} no longer exists; not recreating it")
                unreadable = self.storage.unreadable(entry.id, entry.category)
                if unreadable is not None:
                    raise Conflict(f"{unreadable} exists but could not be read; not overwriting")
            elif entry.revision != current.revision:
                raise Conflict(
                    f"memory {entry.id} changed since it was read (revision {entry.revision}, "
                    f"now {current.revision}); not overwriting newer state"
                )
            elif current == entry:
                return current
            return self._write(entry, current, action, reason, op, op_detail)

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
        op: str | None = None,
    ) -> MemoryEntry:
        """Read-modify-write under the lock: `change` sees the entry as stored now,
        including every other process's writes, and returns the new one."""
        self.require(entry_id)  # reject unknown ids before taking (creating) the lock
        with self.writing():
            current = self.storage.fresh(entry_id)
            if current is None:
                raise NotFound(f"no memory with id {entry_id} for agent {self.agent_id!r}")
            updated = change(current)
            if updated.id != current.id:
                raise Conflict("a mutation cannot change an entry's id")
            if updated == current:
                return current
            return self.put(
                updated.model_copy(update={"revision": current.revision}),
                action=action,
                reason=reason,
                op=op,
            )

    def write_vector(self, entry_id: str, vector: np.ndarray, fingerprint: str) -> bool:
        """Store the vector made from `fingerprint`'s content; False (nothing written) when
        the entry is gone or its content changed since."""
        vectors = self.state.vectors
        if vectors is None:
            raise Conflict("no embedding model configured for this store")
        with self.writing():
            entry = self.storage.fresh(entry_id)
            if entry is None or entry.fingerprint != fingerprint:
                return False
            data = encode_vector(vector, fingerprint, vectors.model_key)
            return self.storage.store_vector(entry, data)

    def update_importance(self, entry_id: str, importance: float) -> MemoryEntry:
        importance = validate_importance(importance)
        return self.update(
            entry_id,
            importance_score=importance,
            updated_at=self.now(),
            reason=f"importance set to {importance:.2f}",
        )

    # -- an entry's end of life: archive, retirement, restore, purge -----------------

    def archive(self, entry_id: str, reason: str, *, now: datetime | None = None) -> MemoryEntry:
        """Hide an entry from search, keeping it. Archiving twice is a no-op and the
        first reason is kept."""
        if not reason or not reason.strip():
            raise InvalidInput("an archive needs a reason")
        self.require(entry_id)  # reject unknown ids before taking (creating) the lock
        with self.writing():
            current = self.storage.fresh(entry_id)
            if current is None:
                raise NotFound(f"no memory with id {entry_id} for agent {self.agent_id!r}")
            if current.is_archived:
                return current
            at = as_utc(now) if now is not None else self.now()
            archived = current.model_copy(update={"archived_at": at, "archive_reason": reason})
            return self._write(archived, current, JournalAction.ARCHIVED, reason)

    def archive_if_unchanged(
        self,
        entry_id: str,
        fingerprint: str,
        reason: str,
        *,
        ledger: IntentLog,
        now: datetime | None = None,
    ) -> bool:
        """Archive the entry unless it changed since it was shown (`fingerprint`), noting
        the intent in `ledger` first. True when it is archived for this reason now (a
        retry finds it already done)."""
        with self.writing():
            entry = self.get(entry_id)
            if entry is None:
                return False
            if entry.is_archived:
                return entry.archive_reason == reason
            if entry.fingerprint != fingerprint:
                return False
            ledger.note("prune", [(entry_id, entry)])
            self.archive(entry_id, reason, now=now)
            return True

    def retire_into(
        self,
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
        with self.writing():
            current = self.storage.fresh(entry_id)
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
                replacement = self.storage.fresh(target)
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
            at = as_utc(now) if now is not None else self.now()
            archived = current.model_copy(
                update={
                    "archived_at": at,
                    "archive_reason": reason,
                    "retired_into": sorted(targets),
                }
            )
            self._write(archived, current, JournalAction.ARCHIVED, reason)
            return Retirement(True)

    def fold(
        self,
        fold: Fold,
        *,
        op: str,
        reason: str,
        ledger: IntentLog,
        now: datetime | None = None,
    ) -> list[str]:
        """Save the survivor with the group's arithmetic — once: `op` and the copies it
        summed are recorded in it — then retire exactly those copies into it (`reason`).
        Each write's intent goes to `ledger` first. Returns the copies retired now or by
        an earlier attempt of the same op."""
        with self.writing():
            done = self.applied(op)
            if done is not None:
                copies = [c for c in done.detail.split(",") if c]
            else:
                copies = list(fold.copies)
                ledger.note("fold", [(fold.survivor.id, self.get(fold.survivor.id))])
                self.put(
                    fold.survivor,
                    action=JournalAction.MERGED,
                    op=op,
                    op_detail=",".join(copies),
                    reason=f"folded {len(copies)} exact duplicate(s)",
                )
            ledger.note(
                "fold", [(c, e) for c in copies if (e := self.get(c)) and not e.is_archived]
            )
            return [
                copy
                for copy in copies
                if self.retire_into(copy, [fold.survivor.id], reason=reason, now=now).retired
            ]

    def restore(self, entry_id: str, *, force: bool = False) -> MemoryEntry:
        """Bring an archived entry back. An entry archived into others that are still
        live is refused (they carry its content and reinforcements: restoring would count
        them twice) unless `force`."""
        self.require(entry_id)  # reject unknown ids before taking (creating) the lock
        with self.writing():
            current = self.storage.fresh(entry_id)
            if current is None:
                raise NotFound(f"no memory with id {entry_id} for agent {self.agent_id!r}")
            if not current.is_archived:
                return current
            if not force:
                _refuse_restore(current, self.storage.fresh)
            restored = current.model_copy(
                update={"archived_at": None, "archive_reason": None, "retired_into": []}
            )
            return self._write(restored, current, JournalAction.RESTORED, "restored")

    def check_restorable(self, entry_id: str, *, force: bool = False) -> None:
        """Raise what `restore` would refuse, writing nothing: a client asks before it
        starts a restore workflow, so a refused restore leaves no failed run behind."""
        entry = self.require(entry_id)
        if entry.is_archived and not force:
            _refuse_restore(entry, self.get)

    def erase(self, entry_ids: Iterable[str], *, reason: str = ERASED) -> list[str]:
        """Hard-delete entries now, live or archived, with their vectors: the one deletion
        outside purge's retention, for a person's request to be forgotten
        (`stores.forget`). The storage records ids and `reason`, never content, drops
        the caches that quote entries and builds its index again, so no term of the
        erased text stays in its vocabulary. Returns the ids erased now."""
        ids = list(dict.fromkeys(validate_entry_id(i) for i in entry_ids))
        with self.writing():
            doomed = self._fresh_many(ids)
            self.storage.erase(list(doomed.values()), reason)
        return list(doomed)

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """A dry run's view: caught up with the feed, no writer lock taken."""
        self.storage.catch_up()
        yield

    def purge(
        self,
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
        with self.writing() if not dry_run else self._reading():
            cutoff = (as_utc(now) if now is not None else self.now()) - retention
            archived = [
                e
                for e in self.state.entries.values()
                if e.is_archived and (only is None or only(e))
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
                self.storage.delete(doomed, on_progress)
            report.purged = [e.id for e in doomed]
        return report


def _refuse_restore(entry: MemoryEntry, lookup: Callable[[str], MemoryEntry | None]) -> None:
    live = [i for i in retired_into(entry) if (e := lookup(i)) is not None and not e.is_archived]
    if live:
        raise Conflict(
            f"memory {entry.id} was archived into {', '.join(live)}, which still "
            "carries its content and reinforcements: archive that first (then "
            "restore this), or restore with force to keep both"
        )
