from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_bm25 import BM25Okapi

from dreamkeeper.core.errors import InvalidInput
from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.stores.longterm.records import document_text
from dreamkeeper.stores.search.bm25 import BM25Index, query_terms, tokenize
from dreamkeeper.stores.search.query import format_age, format_hit, format_taxonomy, search
from tests.helpers import LuceneBM25


@pytest.fixture
def store(any_store):
    """Search runs over each backend's store: the ranking is Dreamkeeper's own on both."""
    return any_store


CORPUS = [
    ("User lives in Chicago and works remotely", "user-preferences/location", ["home"]),
    ("User prefers Python over Java for scripting tasks", "user-preferences/languages", []),
    ("The Chicago office moved to the Loop in 2024", "project-context/offices", ["chicago"]),
    ("Don't use search_files for content search, use grep", "anti-patterns/file-operations", []),
    ("Weekly sync with Trish Roberts on Fridays", "project-context/meetings", ["people"]),
    ("Python virtual environments live under .venv", "project-context/tooling", []),
    ("Rockford Duane Lhotka is also Rocky Lhotka", "user-preferences/identity", ["people"]),
    ("BlazorBook chapters are drafted in Markdown", "project-context/blazor-book", []),
]


def test_tokenizer_drops_function_words_stems_and_keeps_identifiers_whole():
    assert tokenize("Don't use AI-based tools, OK? v2.0 PWOP") == [
        "use",
        "ai",
        "base",
        "tool",
        "ok",
        "v2.0",
        "pwop",
    ]


