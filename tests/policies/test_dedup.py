from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.coverage import DEFAULT_VOCABULARY
from dreamkeeper.policies.dedup import (
    Candidate,
    DedupDecision,
    DedupOutcome,
    bypasses_dedup,
    closest,
    content_tokens,
    covers,
    decide,
    decide_best,
    fact_words,
    jaccard,
    near_duplicates,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=10)


def _existing(content: str, **kw) -> MemoryEntry:
    base = dict(
        id="0123456789ab",
        content=content,
        category="people/colleagues",
        tags=["work"],
        created_at=T0,
        last_seen_at=T0,
        importance_score=0.6,
        metadata={"source": "inferred"},
    )
    return MemoryEntry(**{**base, **kw})


def test_jaccard_tokens_are_longer_than_three_characters():
    assert content_tokens("Don't use the AI tool, Rocky's") == {"don't", "tool", "rocky's"}
    assert jaccard(frozenset({"abcd", "efgh"}), frozenset({"abcd"})) == 0.5


def test_below_threshold_is_created():
    match = _existing("Trish Roberts runs PWOP Productions")
    decision = decide(Candidate("Trish likes jazz", "people/colleagues"), match, 0.2, NOW)
    assert decision.outcome is DedupOutcome.CREATED and decision.updated is None


def test_covered_near_duplicate_is_reinforced_without_touching_text_or_updated_at():
    match = _existing("Trish Roberts runs PWOP Productions in Las Vegas")
    cand = Candidate(
        "Trish Roberts runs PWOP Productions",
        "people/colleagues",
        tags=("people",),
        metadata=(("source", "user"), ("team", "pwop")),
        importance=0.9,
    )
    decision = decide(cand, match, 0.8, NOW)
    assert decision.outcome is DedupOutcome.REINFORCED
    got = decision.updated
    assert got.content == match.content and got.updated_at is None
    assert got.tags == ["work", "people"] and got.importance_score == 0.9
    assert got.last_seen_at == NOW and got.reinforcement_count == 2
    assert got.metadata == {"source": "user", "team": "pwop"}  # trust rises with evidence


def test_new_specifics_extend_and_take_the_least_trusted_source():
    match = _existing("Trish Roberts runs PWOP Productions", metadata={"source": "user"})
    cand = Candidate(
        "Trish Roberts runs PWOP Productions from Las Vegas",
        "people/colleagues",
        metadata=(("source", "inferred"),),
    )
    decision = decide(cand, match, 0.7, NOW)
    assert decision.outcome is DedupOutcome.EXTENDED
    got = decision.updated
    assert got.content == f"{match.content}\n\n{cand.content}"
    assert got.updated_at == NOW and got.reinforcement_count == 2
    assert got.metadata["source"] == "inferred"


def test_extension_past_the_length_cap_is_created_instead():
    text = "Trish Roberts runs PWOP Productions " + " ".join(f"w{n}" for n in range(300))
    match = _existing(text)
    cand = Candidate(f"{text} from Las Vegas", "people/colleagues")  # restates and adds
    assert len(text) < 2000 < len(match.content) + len(cand.content)
    assert decide(cand, match, 0.9, NOW).outcome is DedupOutcome.CREATED
    short = _existing("Trish Roberts runs PWOP Productions")
    more = Candidate("Trish Roberts runs PWOP Productions from Las Vegas", "people/colleagues")
    extended = decide(more, short, 0.9, NOW)
    assert extended.outcome is DedupOutcome.EXTENDED  # the same addition, under the cap


@pytest.mark.parametrize("category", ["feedback", "feedback/x", "claim/capability/y"])
def test_scoped_categories_bypass_dedup(category):
    assert bypasses_dedup(category)
    match = _existing("same text", category=category)
    assert decide(Candidate("same text", category), match, 1.0, NOW).outcome is DedupOutcome.CREATED


def test_closest_stays_in_the_top_level_category_and_skips_archived():
    same = _existing("weekly sync with trish roberts about pwop", id="00000000000a")
    other = _existing(
        "weekly sync with trish roberts about pwop", id="00000000000b", category="travel"
    )
    archived = _existing(
        "weekly sync with trish roberts about pwop exactly",
        id="00000000000c",
        archived_at=T0,
        archive_reason="x",
    )
    uncategorized = _existing(
        "weekly sync with trish roberts about pwop", id="00000000000d", category=None
    )
    cand = Candidate("weekly sync with trish roberts about pwop", "people/other")
    best, score, _ = closest(cand, [other, archived, uncategorized, same])
    assert best.id == same.id and score == 1.0
    none_cand = Candidate("weekly sync with trish roberts about pwop", None)
    assert closest(none_cand, [same, other, uncategorized])[0].id == uncategorized.id


def test_the_same_fact_with_an_identifier_reinforces_instead_of_extending():
    text = "Project Meridian27 budget is 121000 dollars, due October 5, 2027."
    match = _existing(text)
    decision = decide(Candidate(text, "people/colleagues"), match, 1.0, NOW)
    assert decision.outcome is DedupOutcome.REINFORCED
    assert decision.updated.content == text


