from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.core.settings import DecayParams
from dreamkeeper.policies.decay import decayed_importance

T0 = datetime(2026, 1, 1, tzinfo=UTC)
P = DecayParams()


def _entry(importance: float, **kw) -> MemoryEntry:
    return MemoryEntry(
        id="0123456789ab",
        content="x",
        created_at=T0,
        last_seen_at=T0,
        importance_score=importance,
        **kw,
    )


def _run(entry: MemoryEntry, days: list[float]) -> MemoryEntry:
    for d in days:
        as_of = T0 + timedelta(days=d)
        new = decayed_importance(entry, as_of, P)
        if new is not None:
            entry = entry.model_copy(update={"importance_score": new, "updated_at": as_of})
    return entry


def test_untouched_within_grace():
    assert decayed_importance(_entry(0.9), T0 + timedelta(days=29.9), P) is None


def test_formula_after_grace():
    got = decayed_importance(_entry(0.9), T0 + timedelta(days=75), P)
    assert got == pytest.approx(0.9 * 0.5 ** (45 / 45))


@pytest.mark.parametrize(("start", "days"), [(0.95, 176), (0.70, 156), (0.50, 134), (0.30, 101)])
def test_time_to_floor_matches_the_reference_table(start, days):
    daily = _run(_entry(start), [float(d) for d in range(1, 400)])
    assert daily.importance_score == pytest.approx(0.10)
    reached = next(
        d
        for d in range(1, 400)
        if _run(_entry(start), [float(x) for x in range(1, d + 1)]).importance_score <= 0.10 + 1e-9
    )
    assert abs(reached - days) <= 1


def test_cadence_invariance_one_60_day_pass_equals_twenty_3_day_passes():
    once = _run(_entry(0.95), [60])
    twenty = _run(_entry(0.95), [3 * i for i in range(1, 21)])
    assert twenty.importance_score == pytest.approx(once.importance_score, rel=1e-12)
    assert once.importance_score == pytest.approx(0.95 * 0.5 ** (30 / 45))


def test_repeating_a_pass_with_the_same_as_of_changes_nothing():
    once = _run(_entry(0.95), [60])
    assert decayed_importance(once, T0 + timedelta(days=60), P) is None


def test_floor_disabled_and_archived():
    assert decayed_importance(_entry(0.10), T0 + timedelta(days=300), P) is None
    off = DecayParams(half_life=timedelta(0))
    assert decayed_importance(_entry(0.9), T0 + timedelta(days=300), off) is None
    archived = _entry(0.9, archived_at=T0, archive_reason="x")
    assert decayed_importance(archived, T0 + timedelta(days=300), P) is None


def test_reinforcement_resets_the_clock():
    entry = _entry(0.9).model_copy(update={"last_seen_at": T0 + timedelta(days=50)})
    assert decayed_importance(entry, T0 + timedelta(days=70), P) is None
