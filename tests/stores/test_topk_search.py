"""Top-k search that skips what cannot win (`BM25Index.candidates` with `top`) returns
exactly what scoring every entry returns: the same entries, the same scores."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamkeeper.stores.search import bm25
from dreamkeeper.stores.search.bm25 import BM25Index, query_phrases, query_terms
from dreamkeeper.stores.search.query import PHRASE_BONUS, search

# A skewed vocabulary: a few words in most documents, many in few (as real text is).
WORDS = [f"w{i}" for i in range(14)]
SKEW = [2.0**-i for i in range(len(WORDS))]


@contextmanager
def pruning_always() -> Iterator[None]:
    """Skip what cannot win however few postings a query has (the index scores small
    queries exhaustively: cheaper than deciding what to skip)."""
    was, bm25._PRUNE_FROM = bm25._PRUNE_FROM, 0
    try:
        yield
    finally:
        bm25._PRUNE_FROM = was


documents = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=12),
        st.floats(0.5, 1.0),  # weight
        st.booleans(),  # archived
    ),
    min_size=1,
    max_size=60,
)


def _ranked(index: BM25Index, slots, scores, phrases, top: int) -> list[tuple[str, float]]:
    final = scores * index.weights[slots]
    if phrases:
        bonus = np.isin(slots, index.phrase_slots(phrases, among=slots))
        final = np.where(bonus, final * PHRASE_BONUS, final)
    keys = [index.key_at(s) for s in slots.tolist()]
    ranked = sorted(zip(keys, final.tolist(), strict=True), key=lambda kv: (-kv[1], kv[0]))
    # Everything tied with the top-th is part of the answer (the store breaks those ties
    # by fields the index does not hold).
    if len(ranked) > top:
        edge = ranked[top - 1][1]
        ranked = [kv for kv in ranked if kv[1] >= edge]
    return ranked


@settings(max_examples=300)
@given(
    docs=documents,
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),
    top=st.integers(1, 8),
    removed=st.sets(st.integers(0, 59), max_size=10),
    phrase=st.booleans(),
    archived_scope=st.booleans(),
)
def test_the_pruned_top_k_equals_scoring_every_entry(
    docs, query, top, removed, phrase, archived_scope
):
    index = BM25Index()
    for i, (tokens, weight, archived) in enumerate(docs):
        index.put(f"d{i:02}", tokens, archived=archived, weight=weight)
    for i in removed:
        index.remove(f"d{i:02}")
    phrases = list(zip(query, query[1:], strict=False)) if phrase else []
    every = index.candidates(query, include_archived=archived_scope)
    pruned = index.candidates(
        query, include_archived=archived_scope, top=top, phrases=phrases, bonus=PHRASE_BONUS
    )
    assert set(pruned[0].tolist()) <= set(every[0].tolist())
    # The same floats where both scored, and the same ranking of what can win.
    at = np.searchsorted(every[0], pruned[0])
    assert pruned[1].tolist() == every[1][at].tolist()
    assert _ranked(index, *pruned, phrases, top) == _ranked(index, *every, phrases, top)
    # And `scores` (every slot, dense) agrees with both.
    dense = index.scores(query, include_archived=archived_scope)
    assert every[0].tolist() == np.flatnonzero(dense > 0).tolist()
    assert every[1].tolist() == dense[every[0]].tolist()


def test_documents_holding_only_a_common_word_are_not_scored_when_they_cannot_win():
    index = BM25Index()
    for i in range(500):
        index.put(f"common{i:03}", ["common", f"filler{i}"], archived=False)
    for i in range(5):
        index.put(f"rare{i}", ["rare", "common"], archived=False)
    with pruning_always():
        slots, _ = index.candidates(["rare", "common"], top=3)
        assert sorted(index.key_at(s) for s in slots.tolist()) == [f"rare{i}" for i in range(5)]
        # Asking for more than the rare word can fill scores the rest.
        assert index.candidates(["rare", "common"], top=10)[0].size == 505
    # A query this small is scored exhaustively.
    assert index.candidates(["rare", "common"], top=3)[0].size == 505


def test_store_search_is_the_same_with_and_without_skipping(any_store):
    """Through `search` on each backend: the top `limit` with the phrase bonus and the
    importance boost, against a dense reference computed from `scores`."""
    rng = random.Random(7)
    store = any_store
    pruned = 0
    for i in range(300):
        words = rng.choices(WORDS, weights=SKEW, k=rng.randint(2, 9))
        store.create(" ".join(words), category=f"c/{i % 3}", importance=rng.choice([0.1, 0.5, 0.9]))
    index = store.index()
    for _ in range(40):
        words = rng.choices(WORDS, weights=SKEW, k=rng.randint(1, 4))
        query = " ".join(words)
        limit = rng.randint(1, 12)
        terms = query_terms(query)
        with pruning_always():
            hits = search(store, query, limit=limit)
            pruned += index.candidates(terms, top=limit)[0].size < np.count_nonzero(
                index.scores(terms)
            )
        dense = index.scores(terms)
        slots = np.flatnonzero(dense > 0)
        final = dense[slots] * index.weights[slots]
        phrases = query_phrases(terms)
        if phrases:
            bonus = np.isin(slots, index.phrase_slots(phrases, among=slots))
            final = np.where(bonus, final * PHRASE_BONUS, final)
        expected = sorted(
            ((score, store.get(index.key_at(s))) for s, score in zip(slots, final, strict=True)),
            key=lambda p: (-p[0], -p[1].last_seen_at.timestamp(), p[1].content, p[1].id),
        )[:limit]
        assert [(h.entry.id, h.score) for h in hits] == [(e.id, s) for s, e in expected]
    assert pruned > 0  # the skipping was exercised, not only the exhaustive path
