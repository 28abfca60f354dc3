from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.merge import (
    MergeProposal,
    exact_duplicate_folds,
    merge_subject_time,
    merged_entry,
)

T0 = datetime(2024, 6, 1, tzinfo=UTC)
NOW = datetime(2026, 12, 2, tzinfo=UTC)


def _e(i: int, content: str = "fact", **kw) -> MemoryEntry:
    base = dict(
        id=f"{i:012x}",
        content=content,
        category="people",
        created_at=T0,
        last_seen_at=T0,
        importance_score=0.5,
    )
    return MemoryEntry(**{**base, **kw})


def test_temporal_arithmetic_is_the_hosts():
    sources = [
        _e(
            1,
            created_at=T0 + timedelta(days=5),
            last_seen_at=T0 + timedelta(days=90),
            reinforcement_count=40,
            importance_score=0.7,
            metadata={"source": "user"},
        ),
        _e(
            2,
            created_at=T0,
            last_seen_at=T0 + timedelta(days=10),
            reinforcement_count=18,
            importance_score=0.99,
            metadata={"source": "tool:web", "junk": "x"},
        ),
    ]
    merged = merged_entry("0000000000ff", MergeProposal("merged text", "people/x"), sources, NOW)
    assert merged.created_at == T0
    assert merged.last_seen_at == T0 + timedelta(days=90)  # not "now"
    assert merged.reinforcement_count == 58
    assert merged.importance_score == 0.99
    assert merged.updated_at == NOW
    assert merged.metadata["source"] == "tool:web"  # least trusted
    assert "junk" not in merged.metadata
    assert json.loads(merged.metadata["mergedFrom"]) == [sources[0].id, sources[1].id]
    assert merged.metadata["mergedAt"] == NOW.isoformat()


def test_proposed_importance_wins_and_unknown_source_makes_it_unknown():
    sources = [_e(1, metadata={"source": "user"}), _e(2)]
    merged = merged_entry("0000000000ff", MergeProposal("t", None, importance=0.3), sources, NOW)
    assert merged.importance_score == 0.3 and "source" not in merged.metadata


def test_thirteen_sources_sum_their_reinforcement():
    sources = [_e(i, reinforcement_count=i) for i in range(1, 14)]
    merged = merged_entry("0000000000ff", MergeProposal("t", "people"), sources, NOW)
    assert merged.reinforcement_count == sum(range(1, 14))
    assert len(json.loads(merged.metadata["mergedFrom"])) == 13


@pytest.mark.parametrize(
    ("metas", "expected"),
    [
        ([{"subjectTime": "2019"}, {"subjectTime": "2019-06-14"}], {"subjectTime": "2019-06-14"}),
        (
            [{"subjectTimeStart": "2019-06"}, {"subjectTimeStart": "2019"}],
            {"subjectTimeStart": "2019"},
        ),
        ([{"subjectTimeEnd": "2021-03"}, {"subjectTimeEnd": "2021"}], {"subjectTimeEnd": "2021"}),
        (
            [
                {"subjectTimeStart": "2010", "subjectTimeEnd": "2012"},
                {"subjectTimeStart": "2011-05", "subjectTimeEnd": "2015-01"},
            ],
            {"subjectTimeStart": "2010", "subjectTimeEnd": "2015-01"},
        ),
        ([{}, {}], {}),
    ],
)
def test_subject_time_widens(metas, expected):
    assert merge_subject_time([_e(i, metadata=m) for i, m in enumerate(metas)]) == expected


def test_exact_duplicate_fold_keeps_the_oldest_and_the_most_trusted_source():
    a = _e(
        1,
        "User  lives in\nChicago",
        created_at=T0 + timedelta(days=3),
        tags=["a"],
        metadata={"source": "inferred"},
        reinforcement_count=2,
        importance_score=0.4,
    )
    b = _e(
        2,
        "User lives in Chicago",
        created_at=T0,
        tags=["b"],
        last_seen_at=T0 + timedelta(days=30),
        importance_score=0.8,
    )
    c = _e(3, "User lives in Chicago", category="other")
    d = _e(4, "User lives in Chicago", archived_at=T0, archive_reason="x")
    e = _e(
        5, "User lives in Chicago", created_at=T0 + timedelta(days=9), metadata={"source": "user"}
    )
    (fold,) = exact_duplicate_folds([a, b, c, d, e])
    assert fold.survivor.id == b.id and set(fold.copies) == {a.id, e.id}
    s = fold.survivor
    assert s.reinforcement_count == 4 and s.importance_score == 0.8
    assert s.last_seen_at == T0 + timedelta(days=30) and s.created_at == T0
    assert s.tags == ["b", "a"] and s.metadata["source"] == "user"
    assert s.content == b.content


def test_a_sources_valid_from_survives_the_merge():
    dated = _e(1, created_at=T0 + timedelta(days=30), valid_from=T0 - timedelta(days=365))
    plain = _e(2, created_at=T0)
    merged = merged_entry("0000000000fe", MergeProposal("merged", None), [dated, plain], NOW)
    assert merged.valid_from == T0 - timedelta(days=365)  # the earliest source's start
    undated = merged_entry("0000000000fd", MergeProposal("merged", None), [plain], NOW)
    assert undated.valid_from is None and undated.valid_since == T0
