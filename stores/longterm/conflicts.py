"""Likely conflicts: a fact saved with no word on what it replaces, that probably
changes a current one ("Moved to Denver" beside "lives in Chicago").

Nobody said the old one is outdated, so it is not superseded here: a wrong supersede
hides a true fact, a visible conflict costs a line. Instead both entries are linked —
the newer's `conflictsWith` and the older's `newerVersions` metadata name each other —
so recall keeps the pair together, newer first, each dated (`stores.search.query`), and
the next dream settles it through the checked supersede (`find_conflicts`). Which of the
two is newer is when each became true (`valid_since`), then when it was saved.

Detection is `policies.supersede.likely_conflict`: the same named subject and the same
one-value attribute, another value. The candidates are the current entries a keyword
search for the entity and the attribute's words finds (never an embedding call: this
runs under the writer lock).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.in_flight import save_in_flight
from dreamkeeper.policies.injection import flagged
from dreamkeeper.policies.subject import attribute_words, subject_of
from dreamkeeper.policies.supersede import likely_conflict
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.longterm.records import CONFLICTS_WITH, NEWER_VERSIONS, linked
from dreamkeeper.stores.search.query import search

MAX_LINKS = 8  # per entry and key: a fact changes a few times between two dreams
CANDIDATES = 24  # current entries a save is compared with


def _order(entry: MemoryEntry) -> tuple:
    return (entry.valid_since, entry.created_at, entry.id)


def newer_of(a: MemoryEntry, b: MemoryEntry) -> tuple[MemoryEntry, MemoryEntry]:
    """(older, newer): by when each became true, then when it was saved."""
    return (a, b) if _order(a) <= _order(b) else (b, a)


def _with_link(entry: MemoryEntry, key: str, other: str) -> MemoryEntry:
    ids = linked(entry, key)
    if other in ids:
        return entry
    ids = [*ids, other][-MAX_LINKS:]
    return entry.model_copy(update={"metadata": {**entry.metadata, key: json.dumps(ids)}})


def _link(store: MemoryStore, older: MemoryEntry, newer: MemoryEntry) -> None:
    store.mutate(
        older.id,
        lambda e: _with_link(e, NEWER_VERSIONS, newer.id),
        action=JournalAction.UPDATED,
        reason=f"likely changed by {newer.id} (conflict, not yet settled)",
    )
    store.mutate(
        newer.id,
        lambda e: _with_link(e, CONFLICTS_WITH, older.id),
        action=JournalAction.UPDATED,
        reason=f"likely changes {older.id} (conflict, not yet settled)",
    )


def _candidates(store: MemoryStore, entry: MemoryEntry) -> Iterable[MemoryEntry]:
    subject = subject_of(entry.content)
    if not (subject.known and subject.single and subject.entity is not None):
        return []
    words = [*subject.entity.words, *attribute_words(subject.attribute or "")]
    if subject.entity.relation:
        words.append(subject.entity.relation)
    hits = search(store, " ".join(words), limit=CANDIDATES, keyword_only=True)
    return [h.entry for h in hits]


def note_conflicts(store: MemoryStore, entry_id: str) -> list[str]:
    """Link `entry_id` with each current entry it likely conflicts with (see the module);
    returns their ids. Idempotent: a retry finds the links made and adds none."""
    with store.writing():
        entry = store.get(entry_id)
        if entry is None or not entry.is_current or flagged(entry.metadata):
            return []
        now = store.now()
        found = []
        for other in _candidates(store, entry):
            if (
                other.id == entry.id
                or not other.is_current
                or flagged(other.metadata)
                or save_in_flight(other, now)
            ):
                continue
            older, newer = newer_of(other, entry)
            if likely_conflict(older, newer.content, newer.category):
                _link(store, store.require(older.id), store.require(newer.id))
                found.append(other.id)
        return found


@dataclass(frozen=True)
class OpenConflict:
    """A linked pair both still current: what a dream may settle."""

    older: MemoryEntry
    newer: MemoryEntry


def open_conflicts(store: MemoryStore, *, limit: int = 500) -> list[OpenConflict]:
    """Every linked pair whose entries are both current and still conflict (re-checked:
    either may have been edited since), oldest change first."""
    pairs: dict[tuple[str, str], OpenConflict] = {}
    for entry in store.entries():
        if not entry.is_current:
            continue
        for older_id in linked(entry, CONFLICTS_WITH):
            older = store.get(older_id)
            if older is None or not older.is_current or (older.id, entry.id) in pairs:
                continue
            first, second = newer_of(older, entry)
            if likely_conflict(first, second.content, second.category):
                pairs[(first.id, second.id)] = OpenConflict(first, second)
    ordered = sorted(pairs.values(), key=lambda p: (_order(p.newer), p.older.id))
    return ordered[:limit]
