"""Saving a fact through save-time dedup: lookup and write under the store's lock, so
two concurrent saves of one fact end as one entry reinforced twice; exactly once per
operation id, so a retried activity neither creates a second entry nor reinforces twice
— even when other saves touched the same entry between the crash and the retry.

The operation id is recorded inside the entry the save changes (`applied_ops`, written
by the same atomic rename as the change itself); a retry asks the store whether the op
was applied, and never infers it from what the target looks like. A created entry needs
no record: its id is derived by the workflow, so a retry finds it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.validation import validate_entry_id
from dreamkeeper.policies.coverage import DEFAULT_VOCABULARY, Vocabulary
from dreamkeeper.policies.dedup import (
    Candidate,
    DedupOutcome,
    content_tokens,
    decide_best,
    near_duplicates,
)
from dreamkeeper.policies.in_flight import save_in_flight
from dreamkeeper.policies.injection import flagged
from dreamkeeper.policies.preferences import replaces_on_conflict
from dreamkeeper.policies.supersede import Sameness, judge
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.contract.feed import JournalAction
from dreamkeeper.stores.longterm.conflicts import note_conflicts
from dreamkeeper.stores.longterm.readings import NO_READINGS, Readings
from dreamkeeper.stores.longterm.records import retired_into
from dreamkeeper.stores.longterm.supersede import link_possible_change, supersede


@dataclass(frozen=True)
class SavedFact:
    outcome: DedupOutcome
    entry_id: str
    replaced: tuple[str, ...] = ()  # entries this fact superseded (an LLM's proposal)
    conflicts: tuple[str, ...] = ()  # current entries it likely changes (left current)
    # Entries an LLM said it replaces that the subject check could not tell apart: left
    # current, linked as possible changes.
    unconfirmed: tuple[str, ...] = ()


_ACTION = {
    DedupOutcome.REINFORCED: JournalAction.REINFORCED,
    DedupOutcome.EXTENDED: JournalAction.EXTENDED,
}


def save_fact(
    store: MemoryStore,
    candidate: Candidate,
    *,
    new_id: str,
    op_id: str,
    exclude: Collection[str] = (),
    touched: Collection[str] = (),
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    now: datetime | None = None,
    candidate_vector: np.ndarray | None = None,
    replaces: Mapping[str, str] | None = None,
    valid_from: datetime | None = None,
    readings: Readings = NO_READINGS,
) -> SavedFact:
    """`touched`: entries this save already reinforced — one save reinforces an entry at
    most once. `candidate_vector`, when given, compares by cosine with entries that have
    a vector and is stored as the new entry's vector if one is created. `replaces`:
    entries an LLM says this fact makes outdated (id → the fingerprint it was shown),
    superseded by a created entry when the store and `policies.supersede` agree; any
    other current entry it likely changes is linked to it as a conflict
    (`stores.longterm.conflicts`). `valid_from`: when a created entry became true.
    `readings` (`stores.longterm.readings`, prepared outside the lock) settle what the
    subject check's vocabulary cannot; one it still cannot tell is linked, not replaced."""
    validate_entry_id(new_id)
    with store.writing():  # one lock hold for lookup + write
        done = store.applied(op_id)
        if done is not None:
            return SavedFact(DedupOutcome(done.action), done.entry_id)
        if store.get(new_id) is not None:
            # A retry after the create: the supersedes are exactly-once by their own ops.
            near = _near(store, candidate, candidate_vector, lambda e: e.id != new_id)
            return _created(store, candidate, near, new_id, op_id, replaces, readings)
        at = now or store.now()
        # Not into an original whose own enrichment is still running: it is about to be
        # retired into its facts, and what this save added would be lost with it.
        near = _near(
            store,
            candidate,
            candidate_vector,
            lambda e: e.id not in exclude and not save_in_flight(e, at) and not flagged(e.metadata),
        )
        match, decision = decide_best(candidate, near, at, vocabulary=vocabulary, touched=touched)
        if decision.outcome is DedupOutcome.CREATED:
            _create(store, candidate, new_id, at, valid_from, candidate_vector)
            return _created(store, candidate, near, new_id, op_id, replaces, readings)
        assert match is not None and decision.updated is not None
        store.put(
            decision.updated, action=_ACTION[decision.outcome], reason=f"save {op_id}", op=op_id
        )
        return SavedFact(decision.outcome, match.id)


def _create(
    store: MemoryStore,
    candidate: Candidate,
    new_id: str,
    at: datetime,
    valid_from: datetime | None,
    vector: np.ndarray | None,
) -> None:
    """The candidate as a new entry, with its vector when the store keeps vectors."""
    created = store.create(
        candidate.content,
        category=candidate.category,
        tags=candidate.tags,
        metadata=dict(candidate.metadata),
        importance=candidate.importance,
        entry_id=new_id,
        now=at,
        valid_from=valid_from,
    )
    if vector is not None and store.embeddings is not None:
        store.write_vector(new_id, vector, created.fingerprint)


def _created(
    store: MemoryStore,
    candidate: Candidate,
    near: list[tuple[MemoryEntry, float, float]],
    new_id: str,
    op_id: str,
    replaces: Mapping[str, str] | None,
    readings: Readings,
) -> SavedFact:
    """A created entry (or one a retry finds created): it supersedes what it replaces,
    links what the check cannot tell and the conflicts it likely has, each exactly once
    by its own op."""
    replaces = _with_conflict(candidate, near, replaces)
    replaced, unconfirmed = _replace(store, candidate, new_id, op_id, replaces, readings)
    return SavedFact(
        DedupOutcome.CREATED,
        new_id,
        replaced,
        tuple(note_conflicts(store, new_id, readings)),
        unconfirmed,
    )


