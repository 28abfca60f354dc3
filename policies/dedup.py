"""Save-time deduplication: is a new fact a new entry, a reinforcement, or an extension?

Decided with the same coverage check a dream merge uses: a near-duplicate that already
carries every specific of the candidate is reinforced (its text does not change); one
that lacks some is extended with the candidate's text. Near-duplicate means cosine ≥ 0.88
where both texts have an embedding, Jaccard ≥ 0.60 over content tokens otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from dreamkeeper.core.models import SOURCE_KEY, MemoryEntry
from dreamkeeper.core.payloads import DedupOutcome
from dreamkeeper.core.validation import cap_metadata, cap_tags
from dreamkeeper.policies.coverage import (
    DEFAULT_VOCABULARY,
    Source,
    Vocabulary,
    find_missing_specifics,
)
from dreamkeeper.policies.provenance import combined_source, reinforced_source

JACCARD_THRESHOLD = 0.60
COSINE_THRESHOLD = 0.88
MAX_EXTENDED_CHARS = 2_000
BYPASS_PREFIXES = ("feedback", "claim/capability")
_CONTENT_TOKEN = re.compile(r"[a-z0-9']+")


@dataclass(frozen=True)
class Candidate:
    content: str
    category: str | None
    tags: tuple[str, ...] = ()
    metadata: tuple[tuple[str, str], ...] = ()
    importance: float = 0.5

    @property
    def source(self) -> str | None:
        return dict(self.metadata).get(SOURCE_KEY)


@dataclass(frozen=True)
class DedupDecision:
    outcome: DedupOutcome
    updated: MemoryEntry | None = None  # the existing entry as it should be written
    similarity: float = 0.0


def content_tokens(text: str) -> frozenset[str]:
    """Jaccard tokens: runs of [a-z0-9'] longer than three characters."""
    return frozenset(t for t in _CONTENT_TOKEN.findall(text.lower()) if len(t) > 3)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def bypasses_dedup(category: str | None) -> bool:
    if category is None:
        return False
    cat = category.lower()
    return any(cat == p or cat.startswith(p + "/") for p in BYPASS_PREFIXES)


def same_scope(a: str | None, b: str | None) -> bool:
    """Same top-level category; no category matches only uncategorized."""
    top = lambda c: None if c is None else c.split("/", 1)[0].lower()  # noqa: E731
    return top(a) == top(b)


def closest(
    candidate: Candidate,
    entries: Iterable[MemoryEntry],
    tokens_of: Callable[[MemoryEntry], frozenset[str]] = lambda e: content_tokens(e.content),
    *,
    candidate_vector: np.ndarray | None = None,
    vector_of: Callable[[MemoryEntry], np.ndarray | None] = lambda e: None,
) -> tuple[MemoryEntry | None, float, float]:
    """The live entry in the candidate's scope it most resembles, the similarity, and the
    threshold that applies to it: cosine (0.88) where both have a vector, else Jaccard
    over content tokens (0.60). Entries are compared by similarity over threshold, so
    the two measures meet on one scale."""
    wanted = content_tokens(candidate.content)
    query = None if candidate_vector is None else _unit(candidate_vector)
    best, best_score, best_threshold, best_ratio = None, 0.0, JACCARD_THRESHOLD, 0.0
    for entry in entries:
        if entry.is_archived or not same_scope(entry.category, candidate.category):
            continue
        vector = vector_of(entry) if query is not None else None
        if vector is not None and query is not None and vector.shape == query.shape:
            score, threshold = float(_unit(vector) @ query), COSINE_THRESHOLD
        else:
            score, threshold = jaccard(wanted, tokens_of(entry)), JACCARD_THRESHOLD
        ratio = score / threshold
        if ratio > best_ratio or (ratio == best_ratio and best is not None and entry.id < best.id):
            best, best_score, best_threshold, best_ratio = entry, score, threshold, ratio
    return best, best_score, best_threshold


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def decide(
    candidate: Candidate,
    match: MemoryEntry | None,
    similarity: float,
    now: datetime,
    *,
    threshold: float = JACCARD_THRESHOLD,
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    max_extended_chars: int = MAX_EXTENDED_CHARS,
    count: bool = True,
) -> DedupDecision:
    """`count=False`: the match was already reinforced by the same save (one save
    counts once), so the sighting is not counted again; an extension still applies."""
    if match is None or similarity < threshold or bypasses_dedup(candidate.category):
        return DedupDecision(DedupOutcome.CREATED, similarity=similarity)
    # Combined within the store's limits (32 tags, 32 metadata keys; the match's own
    # first): a union past them would make the write below fail half-way through a save.
    tags = cap_tags([*match.tags, *candidate.tags])
    metadata = dict(match.metadata)
    for key, value in candidate.metadata:
        metadata.setdefault(key, value)
    common = {
        "tags": tags,
        "importance_score": max(match.importance_score, candidate.importance),
        "last_seen_at": max(match.last_seen_at, now),
        "reinforcement_count": match.reinforcement_count + (1 if count else 0),
    }
    missing = find_missing_specifics(
        [Source(candidate.content, candidate.category)], match.content, vocabulary
    )
    if not missing:
        # Same fact seen again: trust may rise; the text and updatedAt stay (they anchor
        # decay and the consolidation review stamp).
        source = reinforced_source(match.source, candidate.source)
        updated = match.model_copy(update={**common, "metadata": _with_source(metadata, source)})
        return DedupDecision(DedupOutcome.REINFORCED, updated, similarity)
    content = f"{match.content}\n\n{candidate.content}"
    if len(content) > max_extended_chars:
        return DedupDecision(DedupOutcome.CREATED, similarity=similarity)
    source = combined_source([match.source, candidate.source])
    updated = match.model_copy(
        update={
            **common,
            "content": content,
            "updated_at": now,
            "metadata": _with_source(metadata, source),
        }
    )
    return DedupDecision(DedupOutcome.EXTENDED, updated, similarity)


def _with_source(metadata: dict[str, str], source: str | None) -> dict[str, str]:
    out = {k: v for k, v in metadata.items() if k != SOURCE_KEY}
    if source is not None:
        out[SOURCE_KEY] = source
    return cap_metadata(out, first=(SOURCE_KEY, *metadata))
