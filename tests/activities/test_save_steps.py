"""The save's store steps at the activity boundary. Temporal retries a step whose
worker died after the write and before the answer: every step here is run twice with
the same input, and the second run must find the first one's work, not redo it."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationErrorCategory

from dreamkeeper.activities.save import NO_LLM_SKIP, SaveActivities
from dreamkeeper.core.errors import Conflict, InvalidInput
from dreamkeeper.core.payloads import (
    DedupOutcome,
    FactProposal,
    MarkInput,
    RetireInput,
    SaveFactInput,
    SaveInput,
)
from dreamkeeper.core.settings import HighValueFloor, LLMSettings
from dreamkeeper.policies.in_flight import ENRICHMENT_KEY, PENDING
from tests.activities.conftest import AGENT

ORIGINAL = "0000000000a1"
NOTE = "Met Dana at the Chicago office; she runs billing and prefers email over calls."


def save_steps(registry, llm: LLMSettings | None = None) -> SaveActivities:
    return SaveActivities(registry, llm or LLMSettings(), HighValueFloor())


def original(content: str = NOTE, **fields) -> SaveInput:
    return SaveInput(agent_id=AGENT, entry_id=ORIGINAL, content=content, **fields)


def test_persist_original_writes_once_and_a_retry_is_not_done_yet(run, registry):
    steps = save_steps(registry)
    first = run(steps.persist_original, original(category="people", tags=["work"]))
    retry = run(steps.persist_original, original(category="people", tags=["work"]))
    assert first.enrich_skipped == NO_LLM_SKIP and not first.already_done
    assert not retry.already_done  # nothing recorded on it yet: the save goes on
    with registry.using(AGENT) as store:
        [entry] = store.entries()
    assert (entry.id, entry.content, entry.category, entry.tags) == (
        ORIGINAL,
        NOTE,
        "people",
        ["work"],
    )
    assert ENRICHMENT_KEY not in entry.metadata  # no LLM: nothing in flight


def test_a_retry_after_the_outcome_was_recorded_is_already_done(run, registry):
    steps = save_steps(registry, LLMSettings(base_url="http://127.0.0.1:9/v1"))
    assert run(steps.persist_original, original()).enrich_skipped is None
    with registry.using(AGENT) as store:
        assert store.require(ORIGINAL).metadata[ENRICHMENT_KEY] == PENDING
    run(steps.mark_original, MarkInput(agent_id=AGENT, entry_id=ORIGINAL, enrichment="3 facts"))
    retry = run(steps.persist_original, original())
    assert retry.already_done
    with registry.using(AGENT) as store:
        assert store.require(ORIGINAL).metadata[ENRICHMENT_KEY] == "3 facts"


@pytest.mark.parametrize(
    ("inp", "error"),
    [
        (original(content="   "), InvalidInput),
        (original(importance=1.5), InvalidInput),
        (original(category="../escape"), InvalidInput),
    ],
)
def test_persist_original_refuses_bad_input_for_good(run, registry, inp, error):
    failure = run.fails(save_steps(registry).persist_original, inp)
    assert (failure.type, failure.non_retryable) == (error.failure_type, True)
    assert failure.category == ApplicationErrorCategory.BENIGN
    with registry.using(AGENT) as store:
        assert store.entries(include_archived=True) == []


def test_the_same_id_with_other_content_is_a_conflict(run, registry):
    steps = save_steps(registry)
    run(steps.persist_original, original())
    failure = run.fails(steps.persist_original, original(content="Something else entirely."))
    assert (failure.type, failure.non_retryable) == (Conflict.failure_type, True)
    with registry.using(AGENT) as store:
        assert store.require(ORIGINAL).content == NOTE


def fact(content: str) -> SaveFactInput:
    return SaveFactInput(
        agent_id=AGENT,
        new_id="0000000000f1",
        op_id=f"{ORIGINAL}-fact-0",
        fact=FactProposal(content=content, category="people", importance=0.5),
        exclude=[ORIGINAL],
    )


def test_save_fact_creates_once_under_its_op(run, registry):
    steps = save_steps(registry)
    inp = fact("Dana runs billing at the Chicago office.")
    first = run(steps.save_fact, inp)
    retry = run(steps.save_fact, inp)
    assert first.outcome == DedupOutcome.CREATED and first.entry_id == inp.new_id
    assert retry == first
    with registry.using(AGENT) as store:
        assert [e.id for e in store.entries()] == [inp.new_id]


def test_save_fact_reinforces_an_equal_entry_once_however_often_retried(run, registry):
    with registry.using(AGENT) as store:
        known = store.create("Dana runs billing at the Chicago office.", category="people")
    steps = save_steps(registry)
    inp = fact("Dana runs billing at the Chicago office.")
    first = run(steps.save_fact, inp)
    retry = run(steps.save_fact, inp)
    assert first.outcome == DedupOutcome.REINFORCED and first.entry_id == known.id
    assert retry == first
    with registry.using(AGENT) as store:
        assert [e.id for e in store.entries()] == [known.id]
        assert store.require(known.id).reinforcement_count == known.reinforcement_count + 1


def test_retire_original_archives_into_live_facts_once(run, registry):
    steps = save_steps(registry)
    run(steps.persist_original, original())
    with registry.using(AGENT) as store:
        into = store.create(NOTE.replace("Met", "The user met")).id
    inp = RetireInput(agent_id=AGENT, entry_id=ORIGINAL, into=[into], reason="enriched")
    first = run(steps.retire_original, inp)
    retry = run(steps.retire_original, inp)
    assert first.retired and retry.retired
    with registry.using(AGENT) as store:
        retired = store.require(ORIGINAL)
        assert retired.is_archived and retired.archive_reason == "enriched"
        assert [e.id for e in store.entries()] == [into]


def test_retire_original_keeps_the_original_when_the_facts_miss_specifics(run, registry):
    """An enrichment that lost a name or a number never costs the original."""
    steps = save_steps(registry)
    run(steps.persist_original, original())
    with registry.using(AGENT) as store:
        into = store.create("Someone at an office prefers email.").id
    inp = RetireInput(agent_id=AGENT, entry_id=ORIGINAL, into=[into], reason="enriched")
    done = run(steps.retire_original, inp)
    assert not done.retired and done.missing > 0
    with registry.using(AGENT) as store:
        assert not store.require(ORIGINAL).is_archived


def test_retire_original_into_itself_is_bad_input(run, registry):
    steps = save_steps(registry)
    run(steps.persist_original, original())
    inp = RetireInput(agent_id=AGENT, entry_id=ORIGINAL, into=[ORIGINAL], reason="enriched")
    failure = run.fails(steps.retire_original, inp)
    assert (failure.type, failure.non_retryable) == (InvalidInput.failure_type, True)