def _with_conflict(
    candidate: Candidate,
    near: list[tuple[MemoryEntry, float, float]],
    replaces: Mapping[str, str] | None,
) -> Mapping[str, str] | None:
    """An inferred preference also replaces its nearest inferred near-duplicate, which
    it neither repeats nor extends (it was created): the newer inference wins
    (`policies.preferences.replaces_on_conflict`)."""
    if not near or not replaces_on_conflict(candidate.category, candidate.source):
        return replaces
    nearest = near[0][0]
    if not replaces_on_conflict(nearest.category, nearest.source):
        return replaces
    return {**(replaces or {}), nearest.id: nearest.fingerprint}


def _replace(
    store: MemoryStore,
    candidate: Candidate,
    new_id: str,
    op_id: str,
    replaces: Mapping[str, str] | None,
    readings: Readings,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Supersede what the LLM said the new fact replaces, each only if it is about the
    same thing (`policies.supersede`) and, checked by the store, still live, current and
    as it was shown; link one the check cannot tell apart as a possible change. Only a
    created entry replaces anything: a fact that repeated or extended an entry is not a
    new value. Returns (replaced, linked)."""
    done, unconfirmed = [], []
    for old_id, shown in sorted((replaces or {}).items()):
        old = store.get(old_id)
        if old is None:
            continue
        if old.superseded_by == new_id:  # a retry: applied before
            done.append(old_id)
            continue
        if old.fingerprint != shown or not old.is_current:
            continue  # changed, gone or replaced since it was shown: nothing to claim
        verdict = judge(
            old,
            candidate.content,
            candidate.category,
            old_reading=readings.get(old.content),
            new_reading=readings.get(candidate.content),
        )
        if verdict.sameness is Sameness.UNKNOWN:
            link_possible_change(store, old_id, new_id)
            unconfirmed.append(old_id)
            continue
        if verdict.sameness is not Sameness.SAME:
            continue
        op = f"{op_id}-replaces-{old_id}"
        if supersede(store, old_id, new_id, op=op, expected_fingerprint=shown).applied:
            done.append(old_id)
    return tuple(done), tuple(unconfirmed)


def _near(
    store: MemoryStore,
    candidate: Candidate,
    candidate_vector: np.ndarray | None,
    eligible: Callable[[MemoryEntry], bool],
) -> list[tuple[MemoryEntry, float, float]]:
    cache: dict[str, frozenset[str]] = {}
    vectors = store.vectors(candidate_vector.size) if candidate_vector is not None else None
    return near_duplicates(
        candidate,
        (e for e in store.entries() if eligible(e)),
        tokens_of=lambda e: cache.setdefault(e.id, content_tokens(e.content)),
        candidate_vector=candidate_vector,
        vector_of=(lambda e: vectors.get(e.id)) if vectors is not None else (lambda e: None),
    )


def _settled(
    store: MemoryStore, original: MemoryEntry, op: str, vocabulary: Vocabulary
) -> SavedFact | None:
    """What dedup_existing already decided for `original` (None: nothing yet): a retry
    finds the absorb recorded and only finishes the retirement; a flagged entry stays on
    its own, unmerged; an archived one was retired already."""
    done = store.applied(op)
    if done is not None:
        store.retire_into(
            original.id,
            [done.entry_id],
            reason=f"merged into {done.entry_id}",
            vocabulary=vocabulary,
        )
        return SavedFact(DedupOutcome(done.action), done.entry_id)
    if flagged(original.metadata):
        return SavedFact(DedupOutcome.CREATED, original.id)
    if original.is_archived:
        into = retired_into(original)
        return (
            SavedFact(DedupOutcome.REINFORCED, into[0])
            if into
            else SavedFact(DedupOutcome.CREATED, original.id)
        )
    return None


def absorb_op(entry_id: str) -> str:
    return f"absorb-{entry_id}"


def dedup_existing(
    store: MemoryStore,
    entry_id: str,
    *,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    now: datetime | None = None,
    candidate_vector: np.ndarray | None = None,
    readings: Readings = NO_READINGS,
) -> SavedFact:
    """Run an already-saved entry through dedup against the others: a near-duplicate
    absorbs it (reinforced or extended, persisted first, the op recorded with it) and
    then it is retired into that entry; otherwise it stays. Exactly once: a retry finds
    the absorb recorded and only finishes the retirement."""
    op = absorb_op(entry_id)
    with store.writing():
        original = store.require(entry_id)
        settled = _settled(store, original, op, vocabulary)
        if settled is not None:
            return settled
        candidate = Candidate(
            original.content,
            original.category,
            tuple(original.tags),
            tuple(original.metadata.items()),
            original.importance_score,
        )
        match, decision = decide_best(
            candidate,
            _near(
                store,
                candidate,
                candidate_vector,
                lambda e: e.id != entry_id and not flagged(e.metadata),
            ),
            now or store.now(),
            vocabulary=vocabulary,
        )
        if decision.outcome is DedupOutcome.CREATED or match is None:
            return SavedFact(
                DedupOutcome.CREATED,
                entry_id,
                conflicts=tuple(note_conflicts(store, entry_id, readings)),
            )
        assert decision.updated is not None
        # Save first, then retire: the copy goes only into a replacement that persisted.
        store.put(
            decision.updated, action=_ACTION[decision.outcome], reason=f"absorbed {entry_id}", op=op
        )
        store.retire_into(
            entry_id, [match.id], reason=f"merged into {match.id}", vocabulary=vocabulary
        )
        return SavedFact(decision.outcome, match.id)
