from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.dedup import (
    Candidate,
    DedupOutcome,
    bypasses_dedup,
    closest,
    content_tokens,
    decide,
    jaccard,
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
    match = _existing("Trish Roberts " + "x" * 1990)
    cand = Candidate("Trish Roberts lives in Las Vegas", "people/colleagues")
    assert decide(cand, match, 0.9, NOW).outcome is DedupOutcome.CREATED


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


def test_cosine_reinforces_a_paraphrase_that_jaccard_would_create():
    import numpy as np

    existing = _existing("The family hound is called Biscuit")
    cand = Candidate("Our dog's name: Biscuit", "people/colleagues")
    # Few shared content tokens: by Jaccard this is a new entry.
    match, similarity, threshold = closest(cand, [existing])
    assert threshold == 0.60 and similarity < threshold
    assert decide(cand, match, similarity, NOW, threshold=threshold).outcome is DedupOutcome.CREATED
    # Both embedded, close in meaning: by cosine it is the same fact, seen again.
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
    assert decision.updated.content == existing.content  # "Biscuit" already covered


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
