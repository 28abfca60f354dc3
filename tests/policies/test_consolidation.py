"""What a consolidation proposal may do: id resolution, merge review, prune rules."""

from __future__ import annotations

from datetime import UTC, datetime

from dreamkeeper.core.models import MemoryEntry
from dreamkeeper.policies.consolidation import (
    PruneRefusal,
    Verdict,
    merge_id,
    prune_candidates,
    resolve_ids,
    review_merge,
    without_overlaps,
)

T = datetime(2026, 3, 1, tzinfo=UTC)


def mem(eid: str, content: str, **kw) -> MemoryEntry:
    return MemoryEntry(id=eid, content=content, created_at=T, last_seen_at=T, **kw)


A = mem("aaaaaaaaaaaa", "Rocky Lhotka also appears in travel data as Rockford Duane Lhotka.")
B = mem("bbbbbbbbbbbb", "Rocky Lhotka's accounts: GitHub rockfordlhotka, Bluesky @rockylhotka.")
SHOWN = {A.id: A.fingerprint, B.id: B.fingerprint}


def test_ids_resolve_only_against_what_was_shown():
    kept, ignored = resolve_ids(["x", A.id, A.id, "made-up", B.id], SHOWN)
    assert kept == [A.id, B.id] and ignored == ["x", "made-up"]


def test_the_rockford_duane_merge_is_rejected_and_a_faithful_one_accepted():
    lossy = "Rocky Lhotka's accounts: GitHub rockfordlhotka, Bluesky @rockylhotka."
    review = review_merge(lossy, [A.id, B.id], {A.id: A, B.id: B}, SHOWN)
    assert review.verdict is Verdict.REJECTED and "Rockford" in review.missing
    faithful = (
        "Rocky Lhotka (in travel data Rockford Duane Lhotka): GitHub rockfordlhotka, "
        "Bluesky @rockylhotka."
    )
    assert review_merge(faithful, [A.id, B.id], {A.id: A, B.id: B}, SHOWN).accepted


def test_blank_changed_gone_and_sourceless_merges_are_left_alone():
    sources = {A.id: A, B.id: B}
    assert review_merge("  ", [A.id], sources, SHOWN).verdict is Verdict.BLANK
    assert review_merge("x", [], sources, SHOWN).verdict is Verdict.NO_SOURCES
    edited = A.model_copy(update={"content": A.content + " Edited."})
    assert review_merge(A.content, [A.id], {A.id: edited}, SHOWN).verdict is Verdict.CHANGED
    assert review_merge(A.content, [A.id], {A.id: None}, SHOWN).verdict is Verdict.CHANGED
    archived = A.model_copy(update={"archived_at": T, "archive_reason": "deleted by agent tool"})
    assert review_merge(A.content, [A.id], {A.id: archived}, SHOWN).verdict is Verdict.CHANGED


def test_a_rejected_merges_sources_never_reach_the_prune_path():
    allowed, refused = prune_candidates(
        [A.id, B.id, "cccccccccccc", "ghost"],
        shown=[A.id, B.id, "cccccccccccc", "dddddddddddd"],
        merge_only=["cccccccccccc"],
        merge_sources=[A.id, B.id],
    )
    assert allowed == []
    assert refused == {
        A.id: PruneRefusal.MERGE_SOURCE,
        B.id: PruneRefusal.MERGE_SOURCE,
        "cccccccccccc": PruneRefusal.MERGE_ONLY,
        "ghost": PruneRefusal.NOT_SHOWN,
    }
    allowed, _ = prune_candidates(
        ["dddddddddddd"], shown=["dddddddddddd"], merge_only=[], merge_sources=[]
    )
    assert allowed == ["dddddddddddd"]


def test_merge_ids_are_derived_and_overlapping_merges_are_dropped():
    assert merge_id(["b", "a"], "text") == merge_id(["a", "b"], "text") != merge_id(["a"], "text")
    assert len(merge_id(["a"], "t")) == 12
    assert without_overlaps([["a", "b"], ["b", "c"], ["d"]]) == [0, 2]
