"""The recall gate's pure rules: canary terms, and what carries them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dreamkeeper.policies.recall_gate import (
    canary_terms,
    carrier_rank,
    carries,
    carries_term,
    ordinary_terms,
)

words = st.text(alphabet="abcdefghij", min_size=1, max_size=9)


def test_the_rarest_terms_win_and_ties_go_alphabetically():
    idf = {"window": 3.0, "flight": 1.0, "prefer": 1.0, "seat": 1.0}.__getitem__
    assert canary_terms(["seat", "prefer", "window", "flight"], idf) == ["window", "flight"]


def test_specifics_digits_and_short_words_are_not_canary_terms():
    tokens = ["trish", "window", "2019", "v2", "at", "seat"]
    assert ordinary_terms(tokens, {"trish"}) == {"window", "seat"}


def test_an_inflection_carries_a_term_a_dropped_word_does_not():
    assert carries_term("wrote", frozenset({"write", "oauth"}))
    assert carries_term("window", frozenset({"window"}))
    assert not carries_term("window", frozenset({"seat", "flight"}))
    assert not carries_term("met", frozenset({"mat"}))  # short words: one edit is a word


def test_the_rank_is_the_entrys_own_and_only_if_it_carries_every_term():
    ranked = [("x", frozenset({"seat"})), ("m", frozenset({"window", "seat"}))]
    assert carrier_rank(ranked, "m", ["window", "seat"]) == 2
    assert carrier_rank(ranked, "x", ["window", "seat"]) == 0
    assert carrier_rank(ranked, "absent", ["seat"]) == 0


@given(st.lists(words, max_size=12), st.integers(min_value=0, max_value=5))
def test_canary_terms_are_distinct_terms_of_the_source_deterministically(tokens, n):
    idf = lambda t: float(len(t) % 3)  # noqa: E731 - a deterministic stand-in
    got = canary_terms(tokens, idf, n)
    assert got == canary_terms(list(reversed(tokens)), idf, n)
    assert len(got) == len(set(got)) <= n and set(got) <= set(tokens)


@given(st.sets(words, max_size=8))
def test_a_text_carries_its_own_terms(tokens):
    assert carries(frozenset(tokens), sorted(tokens))