def _random_docs(seed: int, n: int) -> list[list[str]]:
    rng = random.Random(seed)
    vocab = [f"w{i:03d}" for i in range(60)] + ["common", "shared", "the"]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    return [rng.choices(vocab, weights, k=rng.randint(0, 25)) for _ in range(n)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_base_scores_equal_bm25okapi_with_lucenes_idf_including_after_edits(seed):
    docs = _random_docs(seed, 120)
    index = BM25Index()
    for i, toks in enumerate(docs):
        index.put(f"d{i}", toks, archived=False)
    # Edits and removals on the incremental index, then compare to a fresh oracle.
    rng = random.Random(seed)
    for i in rng.sample(range(120), 30):
        docs[i] = _random_docs(seed + 100 + i, 1)[0]
        index.put(f"d{i}", docs[i], archived=False)
    removed = set(rng.sample(range(120), 80))  # enough to trigger compaction
    for i in removed:
        index.remove(f"d{i}")
    keys = [f"d{i}" for i in range(120) if i not in removed]
    kept = [docs[i] for i in range(120) if i not in removed]
    oracle = LuceneBM25(kept)
    for query in (["w001", "w002"], ["common"], ["the", "w010"], ["nothing"], ["w059"]):
        expected = oracle.get_scores(query)
        got = index.scores(query)
        actual = np.array([got[index.slot(k)] for k in keys])
        np.testing.assert_allclose(actual, expected, rtol=1e-9, atol=1e-12)


def test_idf_is_lucenes_so_a_term_in_every_entry_still_counts():
    index = BM25Index()
    index.put("a", ["concert", "tonight"], archived=False)
    index.put("b", ["concert", "tickets"], archived=False)
    assert index.idf("concert") == pytest.approx(math.log(1 + 0.5 / 2.5))  # n = N = 2
    assert index.idf("tickets") == pytest.approx(math.log(1 + 1.5 / 1.5))
    assert index.idf("absent") == 0.0
    index.remove("b")
    assert index.idf("concert") == pytest.approx(math.log(1 + 0.5 / 1.5))  # n = N = 1


def test_a_repeated_query_word_counts_once_as_in_the_reference():
    index = BM25Index()
    for i, toks in enumerate(_random_docs(5, 30)):
        index.put(f"d{i}", toks, archived=False)
    np.testing.assert_array_equal(
        index.scores(["w001", "w001", "common"]), index.scores(["w001", "common"])
    )


def test_scores_with_archived_scope_equal_an_oracle_over_all_documents():
    docs = _random_docs(7, 40)
    index = BM25Index()
    for i, toks in enumerate(docs):
        index.put(f"d{i}", toks, archived=i % 4 == 0)
    live = [i for i in range(40) if i % 4]
    for scope, members in ((False, live), (True, list(range(40)))):
        oracle = LuceneBM25([docs[i] for i in members])
        got = index.scores(["w003", "shared"], include_archived=scope)
        np.testing.assert_allclose(
            [got[index.slot(f"d{i}")] for i in members],
            oracle.get_scores(["w003", "shared"]),
            rtol=1e-9,
        )


def test_store_search_base_scores_equal_the_oracle_on_document_text(store):
    entries = [store.create(c, category=cat, tags=t) for c, cat, t in CORPUS]
    oracle = LuceneBM25([tokenize(document_text(e)) for e in entries])
    query = tokenize("python chicago")
    got = store.index().scores(query)
    np.testing.assert_allclose(
        [got[store.index().slot(e.id)] for e in entries], oracle.get_scores(query), rtol=1e-9
    )


def _seed(store):
    return {
        c.split()[0] + str(i): store.create(c, category=cat, tags=t)
        for i, (c, cat, t) in enumerate(CORPUS)
    }


def test_importance_boost_reorders_equal_matches(store):
    low = store.create("alpha bravo charlie", importance=0.1)
    high = store.create("alpha bravo delta", importance=0.9)
    for filler in ("echo foxtrot", "golf hotel", "india juliet", "kilo lima"):
        store.create(f"unrelated {filler}")
    hits = search(store, "alpha")
    assert [h.entry.id for h in hits] == [high.id, low.id]
    assert hits[0].score / hits[1].score == pytest.approx((0.5 + 0.45) / (0.5 + 0.05))


def test_consecutive_query_words_found_as_a_phrase_score_double(store):
    apart = store.create("chicago weather is cold, the office is downtown")
    together = store.create("the chicago office is downtown, weather is cold")
    for i in range(4):
        store.create(f"filler entry number {i} about nothing")
    hits = {h.entry.id: h.score for h in search(store, "chicago office")}
    base = store.index().scores(query_terms("chicago office"))
    b_apart = base[store.index().slot(apart.id)] * 0.75
    b_together = base[store.index().slot(together.id)] * 0.75
    assert hits[apart.id] == pytest.approx(b_apart)
    assert hits[together.id] == pytest.approx(2 * b_together)


def test_phrases_are_adjacent_terms_so_function_words_between_do_not_break_them(store):
    for i in range(5):
        store.create(f"filler entry number {i} about nothing")
    possessive = store.create("Chicago's office is downtown")
    function_words = store.create("Chicago has an office downtown")
    split = store.create("Chicago got a new office downtown")
    hits = {h.entry.id: h.score for h in search(store, "chicago office")}
    base = store.index().scores(query_terms("chicago office"))
    assert hits[possessive.id] == pytest.approx(2 * 0.75 * base[store.index().slot(possessive.id)])
    slot = store.index().slot(function_words.id)
    assert hits[function_words.id] == pytest.approx(2 * 0.75 * base[slot])
    assert hits[split.id] == pytest.approx(0.75 * base[store.index().slot(split.id)])


def test_a_match_in_a_one_entry_store_is_found_with_a_positive_score(store):
    only = store.create("User lives in Chicago")
    hits = search(store, "chicago")
    assert [h.entry.id for h in hits] == [only.id] and hits[0].score > 0
    assert search(store, "boston") == []


def test_a_two_entry_store_ranks_the_entry_with_more_occurrences_first(store):
    once = store.create("Concert tickets for the band on Friday")
    thrice = store.create("Concert at eight; the concert hall is near the concert bus stop")
    hits = search(store, "concert")
    assert [h.entry.id for h in hits] == [thrice.id, once.id]
    assert all(h.score > 0 for h in hits)
    # BM25Okapi's idf is negative for a term in both entries: it ranked them backwards.
    okapi = BM25Okapi([tokenize(document_text(e)) for e in (once, thrice)])
    assert okapi.get_scores(["concert"])[1] < okapi.get_scores(["concert"])[0]


def test_a_term_in_most_entries_adds_to_the_score_not_subtracts(store):
    both = store.create("weekly report on the budget")
    store.create("weekly standup notes")
    store.create("weekly planning session")
    one = store.create("budget review for the quarter")
    hits = search(store, "weekly budget")
    assert hits[0].entry.id == both.id
    assert {h.entry.id for h in hits} == {e.id for e in store.entries()}
    assert hits[-1].score > 0 and one.id in {h.entry.id for h in hits}


def test_zero_score_non_matches_are_dropped(store):
    _seed(store)
    assert all("python" in document_text(h.entry).lower() for h in search(store, "python"))
    assert search(store, "zzz qqq") == []
    assert search(store, "a an of") == []  # no token of 3+ characters


def test_category_filter_is_a_whole_segment_case_insensitive_prefix(store):
    a = store.create("fact about tools", category="a/b")
    ab = store.create("fact about tools too", category="a/b/c")
    store.create("fact about tools as well", category="a/bc")
    store.create("fact about tools again")
    for query in ("tools", None):
        got = {h.entry.id for h in search(store, query, category="A/B")}
        assert got == {a.id, ab.id}


def test_tag_filter_requires_every_tag(store):
    both = store.create("tagged fact one", tags=["x", "Y"])
    store.create("tagged fact two", tags=["x"])
    assert [h.entry.id for h in search(store, "tagged fact", tags=["x", "y"])] == [both.id]
    assert [h.entry.id for h in search(store, None, tags=["y", "x"])] == [both.id]


def test_include_archived(store):
    gone = store.create("archived zebra fact")
    store.create("live zebra fact")
    store.archive(gone.id, "deleted by agent tool")
    assert gone.id not in {h.entry.id for h in search(store, "zebra")}
    assert gone.id in {h.entry.id for h in search(store, "zebra", include_archived=True)}


def test_browse_orders_by_last_seen_descending_and_caps(store, clock):
    ids = []
    for i in range(25):
        ids.append(store.create(f"entry {i}").id)
        clock.advance(minutes=1)
    store.update(ids[3], last_seen_at=clock.advance(minutes=1))
    hits = search(store, None)
    assert len(hits) == 20
    assert hits[0].entry.id == ids[3]
    assert [h.entry.id for h in hits[1:4]] == [ids[24], ids[23], ids[22]]


def test_limit_applies_after_ranking(store):
    for i in range(30):
        store.create(f"repeated topic entry {i}", importance=i / 30)
    hits = search(store, "topic", limit=5)
    assert len(hits) == 5
    assert hits[0].entry.importance_score == pytest.approx(29 / 30)


NOW = datetime(2026, 12, 2, 12, tzinfo=UTC)


def _entry(**kw) -> MemoryEntry:
    base = dict(
        id="0123456789ab",
        content="User is in Chicago",
        category="user/tz",
        created_at=NOW,
        last_seen_at=NOW,
        importance_score=0.5,
    )
    return MemoryEntry(**{**base, **kw})


@pytest.mark.parametrize(
    ("kw", "age"),
    [
        ({}, "first seen today"),
        ({"created_at": datetime(2026, 11, 30, tzinfo=UTC)}, "first seen 2 days ago"),
        ({"created_at": datetime(2026, 12, 1, tzinfo=UTC)}, "first seen 1 day ago"),
        (
            {"created_at": datetime(2026, 11, 22, tzinfo=UTC), "reinforcement_count": 4},
            "seen 4× from 10d ago to today",
        ),
        (
            {
                "created_at": datetime(2024, 6, 3, tzinfo=UTC),
                "reinforcement_count": 4,
                "last_seen_at": datetime(2026, 10, 5, tzinfo=UTC),
            },
            "seen 4× from 2024-06 to 2026-10-05",
        ),
    ],
)
def test_age_phrase(kw, age):
    assert format_age(_entry(**kw), NOW) == age


def test_result_line_format_with_source():
    line = format_hit(_entry(importance_score=0.9, metadata={"source": "user"}), NOW)
    assert line == (
        "- [0123456789ab] (user/tz, importance=0.90, first seen today, "
        "source=user): User is in Chicago"
    )
    assert format_hit(_entry(category=None), NOW).startswith(
        "- [0123456789ab] (uncategorized, importance=0.50, first seen today): "
    )


def test_taxonomy_lists_counts():
    assert format_taxonomy({"": 1, "a/b": 2}) == (
        "Categories (live entries):\n  uncategorized (1)\n  a/b (2)"
    )
    assert format_taxonomy({}) == "Categories: none yet."


def test_a_phrase_is_two_adjacent_tokens_of_one_document_never_across_two():
    index = BM25Index()
    index.put("ends", ["alpha", "omega"], archived=False)
    index.put("starts", ["beta", "gamma"], archived=False)  # "omega beta" only across them
    index.put("inside", ["gamma", "omega", "beta"], archived=False)
    index.put("apart", ["omega", "gamma", "beta"], archived=False)
    everything = np.arange(4)
    found = index.phrase_slots([("omega", "beta")], among=everything)
    assert [index.key_at(s) for s in found] == ["inside"]
    assert index.phrase_slots([("beta", "omega")], among=everything).size == 0
    both = index.phrase_slots([("alpha", "omega"), ("omega", "beta")], among=everything)
    assert sorted(index.key_at(s) for s in both) == ["ends", "inside"]
    assert index.phrase_slots([("omega", "beta")], among=np.array([0, 1, 3])).size == 0


def test_replacing_documents_through_a_compaction_keeps_scores_exact():
    index = BM25Index()
    docs = {f"d{i}": [f"w{i % 7}", "shared", f"u{i}"] for i in range(200)}
    for key, toks in docs.items():
        index.put(key, toks, archived=False)
    # Replace most documents: each replacement kills a slot, so compaction runs inside put.
    for i in range(150):
        docs[f"d{i}"] = [f"w{(i + 3) % 7}", "edited", f"v{i}"]
        index.put(f"d{i}", docs[f"d{i}"], archived=False)
    keys = list(docs)
    oracle = LuceneBM25([docs[k] for k in keys])
    got = index.scores(["w3", "edited"])
    np.testing.assert_allclose(
        [got[index.slot(k)] for k in keys], oracle.get_scores(["w3", "edited"])
    )


def _created_around(store, clock) -> tuple[datetime, dict[str, str]]:
    """Three entries created one second before, exactly at, and one second after T."""
    t = clock.now + timedelta(days=1)
    ids = {}
    for name, offset in (("before", -1), ("at", 0), ("after", 1)):
        clock.now = t + timedelta(seconds=offset)
        ids[name] = store.create(f"dated fact created {name} the bound").id
    return t, ids


@pytest.mark.parametrize("query", ["dated fact", None])
def test_created_bounds_are_inclusive_at_both_ends(store, clock, query):
    t, ids = _created_around(store, clock)

    def found(**bounds) -> set[str]:
        return {h.entry.id for h in search(store, query, **bounds)}

    assert found(created_after=t) == {ids["at"], ids["after"]}
    assert found(created_before=t) == {ids["before"], ids["at"]}
    assert found(created_after=t, created_before=t) == {ids["at"]}
    assert found(created_after=t + timedelta(seconds=2)) == set()


def test_created_bounds_accept_iso_text_dates_as_midnight_utc_and_offsets(store, clock):
    t, ids = _created_around(store, clock)  # T is 2026-01-02 12:00 UTC
    assert {h.entry.id for h in search(store, None, created_after="2026-01-02")} == set(
        ids.values()
    )
    assert search(store, None, created_before="2026-01-02") == []  # midnight, not end of day
    same_instant = t.astimezone(timezone(timedelta(hours=-6))).isoformat()  # 06:00-06:00
    assert {h.entry.id for h in search(store, None, created_before=same_instant)} == {
        ids["before"],
        ids["at"],
    }
    naive = t.replace(tzinfo=None)  # naive times are UTC
    assert {h.entry.id for h in search(store, None, created_after=naive)} == {
        ids["at"],
        ids["after"],
    }
    assert len(search(store, None, created_after=" ", created_before="")) == 3  # blank: no bound


@pytest.mark.parametrize(
    "bounds",
    [
        {"created_after": "yesterday"},
        {"created_before": "2026-13-01"},
        {"created_after": "2026-02-01", "created_before": "2026-01-01"},
    ],
)
def test_bad_or_inverted_created_bounds_are_refused(store, bounds):
    store.create("a fact")
    with pytest.raises(InvalidInput, match="created"):
        search(store, "fact", **bounds)


def test_tags_are_the_distinct_tags_of_live_entries_sorted_case_insensitively(store):
    store.create("one", tags=["work", "Travel"])
    store.create("two", tags=["travel", "anniversary"])
    store.create("three")
    gone = store.create("four", tags=["zebra"])
    store.archive(gone.id, "deleted by agent tool")
    assert store.tags() == ["anniversary", "Travel", "work"]
    assert {h.entry.content for h in search(store, None, tags=["TRAVEL"])} == {"one", "two"}


@pytest.mark.parametrize("query", ["meeting notes", None])
def test_metadata_filter_is_an_exact_match_on_every_given_key(store, query):
    user = store.create("meeting notes one", metadata={"source": "user", "project": "apollo"})
    tool = store.create("meeting notes two", metadata={"source": "tool:web", "project": "apollo"})
    store.create("meeting notes three")

    def found(**metadata) -> set[str]:
        return {h.entry.id for h in search(store, query, metadata=metadata)}

    assert found(source="user") == {user.id}
    assert found(project="apollo") == {user.id, tool.id}
    assert found(project="apollo", source="tool:web") == {tool.id}
    assert found(source="User") == set()  # exact, case-sensitive
    assert found(source="use") == set()  # whole values, not prefixes
    assert found(missing="x") == set()
    assert {h.entry.id for h in search(store, query, metadata={})} >= {user.id, tool.id}


@pytest.mark.parametrize("bad", [{"": "x"}, {"k": 1}, ["k", "v"], "source=user"])
def test_a_malformed_metadata_filter_is_refused(store, bad):
    store.create("a fact")
    with pytest.raises(InvalidInput, match="metadata"):
        search(store, "fact", metadata=bad)


def test_tags_and_category_words_are_scored_and_filters_do_not_score(store):
    tagged = store.create("Passport renewal form", tags=["travel"])
    categorized = store.create("Passport photo size", category="travel/documents")
    store.create("Passport number kept in the safe")
    assert {h.entry.id for h in search(store, "travel")} == {tagged.id, categorized.id}
    scores = {h.entry.id: h.score for h in search(store, "passport")}
    filtered = {h.entry.id: h.score for h in search(store, "passport", tags=["travel"])}
    assert filtered == {tagged.id: scores[tagged.id]}


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["put", "put", "put", "remove", "archive", "restore", "snapshot"]),
        st.integers(0, 39),
        st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h"]), max_size=12),
    ),
    max_size=120,
)


