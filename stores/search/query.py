"""Long-term memory search: BM25 with a phrase bonus and an importance boost — hybrid
with cosine similarity when an embedding model is configured — filters (category prefix,
tags, metadata, created-date range), the query-less browse, and the reference's
result-line format.

BM25 only: base score × 2 with a query phrase × (0.5 + 0.5 · importance), the
reference's rule. Hybrid: the candidates are the entries sharing a query term plus those
whose vector reaches the minimum similarity; both legs score all of them, as evidence in
nats that adds up, with bounded importance and recency boosts (`stores.search.fusion`). Entries
without a current vector still rank by keywords, and with no query vector (endpoint
down, no model) the search is exactly the BM25 one. Equal scores are ordered by last
seen (newest first), then content, then id — never by the random id alone.

Tags and category words are part of the scored text (as in the reference): a tag or a
category segment is a word the entry is about. The filters restrict without scoring.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from dreamkeeper.core.agent_api import DEFAULT_LIMIT, SearchHit
from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry, as_utc
from dreamkeeper.core.settings import MIN_SIMILARITY
from dreamkeeper.core.validation import category_matches, validate_category, validate_entry_id
from dreamkeeper.policies.supersede import Sameness, judge, newer_answers
from dreamkeeper.stores.contract import MemoryStore
from dreamkeeper.stores.longterm.records import (
    CONFLICT_LINKS,
    CONFLICTS_WITH,
    MAY_BE_REPLACED_BY,
    MAY_REPLACE,
    NEWER_VERSIONS,
    POSSIBLE_CHANGE_LINKS,
    linked,
)
from dreamkeeper.stores.longterm.supersede import history as versions
from dreamkeeper.stores.search.bm25 import BM25Index, query_phrases, query_terms
from dreamkeeper.stores.search.fusion import (
    IMPORTANCE_SPAN,
    RECENCY_SPAN,
    boosts,
    lexical_evidence,
    semantic_evidence,
)
from dreamkeeper.stores.vectors.vectors import VectorIndex

MAX_LIMIT = 1_000
PHRASE_BONUS = 2.0


@dataclass(frozen=True)
class _Filters:
    """Everything a hit must satisfy. Category is applied through the index's groups;
    tags and created dates need the entry itself."""

    category: str | None = None
    tags: list[str] = field(default_factory=list)
    created_after: datetime | None = None  # inclusive
    created_before: datetime | None = None  # inclusive
    metadata: dict[str, str] = field(default_factory=dict)  # every key equal to its value
    # The scope beyond current facts (the index's default): archived and superseded
    # entries on request, or exactly what was valid at `as_of` (validity, not save time).
    include_archived: bool = False
    include_superseded: bool = False
    as_of: datetime | None = None

    @property
    def wide(self) -> bool:
        """Whether the index's wide scope (every entry) is searched, and filtered here."""
        return self.include_archived or self.include_superseded or self.as_of is not None

    @property
    def per_entry(self) -> bool:
        return (
            bool(self.tags)
            or bool(self.metadata)
            or self.created_after is not None
            or self.created_before is not None
            or self.wide
        )

    def admits(self, entry: MemoryEntry) -> bool:
        """Tags, metadata, created dates and validity (not the category)."""
        if entry.is_archived and not self.include_archived:
            return False
        if self.as_of is not None:
            if not entry.valid_at(self.as_of):
                return False
        elif entry.is_superseded and not (self.include_superseded or self.include_archived):
            return False
        if self.tags and not _has_tags(entry, self.tags):
            return False
        if any(entry.metadata.get(k) != v for k, v in self.metadata.items()):
            return False
        created = entry.created_at
        if self.created_after is not None and created < self.created_after:
            return False
        return self.created_before is None or created <= self.created_before


