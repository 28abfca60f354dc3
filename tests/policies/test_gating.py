"""Candidate gating: fingerprints, near-duplicate clusters, settled-cluster backoff."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

import pytest

from dreamkeeper.core.models import content_fingerprint
from dreamkeeper.policies.dedup import content_tokens, jaccard
from dreamkeeper.policies.gating import (
    GateEntry,
    SettledCluster,
    cluster_key,
    gate,
    near_duplicate_clusters,
    pack_batches,
    reopen_delay,
    shown_hints,
)

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def entry(eid: str, text: str, *, reviewed: bool, category: str | None = "people") -> GateEntry:
    fp = content_fingerprint(text)
    return GateEntry(eid, category, fp, fp if reviewed else None, content_tokens(text))


DUP_A = "Allen Conway works at Xebia as a principal consultant"
DUP_B = "Allen Conway works at Xebia as principal consultant today"


def test_only_unreviewed_or_changed_entries_are_eligible():
    fresh = entry("a", "brand new fact about Lisbon trips", reviewed=False)
    old = entry("b", "reviewed fact about Denver offices", reviewed=True)
    edited = GateEntry(
        "c",
        "people",
        content_fingerprint("new text"),
        content_fingerprint("old"),
        content_tokens("new text"),
    )
    g = gate([fresh, old, edited], {}, NOW)
    assert sorted(g.eligible) == ["a", "c"]
    assert g.withheld == 1 and g.total == 3


def test_a_cluster_with_one_unreviewed_member_makes_every_member_eligible():
    g = gate([entry("a", DUP_A, reviewed=True), entry("b", DUP_B, reviewed=False)], {}, NOW)
    assert g.groups == (("a", "b"),)
    assert g.clusters == (("a", "b"),) and not g.merge_only


def test_clusters_stay_within_the_top_level_category():
    found = near_duplicate_clusters(
        [entry("a", DUP_A, reviewed=False), entry("b", DUP_B, reviewed=False, category="work/x")]
    )
    assert found == []


@pytest.mark.parametrize("declines,days", [(1, 7), (2, 14), (3, 28), (4, 56), (9, 56)])
def test_settled_clusters_reopen_with_capped_backoff(declines, days):
    assert reopen_delay(declines) == timedelta(days=days)
    members = ("a", "b")
    settled_at = NOW - timedelta(days=days) + timedelta(hours=1)
    record = SettledCluster(members, declines, settled_at)
    live = [entry("a", DUP_A, reviewed=True), entry("b", DUP_B, reviewed=True)]
    early = gate(live, {record.key: record}, NOW)
    assert early.eligible == [] and early.withheld == 2
    due = gate(live, {record.key: record}, NOW + timedelta(hours=1))
    assert due.eligible == ["a", "b"] and due.merge_only == {"a", "b"} and due.reopened == 1


def test_at_most_ten_settled_clusters_reopen_per_cycle():
    live, records = [], {}
    for n in range(12):
        a, b = f"a{n:02d}", f"b{n:02d}"
        text = f"project{n} milestone{n} planned{n} with contoso{n} members{n}"
        live += [entry(a, text, reviewed=True), entry(b, text + f" again{n}", reviewed=True)]
        r = SettledCluster((a, b), 1, NOW - timedelta(days=30 + n))
        records[r.key] = r
    g = gate(live, records, NOW)
    assert g.reopened == 10 and len(g.merge_only) == 20
    # The longest-settled ones go first.
    assert "a11" in g.merge_only and "a00" not in g.merge_only and "a01" not in g.merge_only


def test_clustering_failure_falls_back_to_unreviewed_only():
    def broken(_entries):
        raise RuntimeError("vector index unavailable")

    live = [entry("a", DUP_A, reviewed=True), entry("b", DUP_B, reviewed=False)]
    g = gate(live, {}, NOW, clusters=broken)
    assert g.eligible == ["b"] and g.clustering_failed.startswith("RuntimeError")


def test_prefix_filtered_clusters_equal_brute_force():
    rng = random.Random(7)
    words = [f"word{i}" for i in range(40)]
    live = []
    for n in range(150):
        if live and rng.random() < 0.4:  # a near-copy of an earlier entry
            base = rng.choice(live)
            kept = sorted(base.tokens)[: max(1, len(base.tokens) - rng.randint(0, 2))]
            text = " ".join(kept + rng.sample(words, rng.randint(0, 2)))
        else:
            text = " ".join(rng.sample(words, rng.randint(3, 9)))
        live.append(entry(f"e{n:03d}", text, reviewed=False, category=rng.choice(["a", "b"])))
    parent = {e.id: e.id for e in live}

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for x, y in itertools.combinations(live, 2):
        if x.scope == y.scope and jaccard(x.tokens, y.tokens) >= 0.60:
            parent[find(x.id)] = find(y.id)
    groups: dict[str, list[str]] = {}
    for e in live:
        groups.setdefault(find(e.id), []).append(e.id)
    expected = sorted(tuple(sorted(g)) for g in groups.values() if len(g) > 1)
    assert expected, "the random corpus should contain near-duplicates"
    assert near_duplicate_clusters(live) == expected


def test_the_cap_keeps_clusters_whole_and_defers_the_rest():
    live = [entry("a", DUP_A, reviewed=False), entry("b", DUP_B, reviewed=False)]
    live += [entry(f"s{n}", f"note{n} topic{n} place{n}", reviewed=False) for n in range(5)]
    g = gate(live, {}, NOW, max_eligible=4)
    assert g.groups[0] == ("a", "b") and len(g.eligible) == 4 and g.deferred == 3


def test_batches_never_split_a_group_and_hints_are_groups_of_three():
    batches = pack_batches([("a", "b", "c"), ("d",), ("e", "f")], 3)
    assert batches == [["a", "b", "c"], ["d", "e", "f"]]
    assert shown_hints(list("abcdefg")) == [("a", "b", "c"), ("d", "e", "f"), ("g",)]
    assert cluster_key(["b", "a"]) == cluster_key(["a", "b"])


def test_cosine_pairs_stay_within_a_top_level_category_and_reach_the_threshold():
    import numpy as np

    from dreamkeeper.policies.gating import cosine_pairs

    near = np.array([0.6, 0.8, 0.0])
    entries = [
        entry("a", "x", reviewed=True),
        entry("b", "y", reviewed=True),
        entry("c", "z", reviewed=True, category="finance"),
        entry("d", "w", reviewed=True),
        entry("e", "v", reviewed=True),
    ]
    vectors = {
        "a": np.array([1.0, 0.0, 0.0]),
        "b": near,
        "c": np.array([1.0, 0.0, 0.0]),
        "d": np.array([0.0, 0.0, 1.0]),
        "e": np.array([0.95, 0.3122, 0.0]),
    }
    unit = {k: v / np.linalg.norm(v) for k, v in vectors.items()}
    # a·e = 0.95, e·b = 0.82; c is in another category; d is orthogonal.
    assert sorted(cosine_pairs(entries, unit, block=2)) == [("a", "e")]
    assert sorted(cosine_pairs(entries, unit, threshold=0.8)) == [("a", "e"), ("b", "e")]


def test_embedded_pairs_are_judged_by_cosine_alone():
    a, b = entry("a", DUP_A, reviewed=True), entry("b", DUP_B, reviewed=True)
    assert near_duplicate_clusters([a, b]) == [("a", "b")]  # Jaccard says duplicates
    assert near_duplicate_clusters([a, b], embedded=frozenset({"a", "b"})) == []
    assert near_duplicate_clusters([a, b], embedded=frozenset({"a"})) == [("a", "b")]
    together = near_duplicate_clusters(
        [a, b], embedded=frozenset({"a", "b"}), extra_pairs=[("a", "b")]
    )
    assert together == [("a", "b")]