@pytest.mark.parametrize("narrow", [1 << 16, 3])
@settings(max_examples=40, deadline=None)
@given(ops=_OPS)
def test_postings_kept_packed_score_exactly_as_an_index_built_afresh(narrow, ops):
    """The base arrays, the postings added on top and their packing, the frequencies'
    smaller type, token ids in two bytes and widened (at 3 terms), a snapshot round
    trip: none of it changes a score's last bit or a document's tokens."""
    from dreamkeeper.stores.search import bm25

    saved, bm25._NARROW_TOKENS = bm25._NARROW_TOKENS, narrow
    try:
        _replay_and_compare(ops)
    finally:
        bm25._NARROW_TOKENS = saved


def _replay_and_compare(ops: list) -> None:
    index = BM25Index()
    index.PACK_MIN = 3  # pack often
    docs: dict[str, tuple[list[str], bool]] = {}
    for op, n, tokens in ops:
        key = f"d{n}"
        if op == "put":
            archived = docs.get(key, ([], False))[1]
            index.put(key, tokens, archived=archived)
            docs[key] = (tokens, archived)
        elif op == "remove":
            index.remove(key)
            docs.pop(key, None)
        elif op in ("archive", "restore") and key in docs:
            index.set_archived(key, op == "archive")
            docs[key] = (docs[key][0], op == "archive")
        elif op == "snapshot":
            sections, shape = index.to_sections()
            index = BM25Index.from_sections(lambda name, s=sections: memoryview(s[name]), shape)
            index.PACK_MIN = 3
    fresh = BM25Index()
    for key, (tokens, archived) in docs.items():
        fresh.put(key, tokens, archived=archived)
    for query in (["a"], ["b", "c"], ["h", "a", "e"]):
        for wide in (False, True):
            got = index.scores(query, include_archived=wide)
            want = fresh.scores(query, include_archived=wide)
            assert {k: got[index.slot(k)] for k in docs} == {k: want[fresh.slot(k)] for k in docs}
    phrases = [("a", "b"), ("c", "a")]
    found = {index.key_at(s) for s in index.phrase_slots(phrases).tolist()}
    assert found == {fresh.key_at(s) for s in fresh.phrase_slots(phrases).tolist()}
    for key, (tokens, _) in docs.items():
        held = index._doc_tokens(index.slot(key))  # type: ignore[arg-type]
        assert [index._token_str[t] for t in held.tolist()] == tokens  # type: ignore[union-attr]


def test_an_index_holds_its_postings_and_tokens_in_a_few_arrays_whatever_its_size():
    """Not an array object per document and two per term: in a large store's index those
    objects' overhead was more than the ids they held. What is left per document is its
    key and slot, per term its string, id and counts."""
    import tracemalloc

    index = BM25Index()
    docs, terms = 3000, 3501
    for i in range(docs):
        index.put(f"d{i}", [f"t{i}", f"u{i % 500}", "shared", f"t{i}"], archived=False)
    sections, shape = index.to_sections()
    assert shape["terms"] == terms
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        opened = BM25Index.from_sections(lambda name: memoryview(sections[name]), shape)
        blocks = sum(
            s.count_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename")
        )
    finally:
        tracemalloc.stop()
    assert blocks < 3 * docs + 4 * terms
    assert opened.scores(["shared", "t7"]).tolist() == index.scores(["shared", "t7"]).tolist()
