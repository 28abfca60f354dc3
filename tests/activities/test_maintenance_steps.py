"""Purge and decay at the activity boundary: both measure from the workflow's `as_of`,
so a retried pass with the same `as_of` finds nothing left to do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dreamkeeper.activities.maintenance import MaintenanceActivities
from dreamkeeper.core.payloads import DecayInput, PurgeInput
from dreamkeeper.core.settings import DecayParams, HighValueFloor
from tests.activities.conftest import AGENT

CREATED = datetime(2025, 1, 1, tzinfo=UTC)
ARCHIVED = CREATED + timedelta(days=1)
LATER = CREATED + timedelta(days=200)


@pytest.fixture
def maintenance(registry):
    return MaintenanceActivities(
        registry, retention=timedelta(days=30), decay=DecayParams(), floor=HighValueFloor()
    )


@pytest.fixture
def archived(registry) -> dict[str, str]:
    """Three archived entries, one of them high-value, and a live one."""
    ids = {}
    with registry.using(AGENT) as store:
        for name, importance in (("old", 0.3), ("older", 0.4), ("precious", 0.9)):
            entry = store.create(
                f"The {name} note about Chicago.", importance=importance, now=CREATED
            )
            store.archive(entry.id, "superseded", now=ARCHIVED)
            ids[name] = entry.id
        ids["live"] = store.create("The user lives in Chicago.", now=CREATED).id
    return ids


def test_purge_deletes_past_retention_keeps_high_value_and_a_retry_finds_nothing(
    run, maintenance, registry, archived
):
    inp = PurgeInput(agent_id=AGENT, as_of=LATER)
    first = run(maintenance.purge_archived, inp)
    assert sorted(first.purged) == sorted([archived["old"], archived["older"]])
    assert first.kept_high_value == [archived["precious"]]
    assert sorted(run.beats) == [(1, 2), (2, 2)]  # heartbeat details: (done, total)
    retry = run(maintenance.purge_archived, inp)
    assert retry.purged == [] and retry.considered == 1
    with registry.using(AGENT) as store:
        assert store.get(archived["old"]) is None
        assert store.get(archived["precious"]) is not None
        assert [e.id for e in store.entries()] == [archived["live"]]


def test_purge_within_retention_and_dry_runs_delete_nothing(run, maintenance, registry, archived):
    soon = run(maintenance.purge_archived, PurgeInput(agent_id=AGENT, as_of=ARCHIVED))
    assert soon.purged == [] and soon.kept_in_retention == 3
    dry = run(maintenance.purge_archived, PurgeInput(agent_id=AGENT, as_of=LATER, dry_run=True))
    assert sorted(dry.purged) == sorted([archived["old"], archived["older"]])
    assert set(dry.revisions) == set(dry.purged)  # what an applied plan checks against
    with registry.using(AGENT) as store:
        assert all(store.get(i) is not None for i in archived.values())


@pytest.mark.parametrize("step", ["purge_archived", "decay_importance"])
def test_a_pass_without_the_workflows_as_of_fails_for_good(run, maintenance, step):
    """`as_of` makes the pass repeatable; an activity clock would decay twice on retry."""
    inp = (PurgeInput if step == "purge_archived" else DecayInput)(agent_id=AGENT)
    assert run.fails(getattr(maintenance, step), inp).non_retryable


def test_decay_lowers_stale_entries_once_per_as_of(run, maintenance, registry, archived):
    with registry.using(AGENT) as store:
        before = store.require(archived["live"]).importance_score
    inp = DecayInput(agent_id=AGENT, as_of=LATER)
    first = run(maintenance.decay_importance, inp)
    retry = run(maintenance.decay_importance, inp)
    assert (first.considered, first.decayed) == (1, 1)  # archived entries are not decayed
    assert retry.decayed == 0
    with registry.using(AGENT) as store:
        after = store.require(archived["live"])
    assert after.importance_score < before and after.updated_at == LATER


def test_a_dry_decay_plans_without_writing(run, maintenance, registry, archived):
    dry = run(maintenance.decay_importance, DecayInput(agent_id=AGENT, as_of=LATER, dry_run=True))
    [planned] = dry.planned
    with registry.using(AGENT) as store:
        live = store.require(archived["live"])
    assert (planned.id, planned.before) == (live.id, live.importance_score)
    assert planned.after < planned.before and planned.revision == live.revision


def test_a_superseded_entry_does_not_decay(run, maintenance, registry):
    from dreamkeeper.stores.longterm.supersede import supersede

    with registry.using(AGENT) as store:
        old = store.create("Maya lives in Lisbon.", importance=0.6, now=CREATED)
        new = store.create("Maya lives in Porto.", importance=0.6, now=CREATED)
        assert supersede(store, old.id, new.id).applied
    done = run(maintenance.decay_importance, DecayInput(agent_id=AGENT, as_of=LATER))
    assert (done.considered, done.decayed) == (1, 1)
    with registry.using(AGENT) as store:
        assert store.require(old.id).importance_score == 0.6
        assert store.require(new.id).importance_score < 0.6
