"""Likely conflicts: a fact saved with no word on what it replaces, that probably
changes a current one ("Moved to Denver" beside "lives in Chicago"); and possible
changes: a save named an entry in `replaces` that the subject check could not tell
apart from another subject.

Nobody said the old one is outdated, so a likely conflict is not superseded here: a
wrong supersede hides a true fact, a visible conflict costs a line. Instead both entries
are linked — the newer's `conflictsWith` and the older's `newerVersions` metadata name
each other — so recall keeps the pair together, newer first, each dated
(`stores.search.query`), and the next dream settles what the vocabulary confirms through
the checked supersede (`open_conflicts`). Which of the two is newer is when each became
true (`valid_since`), then when it was saved.

Detection is `policies.supersede.likely_conflict`: the same subject (one entity, one
one-value attribute) and another value. The attribute is the vocabulary's or, where it
cannot tell, a reading's (`stores.longterm.readings`: an embedding model's answer to
"which attribute's question does this fact answer?"). The candidates are the current
entries a keyword search for the entity (and the attribute's words, when the vocabulary
names it) finds — searched again under the writer lock, where the readings come only from
what the caller prepared (`prepare_readings`) and no model is called.

A possible change (`MAY_REPLACE` on the newer, `MAY_BE_REPLACED_BY` on the older,
`stores.longterm.supersede.link_possible_change`) is a claim the check could not
confirm: both stay current, recall dates them and says which may replace which, and puts
the newer first only for a question about the pair's own subject
(`policies.supersede.newer_answers`) — a wrong link must not put another subject's fact
above the one asked for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.in_flight import save_in_flight
from dreamkeeper.policies.injection import flagged
from dreamkeeper.policies.subject import attribute_words, by_name, subject_of
from dreamkeeper.policies.supersede import likely_conflict
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.longterm.readings import NO_READINGS, Readings, prepare
from dreamkeeper.stores.longterm.records import (
    CONFLICTS_WITH,
    NEWER_VERSIONS,
    linked,
    with_link,
)
from dreamkeeper.stores.search.query import search

CANDIDATES = 24  # current entries a save is compared with


def _order(entry: MemoryEntry) -> tuple:
    return (entry.valid_since, entry.created_at, entry.id)


def newer_of(a: MemoryEntry, b: MemoryEntry) -> tuple[MemoryEntry, MemoryEntry]:
    """(older, newer): by when each became true, then when it was saved."""
    return (a, b) if _order(a) <= _order(b) else (b, a)


def _link(
    store: MemoryStore,
    older: MemoryEntry,
    newer: MemoryEntry,
    keys: tuple[str, str] = (NEWER_VERSIONS, CONFLICTS_WITH),
    what: str = "conflict, not yet settled",
) -> None:
    on_older, on_newer = keys
    store.mutate(
        older.id,
        lambda e: with_link(e, on_older, newer.id),
        action=JournalAction.UPDATED,
        reason=f"likely changed by {newer.id} ({what})",
    )
    store.mutate(
        newer.id,
        lambda e: with_link(e, on_newer, older.id),
        action=JournalAction.UPDATED,
        reason=f"likely changes {older.id} ({what})",
    )


def _candidates(store: MemoryStore, content: str) -> list[MemoryEntry]:
    """The current entries a fact may change: about its entity, and, when the vocabulary
    names its attribute, about that (a many-valued one changes nothing)."""
    subject = subject_of(content)
    if subject.entity is None:
        return []
    words = list(subject.entity.words)
    if subject.entity.relation:
        words.append(subject.entity.relation)
    if subject.known:
        attribute = by_name(subject.attribute or "")
        if attribute is None or not attribute.single:
            return []
        words += attribute_words(attribute.name)
    elif store.embeddings is None:
        return []  # nothing could name its attribute
    hits = search(store, " ".join(words), limit=CANDIDATES, keyword_only=True)
    return [h.entry for h in hits]


def prepare_readings(
    store: MemoryStore, content: str, others: Iterable[str] = (), *, conflicts: bool = True
) -> Readings:
    """The readings a save of `content` will need under the lock: its own, those of the
    entries named in `others` (its `replaces`) and, with `conflicts`, of its likely
    conflicts' candidates. Calls the model (none without one): never under the lock."""
    if store.embeddings is None:
        return NO_READINGS
    texts = [content]
    texts += [e.content for i in others if (e := store.get(i)) is not None]
    if conflicts:
        texts += [e.content for e in _candidates(store, content)]
    return prepare(store.embeddings, texts)


def note_conflicts(
    store: MemoryStore, entry_id: str, readings: Readings = NO_READINGS
) -> list[str]:
    """Link `entry_id` with each current entry it likely conflicts with (see the module);
    returns their ids. Idempotent: a retry finds the links made and adds none."""
    with store.writing():
        entry = store.get(entry_id)
        if entry is None or not entry.is_current or flagged(entry.metadata):
            return []
        now = store.now()
        found = []
        for other in _candidates(store, entry.content):
            if (
                other.id == entry.id
                or not other.is_current
                or flagged(other.metadata)
                or save_in_flight(other, now)
            ):
                continue
            older, newer = newer_of(other, entry)
            if likely_conflict(
                older,
                newer.content,
                newer.category,
                old_reading=readings.get(older.content),
                new_reading=readings.get(newer.content),
                strict=False,
            ):
                _link(store, store.require(older.id), store.require(newer.id))
                found.append(other.id)
        return found


@dataclass(frozen=True)
class OpenConflict:
    """A linked pair both still current: what a dream may settle."""

    older: MemoryEntry
    newer: MemoryEntry


def open_conflicts(store: MemoryStore, *, limit: int = 500) -> list[OpenConflict]:
    """Every linked pair whose entries are both current and still conflict by the
    vocabulary alone (re-checked: either may have been edited since; a pair a reading
    linked waits for an agent or an LLM), oldest change first."""
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
