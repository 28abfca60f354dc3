"""What a consolidation proposal may actually do: pure decisions, no I/O.

The LLM proposes merges (`toSave`) and prunes (`toDelete`); these rules decide. Ids
resolve only against the entries shown in that batch. A merge is accepted only if its
text is not blank, every source is unchanged since it was shown, and every specific of
every source survives (coverage). A prune is allowed only for an id that was shown, is
not merge-only, is not the source of any merge (accepted ones are archived through the
merge; rejected or skipped ones keep their sources), and — checked on the current entry
— is below the high-value floor.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.validation import MAX_CONTENT_CHARS, validate_content
from dreamkeeper.policies.coverage import (
    DEFAULT_VOCABULARY,
    Source,
    Vocabulary,
    find_missing_specifics,
)
from dreamkeeper.policies.merge_safety import context_problems

EPHEMERAL_REASON = "flagged ephemeral by consolidation"
# The reference's best merge had 13 sources (a colleague's fragments, every specific
# kept): the cap stops "merge everything into one line", not honest consolidation.
MAX_MERGE_SOURCES = 16
ARCHIVE_SHARE = 0.2  # of the live entries at the start of a cycle
MIN_ARCHIVE_BUDGET = 4  # a small store may still fold or merge a few duplicates


def merged_reason(entry_id: str) -> str:
    return f"merged into {entry_id}"


def archive_budget(
    live: int, share: float = ARCHIVE_SHARE, minimum: int = MIN_ARCHIVE_BUDGET
) -> int:
    """How many entries one dream cycle may archive (folds + merge sources + prunes): an
    LLM obeying text hidden in a memory can damage at most this much per cycle; the rest
    waits for later cycles, or an operator."""
    return max(minimum, math.floor(live * share))


class Verdict(StrEnum):
    ACCEPTED = "accepted"
    REJECTED = "rejected"  # drops specifics: sources kept (and eligible for one repair)
    BLANK = "blank"  # no text: sources kept
    CHANGED = "changed"  # a source changed or went away since it was shown: left alone
    NO_SOURCES = "no-sources"  # every source id was outside the shown set
    TOO_LONG = "too-long"
    INVALID = "invalid-text"  # text the store would refuse (a NUL, not Unicode): sources kept
    TOO_MANY_SOURCES = "too-many-sources"
    # Would archive a high-value source without keeping its details in context (the
    # stricter check of policies.merge_safety): refused, sources kept.
    UNSAFE = "unsafe-for-high-value"


@dataclass(frozen=True)
class MergeReview:
    verdict: Verdict
    missing: tuple[str, ...] = ()
    reason: str | None = None

    @property
    def accepted(self) -> bool:
        return self.verdict is Verdict.ACCEPTED


def resolve_ids(ids: Iterable[str], shown: Iterable[str]) -> tuple[list[str], list[str]]:
    """(ids that were shown, in order and without repeats; ids that resolve to nothing)."""
    allowed = set(shown)
    kept: list[str] = []
    ignored: list[str] = []
    for raw in ids:
        target = kept if raw in allowed else ignored
        if raw not in target:
            target.append(raw)
    return kept, ignored


def review_merge(
    content: str,
    source_ids: Sequence[str],
    sources: Mapping[str, MemoryEntry | None],
    shown: Mapping[str, str],
    vocabulary: Vocabulary = DEFAULT_VOCABULARY,
    *,
    high_value: Callable[[MemoryEntry], bool] = lambda _: False,
    max_sources: int = MAX_MERGE_SOURCES,
) -> MergeReview:
    """`sources` are the current entries (None if gone); `shown` the fingerprints the LLM
    saw; `high_value` tells which sources need the stricter in-context check. A repaired
    text is reviewed by exactly these rules again. Coverage runs late: it is costly."""
    if not source_ids:
        return MergeReview(Verdict.NO_SOURCES)
    if len(source_ids) > max_sources:
        return MergeReview(
            Verdict.TOO_MANY_SOURCES, reason=f"{len(source_ids)} sources (at most {max_sources})"
        )
    if not content.strip():
        return MergeReview(Verdict.BLANK)
    current = [sources.get(i) for i in source_ids]
    for sid, entry in zip(source_ids, current, strict=True):
        if entry is None or entry.is_archived or entry.fingerprint != shown.get(sid):
            return MergeReview(Verdict.CHANGED)
    if len(content) > MAX_CONTENT_CHARS:
        return MergeReview(Verdict.TOO_LONG)
    try:
        validate_content(content)  # the store's own rule: what it refuses is never saved
    except InvalidInput as exc:
        return MergeReview(Verdict.INVALID, reason=str(exc))
    missing = find_missing_specifics(
        [Source(e.content, e.category) for e in current if e is not None], content, vocabulary
    )
    if missing:
        return MergeReview(Verdict.REJECTED, tuple(missing))
    texts = [Source(e.content, e.category) for e in current if e is not None]
    for entry, text in zip([e for e in current if e is not None], texts, strict=True):
        if high_value(entry):
            others = [t for t in texts if t is not text]
            problems = context_problems(text, content, vocabulary, others=others)
            if problems:
                return MergeReview(
                    Verdict.UNSAFE, reason=f"high-value {entry.id}: " + "; ".join(problems)
                )
    return MergeReview(Verdict.ACCEPTED)


def merge_id(source_ids: Iterable[str], content: str) -> str:
    """Derived from what is merged, so a retried or replayed save finds its own entry
    instead of minting a second one."""
    key = "merge\n" + ",".join(sorted(source_ids)) + "\n" + content
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def without_overlaps(merges: Sequence[Sequence[str]]) -> list[int]:
    """Indexes of merges to keep, in order, so no entry is the source of two merges: a
    later merge that reuses an earlier one's source is dropped (its sources stay)."""
    used: set[str] = set()
    keep = []
    for index, sources in enumerate(merges):
        if used.isdisjoint(sources):
            keep.append(index)
            used.update(sources)
    return keep


class PruneRefusal(StrEnum):
    NOT_SHOWN = "not shown this cycle"
    MERGE_ONLY = "in a reopened cluster (merge-only)"
    MERGE_SOURCE = "a source of a merge"
    HIGH_VALUE = "above the high-value floor"
    CHANGED = "changed since it was shown"


def prune_candidates(
    to_delete: Iterable[str],
    *,
    shown: Iterable[str],
    merge_only: Iterable[str],
    merge_sources: Iterable[str],
) -> tuple[list[str], dict[str, PruneRefusal]]:
    """The id-level rules, decided in the workflow. `merge_sources` are the sources of
    every proposed merge, whatever became of it: an accepted merge archives them itself
    (`merged into`), and a rejected one must leave them alone — the bug the reference hit
    in production was exactly a rejected merge's sources leaking through `toDelete`."""
    shown_set, only, sources = set(shown), set(merge_only), set(merge_sources)
    allowed: list[str] = []
    refused: dict[str, PruneRefusal] = {}
    for entry_id in dict.fromkeys(to_delete):
        if entry_id not in shown_set:
            refused[entry_id] = PruneRefusal.NOT_SHOWN
        elif entry_id in sources:
            refused[entry_id] = PruneRefusal.MERGE_SOURCE
        elif entry_id in only:
            refused[entry_id] = PruneRefusal.MERGE_ONLY
        else:
            allowed.append(entry_id)
    return allowed, refused
