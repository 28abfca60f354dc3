"""Merge arithmetic: what a merged entry's fields are, computed by the host, never the LLM.

createdAt = min, lastSeenAt = max (never "now": dream housekeeping is not a sighting),
reinforcementCount = sum, importance = the proposal's or else the max, provenance = the
least trusted source, subject-time widened (start min, end max, point the most specific),
plus mergedFrom / mergedAt. Other metadata is entry-scoped and dropped.

The exact-duplicate fold is the same arithmetic for identical texts, except that seeing
the same text again keeps the *most* trusted source.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import SOURCE_KEY, MemoryEntry
from dreamkeeper.core.validation import cap_metadata, cap_tags, validate_category
from dreamkeeper.policies.provenance import combined_source, reinforced_source

SUBJECT_TIME = "subjectTime"
SUBJECT_TIME_START = "subjectTimeStart"
SUBJECT_TIME_END = "subjectTimeEnd"
MERGED_FROM = "mergedFrom"
MERGED_AT = "mergedAt"


def _pad(value: str, *, end: bool) -> str:
    """An ISO partial date as its first (or last) day, so "2019" sorts as a whole year."""
    parts = value.split("-")
    if len(parts) == 1:
        parts += ["12", "31"] if end else ["01", "01"]
    elif len(parts) == 2:
        parts += ["31"] if end else ["01"]
    return "-".join(parts)


def merge_subject_time(sources: Sequence[MemoryEntry]) -> dict[str, str]:
    out: dict[str, str] = {}
    points = [s.metadata[SUBJECT_TIME] for s in sources if s.metadata.get(SUBJECT_TIME)]
    starts = [s.metadata[SUBJECT_TIME_START] for s in sources if s.metadata.get(SUBJECT_TIME_START)]
    ends = [s.metadata[SUBJECT_TIME_END] for s in sources if s.metadata.get(SUBJECT_TIME_END)]
    if points:
        # Most specific form wins; among equally specific ones, the earliest.
        out[SUBJECT_TIME] = min(points, key=lambda p: (-p.count("-"), p))
    if starts:
        out[SUBJECT_TIME_START] = min(starts, key=lambda v: _pad(v, end=False))
    if ends:
        out[SUBJECT_TIME_END] = max(ends, key=lambda v: _pad(v, end=True))
    return out


@dataclass(frozen=True)
class MergeProposal:
    """What the LLM may decide: the text and labels. Everything else is arithmetic."""

    content: str
    category: str | None
    tags: tuple[str, ...] = ()
    importance: float | None = None


def merged_entry(
    new_id: str, proposal: MergeProposal, sources: Sequence[MemoryEntry], merged_at: datetime
) -> MemoryEntry:
    if not sources:
        raise ValueError("a merge needs at least one source")
    metadata = merge_subject_time(sources)
    source = combined_source(s.source for s in sources)
    if source is not None:
        metadata[SOURCE_KEY] = source
    metadata[MERGED_FROM] = json.dumps(sorted(s.id for s in sources))
    metadata[MERGED_AT] = merged_at.isoformat()
    # Never above the most important source: a merge cannot mint an unprunable entry.
    highest = max(s.importance_score for s in sources)
    importance = highest if proposal.importance is None else min(proposal.importance, highest)
    # Within the store's limit: the sources' tags together may be more than 32.
    tags = cap_tags(proposal.tags or [t for s in sources for t in s.tags])
    return MemoryEntry(
        id=new_id,
        content=proposal.content,
        category=proposal.category,
        tags=tags,
        created_at=min(s.created_at for s in sources),
        updated_at=merged_at,
        metadata=metadata,
        importance_score=importance,
        last_seen_at=max(s.last_seen_at for s in sources),
        reinforcement_count=sum(s.reinforcement_count for s in sources),
        # True since the earliest source was: a source's own validFrom survives the merge.
        valid_from=(
            min(s.valid_since for s in sources) if any(s.valid_from for s in sources) else None
        ),
    )


def fold_key(entry: MemoryEntry) -> tuple[str | None, str]:
    return (entry.category, " ".join(entry.content.split()))


@dataclass(frozen=True)
class Fold:
    survivor: MemoryEntry  # the oldest copy, with the group's arithmetic applied
    copies: tuple[str, ...]  # ids to archive "merged into {survivor.id}"


def exact_duplicate_folds(entries: Sequence[MemoryEntry]) -> list[Fold]:
    """Groups of live entries with the same category and whitespace-collapsed text."""
    groups: dict[tuple[str | None, str], list[MemoryEntry]] = defaultdict(list)
    for entry in entries:
        if not entry.is_archived:
            groups[fold_key(entry)].append(entry)
    folds = []
    for members in groups.values():
        if len(members) < 2:
            continue
        members.sort(key=lambda e: (e.created_at, e.id))
        oldest, rest = members[0], members[1:]
        source = oldest.source
        for other in rest:
            source = reinforced_source(source, other.source)
        metadata = {
            **{k: v for k, v in oldest.metadata.items() if k != SOURCE_KEY},
            **merge_subject_time(members),
        }
        if source is not None:
            metadata[SOURCE_KEY] = source
        # The group's tags and metadata within the store's limits, or the fold's write
        # would be refused (and the whole dream with it).
        metadata = cap_metadata(
            metadata, first=(SOURCE_KEY, SUBJECT_TIME, SUBJECT_TIME_START, SUBJECT_TIME_END)
        )
        survivor = oldest.model_copy(
            update={
                "tags": cap_tags(t for e in members for t in e.tags),
                "reinforcement_count": sum(e.reinforcement_count for e in members),
                "importance_score": max(e.importance_score for e in members),
                "last_seen_at": max(e.last_seen_at for e in members),
                "created_at": min(e.created_at for e in members),
                "metadata": metadata,
            }
        )
        folds.append(Fold(survivor, tuple(e.id for e in rest)))
    folds.sort(key=lambda f: f.survivor.id)
    return folds


def merge_category(proposed: str | None, sources: Sequence[MemoryEntry]) -> str | None:
    """The LLM's category when valid, else the sources' most common one."""
    if proposed:
        try:
            return validate_category(proposed)
        except InvalidInput:
            pass
    counts = Counter(s.category for s in sources)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0] or ""))[0][0]


def valid_tags(tags: Iterable[str]) -> list[str]:
    """The proposed tags the store accepts, in order, without repeats, at most 32."""
    return cap_tags(tags)
