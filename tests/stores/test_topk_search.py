"""Top-k search that skips what cannot win (`BM25Index.top_scores`): the same ranking as
scoring every document, checked against exhaustive scoring on generated stores."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dreamkeeper.stores.longterm.memory_store import FileMemoryStore
from dreamkeeper.stores.search.bm25 import BM25Index
from dreamkeeper.stores.search.query import search

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"]

documents = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=12),
        st.floats(0.5, 1.0),  # the weight: 0.5 + 0.5 x importance
        st.booleans(),  # archived
    ),
    min_size=1,
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(
    docs=documents,
    removed=st.sets(st.integers(0, 79), max_size=20),
    query=st.lists(st.sampled_from([*WORDS, "zulu"]), min_size=1, max_size=5),
    limit=st.integers(1, 12),
    factor=st.sampled_from([1.0, 2.0]),
    include_archived=st.booleans(),
)
def test_what_top_scores_skips_cannot_reach_the_top_and_what_it_keeps_is_exact(
    docs, removed, query, limit, factor, include_archived
):
    index = BM25Index()
    for i, (tokens, weight, archived) in enumerate(docs):
        index.put(f"d{i}", tokens, archived=archived, weight=weight)
    for i in removed:
        index.remove(f"d{i}")
    full = index.scores(query, include_archived=include_archived)
    pruned = index.top_scores(query, limit, include_archived=include_archived, max_factor=factor)
    kept = pruned > 0
    assert np.array_equal(pruned[kept], full[kept])  # the same floats, not just close
    weighted = full * index.weights
    if np.count_nonzero(full) >= limit:
        kth = np.sort(weighted[full > 0])[-limit]
        skipped = (full > 0) & ~kept
        assert np.all(weighted[skipped] * factor < kth)


def _exhaustive(self, tokens, limit, *, include_archived=False, max_factor=1.0):  # noqa: ANN001, ANN202
    return self.scores(tokens, include_archived=include_archived)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One store of many near-identical entries: ties on score everywhere."""

    rng = random.Random(11)
    store = FileMemoryStore(tmp_path_factory.mktemp("topk"), "a1")
    for _ in range(300):
        words = rng.choices(WORDS, k=rng.randint(2, 10))
        store.create(" ".join(words).capitalize() + ".", importance=rng.choice([0.1, 0.5, 0.9]))
    return store


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    query=st.lists(st.sampled_from([*WORDS, "zulu"]), min_size=1, max_size=4),
    limit=st.integers(1, 25),
)
def test_a_pruned_search_returns_what_scoring_every_entry_returns(store, query, limit):
    text = " ".join(query)
    pruned = search(store, text, limit=limit)
    original = BM25Index.top_scores
    BM25Index.top_scores = _exhaustive  # type: ignore[method-assign]
    try:
        exhaustive = search(store, text, limit=limit)
    finally:
        BM25Index.top_scores = original  # type: ignore[method-assign]
    assert [(h.entry.id, h.score) for h in pruned] == [(h.entry.id, h.score) for h in exhaustive]