def test_cosine_finds_a_short_restatement_jaccard_misses_and_reinforces_it():
    import numpy as np

    existing = _existing("The family hound, a beagle from Ohio, is called Biscuit")
    cand = Candidate("The hound is called Biscuit", "people/colleagues")
    # Three content tokens of seven: by Jaccard this is a new entry.
    match, similarity, threshold = closest(cand, [existing])
    assert threshold == 0.60 and similarity < threshold
    assert decide(cand, match, similarity, NOW, threshold=threshold).outcome is DedupOutcome.CREATED
    # Both embedded, close in meaning: cosine finds it, and it says nothing new.
    vectors = {existing.id: np.array([0.9, 0.1, 0.0, 0.42])}
    match, similarity, threshold = closest(
        cand,
        [existing],
        candidate_vector=np.array([0.95, 0.0, 0.05, 0.3]),
        vector_of=lambda e: vectors.get(e.id),
    )
    assert threshold == 0.88 and similarity >= threshold and match.id == existing.id
    decision = decide(cand, match, similarity, NOW, threshold=threshold)
    assert decision.outcome is DedupOutcome.REINFORCED
    assert decision.updated.content == existing.content


def test_a_paraphrase_in_other_words_is_created_even_when_cosine_matches():
    # Cosine cannot tell "red" from "blue", so other words are not proof of a repeat: the
    # paraphrase stays its own entry, and the dream's cosine clustering shows the pair to
    # the merge. (This was reinforced before; a wrong reinforcement is the worse error.)
    existing = _existing("The family hound is called Biscuit")
    cand = Candidate("Our dog's name: Biscuit", "people/colleagues")
    assert decide(cand, existing, 0.97, NOW, threshold=0.88).outcome is DedupOutcome.CREATED


def test_cosine_below_its_threshold_is_not_rescued_by_jaccard():
    import numpy as np

    existing = _existing("Trish Roberts runs PWOP Productions")
    cand = Candidate("Trish Roberts runs PWOP Productions now", "people/colleagues")
    match, similarity, threshold = closest(
        cand,
        [existing],
        candidate_vector=np.array([1.0, 0.0]),
        vector_of=lambda e: np.array([0.5, 0.75**0.5]),
    )
    # Jaccard would say 0.8 (a match); both are embedded, so cosine decides: 0.5 is not.
    assert threshold == 0.88 and similarity == pytest.approx(0.5)
    assert decide(cand, match, similarity, NOW, threshold=threshold).outcome is DedupOutcome.CREATED


# -- a repeat is the same fact seen again; a different value is its own entry ----------------


def _outcome(existing: str, candidate: str, similarity: float = 1.0) -> DedupOutcome:
    """The decision at or above the threshold: what the similarity cannot settle."""
    return decide(
        Candidate(candidate, "people/colleagues"), _existing(existing), similarity, NOW
    ).outcome


def test_a_new_phone_number_is_neither_a_repeat_nor_an_extension():
    first, second = "Bob's phone number is 555-1234.", "Bob's phone number is 555-9876."
    # Similar enough to be compared (it was glued on and counted "seen 2×")...
    match, similarity, threshold = closest(Candidate(second, "people/x"), [_existing(first)])
    assert similarity >= threshold
    # ...but a different value for the same thing: its own entry, in either order.
    assert _outcome(first, second, similarity) is DedupOutcome.CREATED
    assert _outcome(second, first, similarity) is DedupOutcome.CREATED


def test_a_one_digit_number_is_a_specific_of_the_fact():
    assert _outcome("The Granite team has 20 people.", "The Granite team has 3 people.") is (
        DedupOutcome.CREATED
    )
    assert _outcome("The Granite team has 3 people.", "The Granite team has 20 people.") is (
        DedupOutcome.CREATED
    )
    assert _outcome("Office on the 3rd floor.", "Office on the 4th floor.") is DedupOutcome.CREATED


@pytest.mark.parametrize(
    ("existing", "candidate"),
    [
        ("Bob's phone number is 555-1234.", "bob's phone number: 555-1234"),
        ("The Granite team has 3 people.", "Granite team has 3 people!"),
        ("Trish Roberts is the CEO of PWOP Productions.", "TRISH ROBERTS, CEO, PWOP PRODUCTIONS"),
        ("Bob doesn't eat meat.", "Bob does not eat meat"),
        ("Dr. May Lee works at the clinic. She has 2 cats.", "She has 2 cats."),
    ],
)
def test_a_repeat_reworded_in_filler_words_case_or_punctuation_is_reinforced(existing, candidate):
    assert _outcome(existing, candidate) is DedupOutcome.REINFORCED


