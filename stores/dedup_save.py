"""Saving a fact through save-time dedup: lookup and write under the store's lock, so
two concurrent saves of one fact end as one entry reinforced twice; idempotent per
operation id, so a retried activity neither creates a second entry nor reinforces twice.

The operation ledger (`ops/{op_id}.json`) is written before the entry and records the
target's state before and after: a retry after a crash finds the target either still as
it was (apply again) or already as intended (done).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from dreamkeeper.policies.coverage import DEFAULT_VOCABULARY, Vocabulary
from dreamkeeper.policies.dedup import Candidate, DedupOutcome, closest, content_tokens, decide
from dreamkeeper.stores.files import atomic_write_text
from dreamkeeper.stores.journal import JournalAction
from dreamkeeper.stores.memory_store import FileMemoryStore
from dreamkeeper.stores.models import MemoryEntry
from dreamkeeper.stores.validation import validate_entry_id


@dataclass(frozen=True)
class SavedFact:
    outcome: DedupOutcome
    entry_id: str


def _state(entry: MemoryEntry) -> list:
    return [entry.fingerprint, entry.reinforcement_count]


def save_fact(
    store: FileMemoryStore,
    candidate: Candidate,
    *,
    new_id: str,
    op_id: str,
    exclude: frozenset[str] = frozenset(),
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    now: datetime | None = None,
    candidate_vector: np.ndarray | None = None,
) -> SavedFact:
    """`candidate_vector`, when given, compares by cosine with entries that have a vector
    and is stored as the new entry's vector if one is created."""
    validate_entry_id(new_id)
    ledger = store.root / "ops" / f"{op_id}.json"
    with store.writing():  # one lock hold for lookup + write
        at = now or store.now()
        if store.get(new_id) is not None:
            return SavedFact(DedupOutcome.CREATED, new_id)
        if ledger.exists():
            done = json.loads(ledger.read_text())
            target = store.get(done["target"])
            if target is None or _state(target) != done["before"]:
                return SavedFact(DedupOutcome(done["outcome"]), done["target"])
            # Crashed after the ledger, before the entry: apply as recorded.
        match, similarity, threshold = _closest(
            store, candidate, candidate_vector, lambda e: e.id not in exclude
        )
        decision = decide(candidate, match, similarity, at, threshold=threshold,
                          vocabulary=vocabulary)  # fmt: skip
        if decision.outcome is DedupOutcome.CREATED:
            created = store.create(
                candidate.content, category=candidate.category, tags=candidate.tags,
                metadata=dict(candidate.metadata), importance=candidate.importance,
                entry_id=new_id, now=at,
            )  # fmt: skip
            if candidate_vector is not None and store.embeddings is not None:
                store.write_vector(new_id, candidate_vector, created.fingerprint)
            return SavedFact(DedupOutcome.CREATED, new_id)
        assert match is not None and decision.updated is not None
        atomic_write_text(
            ledger,
            json.dumps({"outcome": str(decision.outcome), "target": match.id,
                        "before": _state(match), "after": _state(decision.updated)}),
        )  # fmt: skip
        action = (
            JournalAction.REINFORCED
            if decision.outcome is DedupOutcome.REINFORCED
            else JournalAction.EXTENDED
        )
        store.put(decision.updated, action=action, reason=f"save {op_id}")
        return SavedFact(decision.outcome, match.id)


def _closest(
    store: FileMemoryStore,
    candidate: Candidate,
    candidate_vector: np.ndarray | None,
    eligible: Callable[[MemoryEntry], bool],
) -> tuple[MemoryEntry | None, float, float]:
    cache: dict[str, frozenset[str]] = {}
    vectors = (
        store.vectors(candidate_vector.size) if candidate_vector is not None else None
    )
    return closest(
        candidate,
        (e for e in store.entries() if eligible(e)),
        tokens_of=lambda e: cache.setdefault(e.id, content_tokens(e.content)),
        candidate_vector=candidate_vector,
        vector_of=(lambda e: vectors.get(e.id)) if vectors is not None else (lambda e: None),
    )


def dedup_existing(
    store: FileMemoryStore,
    entry_id: str,
    *,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    now: datetime | None = None,
    candidate_vector: np.ndarray | None = None,
) -> SavedFact:
    """Run an already-saved entry through dedup against the others: a near-duplicate
    absorbs it (reinforced or extended, persisted first) and then it is archived
    `merged into {id}`; otherwise it stays. Idempotent: an entry already archived by
    this reports where it went."""
    with store.writing():
        original = store.require(entry_id)
        prefix = "merged into "
        if original.is_archived:
            reason = original.archive_reason or ""
            target = reason[len(prefix) :] if reason.startswith(prefix) else entry_id
            return SavedFact(DedupOutcome.REINFORCED, target)
        candidate = Candidate(
            original.content, original.category, tuple(original.tags),
            tuple(original.metadata.items()), original.importance_score,
        )  # fmt: skip
        match, similarity, threshold = _closest(
            store, candidate, candidate_vector, lambda e: e.id != entry_id
        )
        decision = decide(candidate, match, similarity, now or store.now(), threshold=threshold,
                          vocabulary=vocabulary)  # fmt: skip
        if decision.outcome is DedupOutcome.CREATED or match is None:
            return SavedFact(DedupOutcome.CREATED, entry_id)
        assert decision.updated is not None
        action = (
            JournalAction.REINFORCED
            if decision.outcome is DedupOutcome.REINFORCED
            else JournalAction.EXTENDED
        )
        # Save first, then archive: the copy goes only once its replacement persisted.
        store.put(decision.updated, action=action, reason=f"absorbed {entry_id}")
        store.archive(entry_id, f"{prefix}{match.id}")
        return SavedFact(decision.outcome, match.id)
