"""Save-time dedup through the store, with no LLM: distinct facts that share most of
their words stay distinct entries, and only a fact seen again counts as seen again."""

from __future__ import annotations

import itertools

import pytest

from dreamkeeper.policies.dedup import Candidate, DedupOutcome
from dreamkeeper.stores.files.memory_store import FileMemoryStore
from dreamkeeper.stores.longterm.dedup_save import dedup_existing, save_fact

SUBJECTS = ["Bob", "Alice", "Carol", "Dave", "Erin"]
CITIES = ["Boston", "Denver", "Austin", "Seattle", "Miami", "Portland", "Tampa", "Dallas"]
COLOURS = ["red", "tan", "blue", "green", "pink", "gray", "teal", "gold", "jade", "rust"]


def _distinct_facts() -> list[str]:
    """40 facts: 5 subjects x 4 attributes x 2 values. Each shares all but one or two
    words with others — same attribute of another subject, or another value of the same
    attribute (a change: a new phone number, a team grown from 3 to 12)."""
    facts = []
    for i, who in enumerate(SUBJECTS):
        facts += [
            f"{who}'s phone number is 555-{1000 + 7 * i}.",
            f"{who}'s phone number is 555-{2000 + 13 * i}.",
            f"{who}'s team has {i + 3} people.",
            f"{who}'s team has {i + 12} people.",
            f"{who} works at Acme in {CITIES[i]}.",
            f"{who} works at Acme in {CITIES[i + 3]}.",
            f"{who}'s car is {COLOURS[2 * i]}.",
            f"{who}'s car is {COLOURS[2 * i + 1]}.",
        ]
    assert len(set(facts)) == 40
    return facts


# True repeats, reworded only in filler words, case and punctuation.
REPEATS = {
    "Bob's phone number is 555-1000.": "bob's phone number: 555-1000",
    "Alice's team has 4 people.": "Alice's team has 4 people!",
    "Carol works at Acme in Austin.": "CAROL WORKS AT ACME IN AUSTIN",
    "Dave's car is teal.": "Dave's car is a teal",
}


def _save_without_llm(store: FileMemoryStore, text: str, n: int) -> DedupOutcome:
    # As SaveMemory does with no LLM: the original is written, then deduplicated.
    entry = store.create(text, category="people", entry_id=f"{n:012x}")
    return dedup_existing(store, entry.id).outcome


def _save_fact(store: FileMemoryStore, text: str, n: int) -> DedupOutcome:
    # As an enrichment fact is saved (the same decision, another call site).
    candidate = Candidate(text, "people")
    return save_fact(store, candidate, new_id=f"{n:012x}", op_id=f"op-{n}").outcome


@pytest.mark.parametrize("save", [_save_without_llm, _save_fact])
def test_forty_distinct_facts_stay_forty_entries_and_only_repeats_are_reinforced(
    store: FileMemoryStore, save
):
    facts = _distinct_facts()
    outcomes = [save(store, text, n) for n, text in enumerate(facts)]
    assert outcomes == [DedupOutcome.CREATED] * 40
    repeats = [save(store, again, 100 + n) for n, again in enumerate(REPEATS.values())]
    assert repeats == [DedupOutcome.REINFORCED] * len(REPEATS)

    live = store.entries()
    assert sorted(e.content for e in live) == sorted(facts)  # none glued to another
    seen = {e.content: e.reinforcement_count for e in live}
    assert seen == {text: 2 if text in REPEATS else 1 for text in facts}


def test_a_changed_value_saved_twice_reinforces_its_own_entry_only(store: FileMemoryStore):
    texts = ["The Granite team has 3 people.", "The Granite team has 20 people."]
    for n, text in enumerate(itertools.chain(texts, texts)):
        _save_without_llm(store, text, n)
    assert {e.content: e.reinforcement_count for e in store.entries()} == {
        texts[0]: 2,
        texts[1]: 2,
    }