@pytest.mark.parametrize(
    ("existing", "candidate"),
    [
        # Words of three letters or fewer are no Jaccard tokens (similarity 1.0 here).
        ("Bob's car is red.", "Bob's car is tan."),
        ("Bob flies to Paris on Monday.", "Bob flies from Paris on Monday."),
        ("Bob is the CEO of Acme.", "Bob is not the CEO of Acme."),
        ("Bob is not the CEO of Acme.", "Bob is the CEO of Acme."),
        ("Bob was the CEO of Acme.", "Bob is the CEO of Acme."),
        # Every word is somewhere in the entry, but no one sentence says it.
        ("Bob's phone is 555-1234. Alice's phone is 555-9876.", "Bob's phone is 555-9876."),
        # Adds a detail, but replaces the city: not an extension.
        ("Bob works at Acme in Boston.", "Bob works at Acme in Denver since 2020."),
    ],
)
def test_a_different_fact_with_the_same_words_is_created(existing, candidate):
    assert _outcome(existing, candidate) is DedupOutcome.CREATED


def test_an_extension_restates_the_whole_entry_and_adds_to_it():
    existing = "Bob works at Acme. His team has 4 people."
    assert _outcome(existing, "Bob works at Acme in Boston. His team has 4 people.") is (
        DedupOutcome.EXTENDED
    )
    # Leaving a sentence out is no restatement: it may be a change, so its own entry.
    assert _outcome(existing, "Bob works at Acme in Boston.") is DedupOutcome.CREATED


def test_fact_words_read_contractions_and_drop_only_glue():
    assert fact_words("Bob's team doesn't have 3 people; it can't.") == {
        "bob",
        "team",
        "not",
        "3",
        "people",
        "can",
    }
    assert fact_words("Flight TO Paris, not from it") == {"flight", "to", "paris", "not", "from"}


def test_covers_needs_one_sentence_not_the_whole_text():
    assert covers("Dr. May Lee works here. Bob too.", "May Lee works here")
    assert not covers("Lee works here. May is away.", "May Lee works here")


# A specific the existing text lacks: any number (one digit too), a capitalized
# uncommon word, an acronym. With it, a candidate can never be a reinforcement.
_POOL = ["team", "phone", "number", "works", "office", "floor", "people", "room", "car", "the"]
_NUMBERS = st.integers(min_value=0, max_value=99_999).map(str)
_NAMES = st.text(alphabet="bcdfghjklmnpqrstvwxz", min_size=3, max_size=8).map(str.capitalize)
_ACRONYMS = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=2, max_size=5)


@given(
    existing=st.lists(
        st.sampled_from([*_POOL, "3", "20", "Acme", "555-1234"]), min_size=1, max_size=10
    ),
    kept=st.lists(st.sampled_from(_POOL), max_size=8),
    specific=st.one_of(_NUMBERS, _NAMES, _ACRONYMS),
    at=st.integers(min_value=0, max_value=8),
    similarity=st.floats(min_value=0.6, max_value=1.0),
)
def test_a_candidate_with_a_specific_the_entry_lacks_is_never_reinforced(
    existing, kept, specific, at, similarity
):
    text = " ".join(existing) + "."
    tokens = set(re.findall(r"[^\W_]+", text.lower()))
    assume(specific.lower() not in tokens and not DEFAULT_VOCABULARY.is_common(specific))
    words = [*kept]
    words.insert(min(at, len(words)), specific)
    candidate = " ".join(words) + "."
    outcome = decide(Candidate(candidate, "people/x"), _existing(text), similarity, NOW).outcome
    assert outcome is not DedupOutcome.REINFORCED


@given(
    words=st.lists(st.sampled_from(_POOL), min_size=1, max_size=8),
    old=st.integers(min_value=0, max_value=9_999),
    new=st.integers(min_value=0, max_value=9_999),
    at=st.integers(min_value=0, max_value=8),
)
def test_a_changed_number_is_always_its_own_entry(words, old, new, at):
    assume(old != new)
    before, after = [*words], [*words]
    before.insert(min(at, len(words)), str(old))
    after.insert(min(at, len(words)), str(new))
    assert _outcome(" ".join(before), " ".join(after)) is DedupOutcome.CREATED


def test_a_repeat_is_found_among_equally_similar_versions():
    three = _existing("The Granite team has 3 people.", id="00000000000a")
    twenty = _existing("The Granite team has 20 people.", id="00000000000b")
    cand = Candidate("The Granite team has 20 people.", "people/x")
    # By content tokens both score 1.0 ("3" and "20" are too short to count)...
    assert closest(cand, [three, twenty])[0].id == three.id
    # ...so the decision is asked of each, and the repeat of "20" is what it is.
    near = near_duplicates(cand, [three, twenty])
    assert [(e.id, s) for e, s, _ in near] == [(twenty.id, 1.0), (three.id, 1.0)]
    match, decision = decide_best(cand, near, NOW)
    assert match.id == twenty.id and decision.outcome is DedupOutcome.REINFORCED
    assert decide_best(Candidate("The Granite team has 9 people.", "people/x"), near, NOW) == (
        None,
        DedupDecision(DedupOutcome.CREATED, similarity=1.0),
    )
