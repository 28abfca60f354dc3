"""Archive, restore and re-score at the activity boundary: a caller's mistake is a
non-retryable failure of its own type (logged quietly), a repeat changes nothing."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationErrorCategory

from dreamkeeper.activities.entry_ops import EntryActivities
from dreamkeeper.core.errors import Conflict, InvalidInput, NotFound, StoreMismatch
from dreamkeeper.core.payloads import EntryOpInput
from tests.activities.conftest import AGENT

MISSING = "0123456789ab"


@pytest.fixture
def ops(registry):
    return EntryActivities(registry)


@pytest.fixture
def entry_id(registry) -> str:
    with registry.using(AGENT) as store:
        return store.create("The user lives in Chicago.", importance=0.4).id


def test_archiving_twice_keeps_the_first_reason(run, ops, registry, entry_id):
    first = run(ops.archive_memory, EntryOpInput(agent_id=AGENT, entry_id=entry_id, reason="moved"))
    again = run(ops.archive_memory, EntryOpInput(agent_id=AGENT, entry_id=entry_id, reason="dup"))
    assert first.archived and first.archive_reason == "moved"
    assert again == first
    with registry.using(AGENT) as store:
        assert store.require(entry_id).archive_reason == "moved"
        assert store.entries() == []  # hidden from search, still on disk


def test_restore_brings_back_and_a_second_restore_changes_nothing(run, ops, registry, entry_id):
    run(ops.archive_memory, EntryOpInput(agent_id=AGENT, entry_id=entry_id))
    restored = run(ops.restore_memory, EntryOpInput(agent_id=AGENT, entry_id=entry_id))
    again = run(ops.restore_memory, EntryOpInput(agent_id=AGENT, entry_id=entry_id))
    assert not restored.archived and restored.archive_reason is None
    assert again == restored
    with registry.using(AGENT) as store:
        assert [e.id for e in store.entries()] == [entry_id]


def test_restoring_into_a_live_replacement_is_a_conflict_unless_forced(run, ops, registry):
    with registry.using(AGENT) as store:
        old = store.create("The user lives in Chicago.").id
        new = store.create("The user lives in Chicago, near the lake.").id
        assert store.retire_into(old, [new], reason="merged").retired
    failure = run.fails(ops.restore_memory, EntryOpInput(agent_id=AGENT, entry_id=old))
    assert (failure.type, failure.non_retryable) == (Conflict.failure_type, True)
    forced = run(ops.restore_memory, EntryOpInput(agent_id=AGENT, entry_id=old, force=True))
    assert not forced.archived


def test_rescoring_sets_the_importance_and_a_repeat_is_the_same(run, ops, registry, entry_id):
    inp = EntryOpInput(agent_id=AGENT, entry_id=entry_id, importance=0.9)
    assert run(ops.update_memory_importance, inp).importance == 0.9
    assert run(ops.update_memory_importance, inp).importance == 0.9
    with registry.using(AGENT) as store:
        assert store.require(entry_id).importance_score == 0.9


@pytest.mark.parametrize(
    ("step", "entry", "importance", "error"),
    [
        ("archive_memory", MISSING, None, NotFound),
        ("archive_memory", "not-an-id", None, InvalidInput),
        ("update_memory_importance", "{entry}", None, InvalidInput),
        ("update_memory_importance", "{entry}", 1.5, InvalidInput),
        ("update_memory_importance", MISSING, 0.5, NotFound),
    ],
)
def test_a_callers_mistake_fails_for_good_and_quietly(
    run, ops, entry_id, step, entry, importance, error
):
    """Bad input and unknown ids are answers, not faults: never retried (retrying cannot
    fix them), and benign, so the worker logs no warning with a traceback."""
    inp = EntryOpInput(
        agent_id=AGENT, entry_id=entry.replace("{entry}", entry_id), importance=importance
    )
    failure = run.fails(getattr(ops, step), inp)
    assert failure.type == error.failure_type
    assert failure.non_retryable
    assert failure.category == ApplicationErrorCategory.BENIGN


def test_a_store_mismatch_fails_for_good_and_loudly(run, ops, entry_id):
    """Another data directory than the caller's is a deployment fault: not benign."""
    inp = EntryOpInput(agent_id=AGENT, entry_id=entry_id, store_id="some-other-store")
    failure = run.fails(ops.archive_memory, inp)
    assert (failure.type, failure.non_retryable) == (StoreMismatch.failure_type, True)
    assert failure.category == ApplicationErrorCategory.UNSPECIFIED


def test_restoring_a_superseded_entry_makes_it_current_again(run, ops, registry, entry_id):
    from dreamkeeper.stores.longterm.supersede import supersede

    with registry.using(AGENT) as store:
        newer = store.create("The user lives in Denver.", importance=0.4)
        assert supersede(store, entry_id, newer.id).applied
    done = run(ops.restore_memory, EntryOpInput(agent_id=AGENT, entry_id=entry_id))
    assert done.entry_id == entry_id and not done.archived
    with registry.using(AGENT) as store:
        back = store.require(entry_id)
        assert back.is_current and back.content == "The user lives in Chicago."
        assert store.require(newer.id).is_current