def _filters(
    category: str | None,
    tags: list[str] | None,
    created_after: datetime | str | None,
    created_before: datetime | str | None,
    metadata: dict[str, str] | None = None,
    *,
    include_archived: bool = False,
    include_superseded: bool = False,
    as_of: datetime | str | None = None,
) -> _Filters:
    if category is not None:
        category = validate_category(category.rstrip("/") or category)
    wanted = [t.strip().lower() for t in (tags or []) if t and t.strip()]
    after = _moment(created_after, "created_after")
    before = _moment(created_before, "created_before")
    if after is not None and before is not None and after > before:
        raise InvalidInput(
            f"created_after {after.isoformat()} is later than created_before "
            f"{before.isoformat()}: nothing can match"
        )
    return _Filters(
        category,
        wanted,
        after,
        before,
        _metadata_filter(metadata),
        include_archived=bool(include_archived),
        include_superseded=bool(include_superseded),
        as_of=_moment(as_of, "as_of"),
    )


def _metadata_filter(metadata: dict[str, str] | None) -> dict[str, str]:
    """Exact, case-sensitive key → value matches; every pair must hold."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in metadata.items()
    ):
        raise InvalidInput(
            f"invalid metadata filter {metadata!r}: expected an object of non-empty string "
            'keys to string values, such as {"source": "user"}'
        )
    return dict(metadata)


def _moment(value: datetime | str | None, name: str) -> datetime | None:
    """A datetime or ISO 8601 text; a date alone is midnight UTC, a naive time is UTC;
    None or blank text is no bound."""
    if isinstance(value, datetime):
        return as_utc(value)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        return as_utc(datetime.fromisoformat(value.strip()))
    except (AttributeError, ValueError):
        raise InvalidInput(
            f"invalid {name} {value!r}: expected an ISO 8601 date or time, such as 2026-03-01 "
            "or 2026-03-01T09:30:00Z"
        ) from None


def _check_limit(limit: int) -> int:
    if not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"invalid limit {limit!r}: expected 1 to {MAX_LIMIT}")
    return limit


def _has_tags(entry: MemoryEntry, wanted: list[str]) -> bool:
    have = {t.lower() for t in entry.tags}
    return all(t in have for t in wanted)


def search(
    store: MemoryStore,
    query: str | None = None,
    *,
    category: str | None = None,
    tags: list[str] | None = None,
    metadata: dict[str, str] | None = None,
    created_after: datetime | str | None = None,
    created_before: datetime | str | None = None,
    limit: int = DEFAULT_LIMIT,
    include_archived: bool = False,
    include_superseded: bool = False,
    as_of: datetime | str | None = None,
    history: str | None = None,
    query_vector: np.ndarray | None = None,
    keyword_only: bool = False,
) -> list[SearchHit]:
    """Both created bounds are inclusive; text bounds are ISO 8601 (see `_moment`).
    `metadata` keeps entries whose metadata holds every given key with exactly that
    value. `query_vector` defaults to the store's embedding of the query, when it has a
    model and the endpoint answers; otherwise the ranking is BM25 only.

    Current facts only, by default: a superseded entry is found with
    `include_superseded` (or `include_archived`), `as_of` returns what was valid at that
    time (by validity, not save time), and `history=<id>` returns that fact's versions,
    oldest first (the query and the other filters are then ignored). `keyword_only`:
    BM25 alone, never asking the embedding model (a caller holding the writer lock).

    Linked pairs (a likely conflict; a possible change, for a question about its own
    subject) come out together, newer first, at the better rank (`_newer_first`)."""
    if history is not None:
        return _history_hits(store, history, limit)
    filters = _filters(
        category,
        tags,
        created_after,
        created_before,
        metadata,
        include_archived=include_archived,
        include_superseded=include_superseded,
        as_of=as_of,
    )
    include_archived = filters.wide
    limit = _check_limit(limit)
    if query is None or not query.strip():
        return _browse(store, filters, limit, include_archived)
    tokens = query_terms(query)
    query_vector = None if keyword_only else _query_vector(store, query, query_vector)
    vectors = store.vectors(query_vector.size) if query_vector is not None else None
    if not tokens and vectors is None:
        return []
    index = store.index()
    if vectors is not None and query_vector is not None:
        hits = _hybrid_search(
            store, index, tokens, vectors, query_vector, filters, include_archived, limit
        )
    else:
        hits = _keyword_search(store, index, tokens, filters, include_archived, limit)
    return _newer_first(store, hits, filters, limit, query)


def _history_hits(store: MemoryStore, history: str, limit: int) -> list[SearchHit]:
    versions_of = versions(store, validate_entry_id(history))
    return [SearchHit(e, None) for e in versions_of][: _check_limit(limit)]


def _query_vector(store: MemoryStore, query: str, given: np.ndarray | None) -> np.ndarray | None:
    if given is None and store.embeddings is not None:
        return store.embeddings.embed_query(query)
    return given


def _hybrid_search(
    store: MemoryStore,
    index: BM25Index,
    tokens: list[str],
    vectors: VectorIndex,
    query_vector: np.ndarray,
    filters: _Filters,
    include_archived: bool,
    limit: int,
) -> list[SearchHit]:
    threshold = store.embeddings.settings.min_similarity if store.embeddings else MIN_SIMILARITY
    base = index.scores(tokens, include_archived=include_archived)
    semantic = _semantic(index, vectors, query_vector, include_archived)
    slots = _candidates(store, index, filters, base, semantic, threshold)
    if slots.size == 0:
        return []
    return _hybrid_hits(store, index, tokens, base, semantic, slots, limit)


def _keyword_search(
    store: MemoryStore,
    index: BM25Index,
    tokens: list[str],
    filters: _Filters,
    include_archived: bool,
    limit: int,
) -> list[SearchHit]:
    # Without per-entry filters, entries that cannot reach the top `limit` (whatever
    # their phrase bonus) are never scored.
    slots, keyword = index.candidates(
        tokens,
        include_archived=include_archived,
        groups=_group_mask(store, filters.category),
        top=None if filters.per_entry else limit,
        phrases=query_phrases(tokens),
        bonus=PHRASE_BONUS,
    )
    if filters.per_entry:
        kept = np.array([_admitted(store, index, s, filters) for s in slots.tolist()], dtype=bool)
        slots, keyword = slots[kept], keyword[kept]
    if slots.size == 0:
        return []
    return _top_hits(store, index, slots, _bm25_final(index, tokens, keyword, slots, limit), limit)


def _linked_ids(entry: MemoryEntry) -> list[tuple[str, bool]]:
    """The entries linked with `entry`: (id, whether only as a possible change)."""
    out = [(i, False) for key in CONFLICT_LINKS for i in linked(entry, key)]
    return out + [(i, True) for key in POSSIBLE_CHANGE_LINKS for i in linked(entry, key)]


def _joins(a: MemoryEntry, b: MemoryEntry, possible: bool, question: str) -> bool:
    """Whether recall keeps a linked pair together, newer first. A likely conflict: unless
    either was edited into another subject since. A possible change (a `replaces` the
    subject check could not confirm, wrong for ~10% of a careless agent's wrong ones)
    only for a question about the pair's own subject
    (`policies.supersede.newer_answers`): otherwise a wrong link could put another
    subject's fact above the one asked for. Not joined, both are still dated."""
    if not _one_subject(a, b):
        return False
    if not possible:
        return True
    older, newer = (a, b) if _since(a) <= _since(b) else (b, a)
    return newer_answers(question, older.content, newer.content)


def _since(entry: MemoryEntry) -> tuple:
    return (entry.valid_since, entry.created_at)


def _newer_first(
    store: MemoryStore, hits: list[SearchHit], filters: _Filters, limit: int, question: str
) -> list[SearchHit]:
    """Keep each likely conflict (`stores.longterm.conflicts`) — and each possible change
    the question asks about (`_joins`) — together, newer first, where its better-ranked
    entry was; the newer one is brought in if only the older matched (and passes the
    filters). Other linked pairs keep their ranks, each dated. Only
    entries the search admits take part (current ones, or those valid at `as_of`); a
    partner that did not match is added beside its pair."""
    keys = (*CONFLICT_LINKS, *POSSIBLE_CHANGE_LINKS)
    if not any(key in h.entry.metadata for h in hits for key in keys):
        return hits
    admitted: dict[str, SearchHit] = {h.entry.id: h for h in hits}
    group: dict[str, str] = {}  # id -> its group's root

    def root(i: str) -> str:
        while group.get(i, i) != i:
            i = group[i]
        return i

    todo = [h.entry for h in hits]
    while todo:
        entry = todo.pop()
        for other_id, possible in _linked_ids(entry):
            other = admitted.get(other_id)
            found = other.entry if other is not None else None
            if found is None:
                found = store.get(other_id) if len(admitted) < 4 * limit else None
                if found is None or not _admits(filters, found):
                    continue
            if not _joins(entry, found, possible, question):
                continue
            if other is None:
                other = admitted[other_id] = SearchHit(found, None)
                todo.append(found)
            group[root(other.entry.id)] = root(entry.id)
    if not group:
        return hits
    return _grouped(hits, admitted, root, limit)


def _grouped(
    hits: list[SearchHit],
    admitted: dict[str, SearchHit],
    root: Callable[[str], str],
    limit: int,
) -> list[SearchHit]:
    """Each group at its best-ranked member's place, newest first."""
    members: dict[str, list[SearchHit]] = {}
    for hit in admitted.values():
        members.setdefault(root(hit.entry.id), []).append(hit)
    out: list[SearchHit] = []
    done: set[str] = set()
    for hit in hits:
        top = root(hit.entry.id)
        if top in done:
            continue
        done.add(top)
        newest_first = sorted(members[top], key=lambda h: _since(h.entry), reverse=True)
        out += [
            SearchHit(h.entry, h.score if h.score is not None else hit.score) for h in newest_first
        ]
    return out[:limit]


def _one_subject(a: MemoryEntry, b: MemoryEntry) -> bool:
    """Whether a linked pair is still not positively two subjects (either may have been
    edited since it was linked): a link reorders only facts about one thing."""
    older, newer = (
        (a, b) if (a.valid_since, a.created_at) <= (b.valid_since, b.created_at) else (b, a)
    )
    return judge(older, newer.content, newer.category).sameness is not Sameness.DIFFERENT


def _admits(filters: _Filters, entry: MemoryEntry) -> bool:
    """Whether an entry no query matched passes the search's filters and scope."""
    if filters.category is not None and not category_matches(entry.category, filters.category):
        return False
    if not filters.wide and not entry.is_current:
        return False
    return filters.admits(entry)


def _group_mask(store: MemoryStore, category: str | None) -> np.ndarray | None:
    """Which of the index's groups (categories) the category filter admits; None: all."""
    if category is None:
        return None
    groups = store.categories_by_group()
    mask = np.zeros(max(groups, default=-1) + 1, dtype=np.bool_)
    for gid, cat in groups.items():
        mask[gid] = category_matches(cat, category)
    return mask


@dataclass(frozen=True)
class _RowMap:
    """Vector rows ↔ index slots for one scope, cached until either index changes."""

    key: tuple[int, int, bool]
    row_slot: np.ndarray  # slot of each row, -1: free, no entry, or out of scope
    slot_row: np.ndarray  # row of each slot, -1: no vector in scope

    @property
    def valid(self) -> np.ndarray:
        return self.row_slot >= 0


_ROW_MAPS: weakref.WeakKeyDictionary[VectorIndex, dict[bool, _RowMap]] = weakref.WeakKeyDictionary()


def _row_map(index: BM25Index, vectors: VectorIndex, include_archived: bool) -> _RowMap:
    key = (vectors.version, index.generation, include_archived)
    maps = _ROW_MAPS.setdefault(vectors, {})
    cached = maps.get(include_archived)
    if cached is not None and cached.key == key:
        return cached
    live = vectors.live_rows
    row_slot = np.array(
        [
            -1
            if k is None or not (include_archived or live[r])
            else (s if (s := index.slot(k)) is not None else -1)
            for r, k in enumerate(vectors.row_keys)
        ],
        dtype=np.int64,
    )
    slot_row = np.full(len(index.weights), -1, dtype=np.int64)
    rows = np.nonzero(row_slot >= 0)[0]
    slot_row[row_slot[rows]] = rows
    maps[include_archived] = built = _RowMap(key, row_slot, slot_row)
    return built


@dataclass(frozen=True)
class _Semantic:
    sims: np.ndarray  # per vector row
    rows: _RowMap
    dim: int

    def population(self) -> np.ndarray:
        """The query's cosine with every entry in scope."""
        return self.sims[self.rows.valid[: self.sims.size]]

    def close_slots(self, threshold: float) -> np.ndarray:
        """Slots whose cosine reaches the threshold."""
        hit = self.rows.valid[: self.sims.size] & (self.sims >= threshold)
        return self.rows.row_slot[: self.sims.size][hit]

    def at(self, slots: np.ndarray) -> np.ndarray:
        """Cosine per slot, NaN where the entry has no vector in scope."""
        rows = self.rows.slot_row[slots]
        have = (rows >= 0) & (rows < self.sims.size)
        return (
            np.where(have, self.sims[np.where(have, rows, 0)], np.nan)
            if self.sims.size
            else np.full(slots.size, np.nan)
        )


def _semantic(
    index: BM25Index, vectors: VectorIndex, query_vector: np.ndarray, include_archived: bool
) -> _Semantic:
    return _Semantic(
        vectors.similarities(query_vector), _row_map(index, vectors, include_archived), vectors.dim
    )


def _candidates(
    store: MemoryStore,
    index: BM25Index,
    filters: _Filters,
    base: np.ndarray,
    semantic: _Semantic | None,
    threshold: float,
) -> np.ndarray:
    """Slots sharing a query word (or close in meaning) that pass every filter."""
    candidates = base > 0
    if semantic is not None:
        candidates[semantic.close_slots(threshold)] = True
    if filters.category is not None:
        allowed = [
            gid
            for gid, cat in store.categories_by_group().items()
            if category_matches(cat, filters.category)
        ]
        candidates &= np.isin(index.groups, allowed)
    slots = np.nonzero(candidates)[0]
    if filters.per_entry:
        kept = [s for s in slots.tolist() if _admitted(store, index, s, filters)]
        slots = np.array(kept, dtype=np.int64)
    return slots


def _admitted(store: MemoryStore, index: BM25Index, slot: int, filters: _Filters) -> bool:
    key = index.key_at(slot)
    entry = store.cached(key) if key is not None else None
    return entry is not None and filters.admits(entry)


def _order(hit: SearchHit) -> tuple:
    """Score, then last seen (newest first), then content, then id: equal scores come out
    the same way every time, also after the same entries are saved again under new ids."""
    return (
        -(hit.score or 0.0),
        -hit.entry.last_seen_at.timestamp(),
        hit.entry.content,
        hit.entry.id,
    )


def _cut(
    index: BM25Index, slots: np.ndarray, final: np.ndarray, limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """The slots that can be in the top `limit` by `_order`: ranked by score, then last
    seen (both held by the index), keeping every slot tied with the boundary on both —
    only those need their entries read for the rest of the tie-break (content, id). An
    entry is read only when it may be returned: a store opened from its snapshot parses
    entries on first read."""
    if slots.size <= limit:
        return slots, final
    kth = np.partition(final, slots.size - limit)[slots.size - limit]
    keep = final >= kth
    slots, final = slots[keep], final[keep]
    if slots.size <= limit:
        return slots, final
    stamps = index.stamps[slots]
    boundary = np.lexsort((-stamps, -final))[limit - 1]
    score, stamp = final[boundary], stamps[boundary]
    keep = (final > score) | ((final == score) & (stamps >= stamp))
    return slots[keep], final[keep]


def _top_hits(
    store: MemoryStore, index: BM25Index, slots: np.ndarray, final: np.ndarray, limit: int
) -> list[SearchHit]:
    slots, final = _cut(index, slots, final, limit)
    hits = [
        SearchHit(entry, score)
        for slot, score in zip(slots.tolist(), final.tolist(), strict=True)
        if (entry := store.cached(index.key_at(slot))) is not None  # type: ignore[arg-type]
    ]
    hits.sort(key=_order)
    return hits[:limit]


def _bm25_final(
    index: BM25Index, tokens: list[str], keyword: np.ndarray, slots: np.ndarray, limit: int
) -> np.ndarray:
    """Each slot's keyword score (aligned with `slots`) × its weight, doubled with a query
    phrase."""
    final = keyword * index.weights[slots]
    phrases = query_phrases(tokens)
    if phrases:
        contenders = slots
        if slots.size > limit:
            # The bonus lifts a score at most this far: candidates that stay below the k-th
            # best unbonused score even when lifted need no phrase test.
            kth = np.partition(final, slots.size - limit)[slots.size - limit]
            contenders = slots[final * PHRASE_BONUS >= kth]
        bonus = _within(slots, index.phrase_slots(phrases, among=contenders))
        final = np.where(bonus, final * PHRASE_BONUS, final)
    return final


def _within(slots: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Which of `slots` are among `members` (both ascending)."""
    if members.size == 0:
        return np.zeros(slots.size, dtype=np.bool_)
    at = np.minimum(np.searchsorted(members, slots), members.size - 1)
    return members[at] == slots


# The boosts' range: an entry below the k-th best fused score by more than this factor
# cannot reach the top k whatever its importance and recency.
_BOOST_SPREAD = (1 + IMPORTANCE_SPAN / 2) / ((1 - IMPORTANCE_SPAN / 2) * (1 - RECENCY_SPAN))


def _hybrid_hits(
    store: MemoryStore,
    index: BM25Index,
    tokens: list[str],
    base: np.ndarray,
    semantic: _Semantic,
    slots: np.ndarray,
    limit: int,
) -> list[SearchHit]:
    keyword = base[slots]
    semantic_nats = semantic_evidence(semantic.at(slots), semantic.population(), semantic.dim)
    fused = lexical_evidence(keyword) + semantic_nats
    phrases = query_phrases(tokens)
    if phrases:
        # The bonus adds the lexical evidence once more, at most: only candidates that
        # could then reach the top k need the phrase test.
        contenders = keyword > 0
        if slots.size > limit:
            kth = np.partition(fused, slots.size - limit)[slots.size - limit]
            contenders &= (fused + lexical_evidence(keyword)) * _BOOST_SPREAD >= kth
        marked = np.zeros(len(index.weights), dtype=np.bool_)
        marked[index.phrase_slots(phrases, among=slots[contenders])] = True
        keyword = np.where(marked[slots], keyword * PHRASE_BONUS, keyword)
        fused = lexical_evidence(keyword) + semantic_nats
    if slots.size > limit:
        kth = np.partition(fused, slots.size - limit)[slots.size - limit]
        keep = fused * _BOOST_SPREAD >= kth
        slots, fused = slots[keep], fused[keep]
    final = fused * boosts(
        slots.size,
        importance=index.importances[slots],
        last_seen=index.stamps[slots],
        now=store.now(),
    )
    return _top_hits(store, index, slots, final, limit)


def _browse(
    store: MemoryStore, filters: _Filters, limit: int, include_archived: bool
) -> list[SearchHit]:
    entries = [
        e
        for e in store.entries(include_archived=include_archived)
        if (filters.category is None or category_matches(e.category, filters.category))
        and filters.admits(e)
    ]
    entries.sort(key=lambda e: (e.last_seen_at, e.id), reverse=True)
    return [SearchHit(e, None) for e in entries[:limit]]


# -- formatting ------------------------------------------------------------------------

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def display_text(text: str, *, keep_newlines: bool = False) -> str:
    """Text safe to print: control characters (a planted ANSI escape, a NUL) shown as
    escapes instead of acting on the terminal."""
    if not keep_newlines:
        text = " ".join(text.split())
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


def _days(later: datetime, earlier: datetime) -> int:
    return max(0, (as_utc(later).date() - as_utc(earlier).date()).days)


def format_age(entry: MemoryEntry, now: datetime) -> str:
    if entry.reinforcement_count <= 1:
        days = _days(now, entry.created_at)
        if days == 0:
            return "first seen today"
        return f"first seen {days} day{'s' if days != 1 else ''} ago"
    first_days = _days(now, entry.created_at)
    first = f"{first_days}d ago" if first_days < 30 else entry.created_at.strftime("%Y-%m")
    last = (
        "today" if _days(now, entry.last_seen_at) == 0 else entry.last_seen_at.strftime("%Y-%m-%d")
    )
    return f"seen {entry.reinforcement_count}× from {first} to {last}"


def format_hit(
    entry: MemoryEntry, now: datetime, *, validity: bool = False, conflict: str | None = None
) -> str:
    """One result line. A replaced version always says so; `validity` (a search that
    asked for versions) also dates the current one, so the two read as a timeline.
    `conflict` (`conflict_note`) dates an unsettled change and names the other entry."""
    parts = [
        entry.category or "uncategorized",
        f"importance={entry.importance_score:.2f}",
        format_age(entry, now),
    ]
    if entry.source:
        parts.append(f"source={entry.source}")
    if entry.is_archived:
        parts.append(f"archived: {entry.archive_reason}")
    if entry.invalid_at is not None and entry.superseded_by is not None:
        parts.append(f"replaced on {entry.invalid_at:%Y-%m-%d} by [{entry.superseded_by}]")
    elif (validity or entry.valid_from is not None or conflict) and entry.is_current:
        parts.append(f"current since {entry.valid_since:%Y-%m-%d}")
    if conflict:
        parts.append(conflict)
    return f"- [{entry.id}] ({', '.join(parts)}): {display_text(entry.content)}"


def conflict_note(store: MemoryStore, entry: MemoryEntry) -> str | None:
    """For a current entry linked with another current one as a likely, unsettled
    change (`stores.longterm.conflicts`): which is newer, and since when — "newer:
    [id], 2026-03-02" on the older one, "older: [id], 2025-11-01" on the newer; as a
    possible one (a `replaces` the subject check could not confirm), "may be replaced
    by: [id], DATE" and "may replace: [id], DATE". None when there is no such link (the
    usual case: nothing is read)."""
    if not entry.is_current or not any(
        key in entry.metadata for key in (*CONFLICT_LINKS, *POSSIBLE_CHANGE_LINKS)
    ):
        return None
    notes = []
    for key, label in (
        (NEWER_VERSIONS, "newer"),
        (CONFLICTS_WITH, "older"),
        (MAY_BE_REPLACED_BY, "may be replaced by"),
        (MAY_REPLACE, "may replace"),
    ):
        others = [e for i in linked(entry, key) if (e := store.get(i)) is not None and e.is_current]
        if others:
            other = max(others, key=lambda e: (e.valid_since, e.created_at))
            notes.append(f"{label}: [{other.id}], {other.valid_since:%Y-%m-%d}")
    return "; ".join(notes) or None


def format_taxonomy(categories: dict[str, int]) -> str:
    if not categories:
        return "Categories: none yet."
    lines = ["Categories (live entries):"]
    lines += [f"  {name or 'uncategorized'} ({count})" for name, count in categories.items()]
    return "\n".join(lines)
