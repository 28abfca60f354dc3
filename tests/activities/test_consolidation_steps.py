"""The dream's deterministic steps at the activity boundary: folding exact duplicates
(exactly once, even when retried after a crash half-way) and gating what the LLM sees."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dreamkeeper.activities.consolidation import ConsolidationActivities
from dreamkeeper.core.dream_payloads import FoldInput, GateInput
from dreamkeeper.core.settings import HighValueFloor, LLMSettings
from tests.activities.conftest import AGENT

AS_OF = datetime(2026, 7, 1, tzinfo=UTC)
COPY = "The user's dentist is Dr. Ana Ruiz on Elm Street."


@pytest.fixture
def dream(registry):
    return ConsolidationActivities(registry, LLMSettings(), HighValueFloor())


@pytest.fixture
def copies(registry) -> list[str]:
    with registry.using(AGENT) as store:
        ids = [store.create(COPY, importance=0.3 + i / 10).id for i in range(3)]
        store.create("The user lives in Chicago.")
    return ids


def live_copies(registry) -> list:
    with registry.using(AGENT) as store:
        return [e for e in store.entries() if e.content == COPY]


def test_a_dry_fold_plans_and_writes_nothing(run, dream, registry, copies):
    done = run(dream.fold_exact_duplicates, FoldInput(agent_id=AGENT, as_of=AS_OF, dry_run=True))
    [planned] = done.planned
    assert {planned.survivor, *planned.copies} == set(copies) and done.live == 4
    assert len(live_copies(registry)) == 3


def test_a_fold_retried_after_a_crash_half_way_sums_once(run, dream, registry, copies, monkeypatch):
    """The worker dies after the survivor took the group's arithmetic and before the
    copies were retired: the retry finds the fold's op in the survivor and only
    retires, never adding the copies' reinforcements a second time."""
    with registry.using(AGENT) as store:
        real_retire = store.retire_into

    def crash(*args, **kwargs):
        raise RuntimeError("worker killed")

    monkeypatch.setattr(store, "retire_into", crash)
    inp = FoldInput(agent_id=AGENT, as_of=AS_OF, cycle_id="cycle-1")
    with pytest.raises(RuntimeError, match="worker killed"):
        run(dream.fold_exact_duplicates, inp)
    before = {e.id: e for e in live_copies(registry)}
    assert len(before) == 3  # nothing retired yet
    [survivor] = [e for e in before.values() if e.revision > 1]  # it took the group's sums
    assert survivor.reinforcement_count > 1

    monkeypatch.setattr(store, "retire_into", real_retire)
    retry = run(dream.fold_exact_duplicates, inp)
    assert sorted(retry.archived) == sorted(set(copies) - {survivor.id})
    [after] = live_copies(registry)
    assert after.id == survivor.id
    assert after.reinforcement_count == survivor.reinforcement_count
    assert after.importance_score == survivor.importance_score


def test_the_gate_without_an_llm_says_so_and_shows_nothing_twice(run, dream, registry, copies):
    gate = run(dream.gate_candidates, GateInput(agent_id=AGENT, as_of=AS_OF))
    assert not gate.llm_configured and gate.total == 4
    shown = [i for group in gate.groups for i in group]
    assert len(shown) == len(set(shown)) and set(shown) <= {*copies, *_all_ids(registry)}
    excluded = run(dream.gate_candidates, GateInput(agent_id=AGENT, as_of=AS_OF, exclude=copies))
    assert not {i for group in excluded.groups for i in group} & set(copies)


def _all_ids(registry) -> set[str]:
    with registry.using(AGENT) as store:
        return {e.id for e in store.entries()}
