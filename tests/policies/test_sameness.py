"""policies.supersede in three values: the same subject, positively another, or cannot
tell — and a reading (an embedding model's "which attribute's question does this fact
answer?") settles only what the vocabulary cannot tell."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.subject import (
    ATTRIBUTES,
    READING_MARGIN,
    Reading,
    questions,
    subject_of,
)
from dreamkeeper.policies.supersede import Sameness, judge, likely_conflict, objection

NOW = datetime(2026, 1, 1, tzinfo=UTC)
NAMES = [a.name for a in ATTRIBUTES]


def _entry(content: str, category: str | None = "people") -> MemoryEntry:
    return MemoryEntry(
        id="0123456789ab", content=content, category=category, created_at=NOW, last_seen_at=NOW
    )


def _reading(attribute: str, lead: float = 0.1) -> Reading:
    """A reading that names `attribute`: its question answered best, by `lead`."""
    return Reading(tuple((n, 0.6 if n == attribute else 0.6 - lead) for n in NAMES))


# -- cannot tell is not different ------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # The vocabulary names one side's attribute only.
        ("Ana Costa lives in Lisbon.", "Ana Costa is renting in Ghent these days."),
        ("Lea Sato drives a Volvo V60.", "Lea Sato now zips about town in a Kia Niro."),
        # Two attributes worded as each other.
        ("Ana Sato works at Vexa.", "Ana Sato left for a role at Quill."),
        ("Maya's manager is Tom.", "Maya is a manager at Vexa."),
        # Another value of an attribute outside the vocabulary.
        ("Omar Wei switched to a Mazda CX-5.", "Omar Wei switched to a Renault Zoe."),
        # An entity one fact names in another role.
        ("Ana Berg works at Vexa.", "Ambertide just brought Ana Berg on board."),
        ("Omar works at Vexa.", "Omar joined the book club."),
    ],
)
def test_what_the_vocabulary_cannot_tell_is_neither_refused_nor_the_same(old, new):
    verdict = judge(_entry(old), new, "people")
    assert verdict.sameness is Sameness.UNKNOWN, verdict.reason
    assert not verdict.allowed
    assert objection(_entry(old), new, "people") is None
    assert not likely_conflict(_entry(old), new, "people", strict=False)


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ("Mei lives in Lisbon.", "Mei is allergic to cats.", "another attribute"),
        ("Tom lives in Lisbon.", "Tom's sister moved to Porto.", "another subject"),
        ("Maya Lund lives in Lisbon.", "Ana Ruiz moved to Porto.", "another subject"),
        ("Mei is allergic to cats.", "Mei is allergic to peanuts.", "both may hold at once"),
        ("Maya Lund lives in Lisbon.", "Maya Lund lives in Lisbon.", "a repeat"),
        ("The user likes tea.", "The weather is cold.", "no shared subject"),
    ],
)
def test_a_positively_different_subject_is_refused_whatever_the_readings_say(old, new, reason):
    # Even readings naming one attribute for both cannot make two entities one, two
    # vocabulary attributes no one words as each other one, or a repeat a change.
    for readings in ({}, {"old_reading": _reading("home"), "new_reading": _reading("home")}):
        verdict = judge(_entry(old), new, "people", **readings)
        assert verdict.sameness is Sameness.DIFFERENT
        assert reason in verdict.reason
        assert objection(_entry(old), new, "people", **readings) == verdict.reason


def test_a_reading_settles_the_attribute_the_vocabulary_could_not_name():
    old, new = _entry("Ana Costa lives in Lisbon."), "Ana Costa is renting in Ghent these days."
    verdict = judge(old, new, "people", new_reading=_reading("home"))
    assert verdict.sameness is Sameness.SAME and not verdict.by_rules
    assert verdict.attribute == "home"
    # Same subject by a reading: a likely conflict for save-time detection, but not one a
    # dream settles unasked (strict: the vocabulary alone).
    assert likely_conflict(old, new, "people", new_reading=_reading("home"), strict=False)
    assert not likely_conflict(old, new, "people", new_reading=_reading("home"))
    # A reading naming another attribute, or none that stands out, leaves it untold.
    other = judge(old, new, "people", new_reading=_reading("employer"))
    assert other.sameness is Sameness.UNKNOWN
    flat = judge(old, new, "people", new_reading=_reading("home", lead=READING_MARGIN / 2))
    assert flat.sameness is Sameness.UNKNOWN


def test_two_related_attributes_are_one_when_both_readings_say_so():
    old, new = _entry("Ana Sato works at Vexa."), "Ana Sato left for a role at Quill."
    both = {"old_reading": _reading("employer"), "new_reading": _reading("employer")}
    assert judge(old, new, "people", **both).sameness is Sameness.SAME
    split = {"old_reading": _reading("employer"), "new_reading": _reading("role")}
    assert judge(old, new, "people", **split).sameness is Sameness.UNKNOWN


def test_a_many_valued_attribute_read_as_one_is_still_many_valued():
    old, new = _entry("Mei is allergic to cats."), "Mei reacts badly to peanuts."
    verdict = judge(old, new, "people", new_reading=_reading("allergy"))
    assert verdict.sameness is Sameness.DIFFERENT


def test_every_attribute_has_a_question_asked_of_the_facts_entity():
    asked = questions(subject_of("Ana Costa is renting in Ghent these days."))
    assert {name for name, _ in asked} == set(NAMES)
    assert ("home", "Where does Ana Costa live?") in asked
    assert ("home", "Where does the user live?") in questions(subject_of("I just moved to Lisbon."))
    assert ("home", "Where does Tom's sister live?") in questions(
        subject_of("Tom's sister lives in Oslo.")
    )
    assert questions(subject_of("The weather is cold.")) == ()


# -- generated --------------------------------------------------------------------------------

PEOPLE = ["Maya Lund", "Tom Berg", "Ana Ruiz", "Li Wei"]
TEXTS = st.sampled_from(
    [
        "{e} lives in Lisbon.",
        "{e} is renting in Ghent these days.",
        "{e} works at Vexa.",
        "{e} left for a role at Quill.",
        "{e} is allergic to cats.",
        "{e} was born in Lyon.",
        "{e} switched to a Mazda CX-5.",
        "{e} had lunch with Sara Silva in Tartu.",
        "{e}'s sister moved to Porto.",
        "Call {e} on +1 291-347-7545 from now on.",
    ]
)
READINGS = st.one_of(
    st.none(),
    st.builds(
        Reading,
        st.lists(st.floats(-1, 1, allow_nan=False), min_size=len(NAMES), max_size=len(NAMES)).map(
            lambda xs: tuple(zip(NAMES, xs, strict=True))
        ),
    ),
)


@settings(max_examples=400, deadline=None)
@given(
    old=TEXTS,
    new=TEXTS,
    first=st.sampled_from(PEOPLE),
    second=st.sampled_from(PEOPLE),
    old_reading=READINGS,
    new_reading=READINGS,
)
def test_readings_only_ever_settle_what_the_vocabulary_cannot_tell(
    old, new, first, second, old_reading, new_reading
):
    old_text, new_text = old.format(e=first), new.format(e=second)
    bare = judge(_entry(old_text), new_text, "people")
    read = judge(
        _entry(old_text), new_text, "people", old_reading=old_reading, new_reading=new_reading
    )
    if bare.sameness is not Sameness.UNKNOWN:
        # What the vocabulary decided, a reading never changes.
        assert read.sameness is bare.sameness, (old_text, new_text, bare.reason, read.reason)
    if first != second:
        assert not read.allowed, (old_text, new_text, read.reason)
    # "Cannot tell" is never a refusal.
    assert (objection(_entry(old_text), new_text, "people") is None) == (
        bare.sameness is not Sameness.DIFFERENT
    )
