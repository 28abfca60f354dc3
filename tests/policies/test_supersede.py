"""policies.supersede: is "this fact replaces that entry" believable?"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.supersede import newer_answers, objection

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _entry(content: str, category: str | None = "people") -> MemoryEntry:
    return MemoryEntry(
        id="0123456789ab", content=content, category=category, created_at=NOW, last_seen_at=NOW
    )


def test_a_new_value_for_the_same_subject_may_replace_the_old_one():
    old = _entry("Maya Lund lives in Lisbon.")
    assert objection(old, "Maya Lund moved to Porto.", "people") is None
    assert (
        objection(
            _entry("The Granite team has 20 people."), "The Granite team has 3 people.", "people"
        )
        is None
    )
    assert (
        objection(
            _entry("The user prefers short answers."),
            "The user prefers detailed answers.",
            "people",
        )
        is None
    )


def test_another_subject_category_or_a_repeat_is_refused():
    old = _entry("Maya Lund lives in Lisbon.")
    assert objection(old, "Tom Berg's sister lives in Lisbon.", "people") == "another subject"
    assert objection(old, "Maya Lund moved to Porto.", "work") == "another category"
    assert objection(old, "Maya Lund lives in Lisbon.", "people") == "a repeat, not a change"
    assert objection(_entry("The user likes tea."), "The weather is cold.", "people") == (
        "no shared subject"
    )


@given(
    first=st.sampled_from(["Maya", "Tom", "Ana", "Li"]),
    other=st.sampled_from(["Maya", "Tom", "Ana", "Li"]),
    city=st.sampled_from(["Lisbon", "Porto", "Oslo"]),
)
def test_the_first_name_decides_the_subject(first, other, city):
    old = _entry(f"{first} lives in Lisbon.")
    verdict = objection(old, f"{other} moved to {city}.", "people")
    if first != other:
        assert verdict == "another subject"
    else:
        assert verdict is None


def test_a_shared_first_name_is_not_a_shared_subject():
    old = _entry("Sara Okafor's phone number is +1 291-347-7545.", "people/contacts")
    assert objection(old, "Sara Sato can be reached at +1 404-519-2406.", "people/contacts") == (
        "another subject"
    )
    assert (
        objection(old, "Sara Okafor got a new number: +1 800-242-7454.", "people/contacts") is None
    )
    assert objection(_entry("Maya Lund lives in Lisbon."), "Maya moved to Porto.", "people") is None


def test_two_conflicting_versions_saved_apart_are_a_candidate_cluster_for_the_dream():
    from dreamkeeper.policies.dedup import Candidate, DedupOutcome, content_tokens, decide
    from dreamkeeper.policies.gating import GateEntry, near_duplicate_clusters

    twenty = _entry("The Granite team has 20 people.")
    three = "The Granite team has 3 people."
    # Dedup without an LLM: a different value is its own entry, never a reinforcement.
    assert decide(Candidate(three, "people"), twenty, 1.0, NOW).outcome is DedupOutcome.CREATED
    gate = [
        GateEntry("a00000000001", "people", "f1", None, content_tokens(twenty.content)),
        GateEntry("a00000000002", "people", "f2", None, content_tokens(three)),
    ]
    assert near_duplicate_clusters(gate) == [("a00000000001", "a00000000002")]


def test_a_possible_change_is_ranked_newer_first_only_for_the_question_of_its_subject():
    older, newer = "Li Berg works for Amir Ruiz now.", "Li Berg reports to Lea Silva."
    # The question asks exactly the newer fact's subject (Li Berg's manager): it answers.
    assert newer_answers("Who is Li Berg's manager?", older, newer)
    # Worded by a verb the vocabulary has for one attribute only ("live": the home's).
    assert newer_answers(
        "Where does Maya Lund live?",
        "Maya Lund is renting in Lisbon.",
        "Maya Lund moved to Porto.",
    )
    # "work" names an employer, a manager and a role at once: no one attribute is asked.
    assert not newer_answers("Where does Li Berg work?", older, newer)
    # Another person asked about, or a second one named beside them.
    assert not newer_answers("Who is Ana Costa's manager?", older, newer)
    assert not newer_answers("Is Amir Ruiz Li Berg's manager?", older, newer)
    # A durable fact wrongly linked to a newer fact of another attribute: its own
    # question (which also says "home") asks the language, so the newer never moves up.
    durable, wrong = "Mei Lund speaks Dutch at home.", "Mei Lund has moved to Porto."
    assert not newer_answers("What language does Mei Lund speak at home?", durable, wrong)
    # The older about another person, or an unrelated attribute: not one subject's pair.
    assert not newer_answers("Where does Mei Lund live?", "Omar Wei lives in Oslo.", wrong)
    assert not newer_answers("Where does Mei Lund live?", durable, wrong)
    # A newer fact that names no attribute may be the change of the older one's, the
    # one asked ("gets around in": no attribute's word; a car beside a car)...
    car, kia = "Zoe Haddad drives a Fiat Panda.", "Zoe Haddad now gets around in a Kia Niro."
    assert newer_answers("What car does Zoe Haddad drive?", car, kia)
    # ... but not when it uses another attribute's word ("got": an employer's), and never
    # above a durable fact of another kind of value (a birthday's date, not a name).
    got = "Zoe Haddad got a Fiat Panda."
    assert not newer_answers(
        "What car does Zoe Haddad drive?", "Zoe Haddad drives a Kia Niro.", got
    )
    birthday = "Zoe Haddad's birthday is on 14 March."
    assert not newer_answers("When is Zoe Haddad's birthday?", birthday, kia)
    # Nor when the newer has a predicate of its own: it may be what the fact is about.
    holiday = "Zoe Haddad spent a holiday in Lyon."
    assert not newer_answers("Where does Zoe Haddad live?", "Zoe Haddad lives in Oslo.", holiday)
    # Nor for a question about another attribute than the older one's.
    assert not newer_answers("Where does Zoe Haddad live?", car, kia)
