"""Candidate gating: which live entries a consolidation cycle may show the LLM.

An entry is eligible when it was never reviewed or its content changed since (its
fingerprint differs from the review stamp), plus every member of a near-duplicate
cluster containing such an entry. A cluster whose members are all reviewed and
unchanged is *settled*: it reopens merge-only after 7 days × 2^(declines−1), capped at
56 days, at most 10 a cycle. If clustering fails, only unreviewed entries are eligible —
never the whole corpus. Review state is a content fingerprint, not a timestamp, so a
decay pass (which rewrites importance and updatedAt but not content) does not leak an
entry back through the gate.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from math import ceil

import numpy as np

from dreamkeeper.policies.dedup import (
    COSINE_THRESHOLD,
    JACCARD_THRESHOLD,
    bypasses_dedup,
    jaccard,
)

REOPEN_BASE = timedelta(days=7)
REOPEN_CAP = timedelta(days=56)
MAX_REOPEN_PER_CYCLE = 10
MAX_SHOWN_CLUSTER = 3  # bounds the duplicate hints in a prompt, not a merge's fan-in


@dataclass(frozen=True)
class GateEntry:
    """What gating needs to know of a live entry: no content beyond its tokens."""

    id: str
    category: str | None
    fingerprint: str
    reviewed_hash: str | None
    tokens: frozenset[str]

    @property
    def unreviewed(self) -> bool:
        return self.reviewed_hash != self.fingerprint

    @property
    def scope(self) -> str | None:
        return None if self.category is None else self.category.split("/", 1)[0].lower()


@dataclass(frozen=True)
class SettledCluster:
    members: tuple[str, ...]
    declines: int
    settled_at: datetime

    @property
    def key(self) -> str:
        return cluster_key(self.members)


def cluster_key(members: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(sorted(members)).encode()).hexdigest()[:16]


def reopen_delay(declines: int) -> timedelta:
    # The exponent is capped before the multiplication: a huge count (a hand-edited
    # clusters file) must give the cap, not an OverflowError.
    return min(REOPEN_CAP, REOPEN_BASE * 2 ** min(max(0, declines - 1), 16))


def cosine_pairs(
    entries: Sequence[GateEntry],
    vectors: Mapping[str, np.ndarray],
    *,
    threshold: float = COSINE_THRESHOLD,
    block: int = 1024,
) -> list[tuple[str, str]]:
    """Pairs in the same top-level category, both with a (unit) vector, whose cosine
    reaches `threshold`. Blockwise matrix products per category: memory stays bounded."""
    by_scope: dict[str | None, list[str]] = defaultdict(list)
    for entry in entries:
        if entry.id in vectors and not bypasses_dedup(entry.category):
            by_scope[entry.scope].append(entry.id)
    pairs: list[tuple[str, str]] = []
    for ids in by_scope.values():
        if len(ids) < 2:
            continue
        matrix = np.stack([vectors[i] for i in ids]).astype(np.float32)
        for start in range(0, len(ids), block):
            sims = matrix[start : start + block] @ matrix.T
            rows, cols = np.nonzero(sims >= threshold)
            for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
                if start + r < c:
                    pairs.append((ids[start + r], ids[c]))
    return pairs


def near_duplicate_clusters(
    entries: Sequence[GateEntry],
    *,
    threshold: float = JACCARD_THRESHOLD,
    extra_pairs: Sequence[tuple[str, str]] = (),
    embedded: frozenset[str] = frozenset(),
) -> list[tuple[str, ...]]:
    """Single-link clusters (two or more members) of entries in the same top-level
    category whose content-token Jaccard reaches `threshold`, plus any `extra_pairs`
    (cosine neighbours). A pair of which both are `embedded` is judged by cosine alone
    (its extra pair), not by Jaccard. Sorted members, clusters by their first member.

    All-pairs with prefix filtering: order each token set rarest-first; two sets with
    Jaccard ≥ t must share a token among the first |x| − ceil(t·|x|) + 1 of either, so
    only pairs sharing a prefix token are compared — exact, and far below n².
    """
    pool = [e for e in entries if e.tokens and not bypasses_dedup(e.category)]
    frequency = Counter(t for e in pool for t in e.tokens)
    parent = {e.id: e.id for e in entries}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    postings: dict[tuple[str | None, str], list[int]] = defaultdict(list)
    for i, entry in enumerate(pool):
        ordered = sorted(entry.tokens, key=lambda t: (frequency[t], t))
        prefix = len(ordered) - ceil(threshold * len(ordered)) + 1
        seen: set[int] = set()
        for token in ordered[:prefix]:
            for j in postings[(entry.scope, token)]:
                if j in seen:
                    continue
                seen.add(j)
                if entry.id in embedded and pool[j].id in embedded:
                    continue
                if jaccard(entry.tokens, pool[j].tokens) >= threshold:
                    union(entry.id, pool[j].id)
            postings[(entry.scope, token)].append(i)
    for a, b in extra_pairs:
        if a in parent and b in parent:
            union(a, b)
    groups: dict[str, list[str]] = defaultdict(list)
    for entry in entries:
        groups[find(entry.id)].append(entry.id)
    return sorted(tuple(sorted(g)) for g in groups.values() if len(g) > 1)


@dataclass(frozen=True)
class Gate:
    groups: tuple[tuple[str, ...], ...]  # eligible ids; a cluster's members stay together
    merge_only: frozenset[str]  # members of reopened settled clusters: no standalone prune
    clusters: tuple[tuple[str, ...], ...]  # the clusters shown this cycle
    total: int
    withheld: int  # reviewed, unchanged and in no open cluster
    deferred: int = 0  # eligible, but past this cycle's cap: next cycle
    reopened: int = 0
    clustering_failed: str | None = None
    settled: tuple[SettledCluster, ...] = field(default=())  # records of current clusters

    @property
    def eligible(self) -> list[str]:
        return [i for g in self.groups for i in g]


def gate(
    entries: Sequence[GateEntry],
    settled: Mapping[str, SettledCluster],
    now: datetime,
    *,
    max_eligible: int = 400,
    max_reopen: int = MAX_REOPEN_PER_CYCLE,
    clusters: Callable[[Sequence[GateEntry]], list[tuple[str, ...]]] = near_duplicate_clusters,
) -> Gate:
    changed = {e.id for e in entries if e.unreviewed}
    try:
        found = clusters(entries)
    except Exception as exc:  # noqa: BLE001 — degrade to unreviewed-only, never widen
        unreviewed = tuple((i,) for i in sorted(changed))
        kept = _cap(unreviewed, max_eligible)
        return Gate(
            groups=kept,
            merge_only=frozenset(),
            clusters=(),
            total=len(entries),
            withheld=len(entries) - len(changed),
            deferred=len(changed) - _size(kept),
            clustering_failed=f"{type(exc).__name__}: {exc}",
        )
    open_clusters, due, current = [], [], []
    for members in found:
        record = settled.get(cluster_key(members))
        if record is not None:
            current.append(record)  # still a cluster: keep its decline history
        if any(m in changed for m in members):
            open_clusters.append(members)
            continue
        # now − settled_at, not settled_at + delay: the subtraction of two times never
        # overflows, whatever time a clusters file holds.
        if record is None or now - record.settled_at >= reopen_delay(record.declines):
            due.append(
                (record.settled_at if record else datetime.min.replace(tzinfo=now.tzinfo), members)
            )
    due.sort()
    reopened = [members for _, members in due[:max_reopen]]
    in_clusters = {m for c in open_clusters + reopened for m in c}
    singles: list[tuple[str, ...]] = [(i,) for i in sorted(changed - in_clusters)]
    groups = tuple(open_clusters) + tuple(reopened) + tuple(singles)
    kept = _cap(groups, max_eligible)
    kept_ids = {i for g in kept for i in g}
    eligible_total = _size(groups)
    return Gate(
        groups=kept,
        merge_only=frozenset(m for c in reopened for m in c if m in kept_ids),
        clusters=tuple(c for c in open_clusters + reopened if c[0] in kept_ids),
        total=len(entries),
        withheld=len(entries) - eligible_total,
        deferred=eligible_total - len(kept_ids),
        reopened=sum(1 for c in reopened if c[0] in kept_ids),
        settled=tuple(current),
    )


def _size(groups: Sequence[tuple[str, ...]]) -> int:
    return sum(len(g) for g in groups)


def _cap(groups: Sequence[tuple[str, ...]], limit: int) -> tuple[tuple[str, ...], ...]:
    """Whole groups while they fit; the first group always (a cluster is never split)."""
    kept: list[tuple[str, ...]] = []
    size = 0
    for g in groups:
        if kept and size + len(g) > limit:
            continue
        kept.append(g)
        size += len(g)
    return tuple(kept)


def shown_hints(cluster: Sequence[str]) -> list[tuple[str, ...]]:
    """A cluster as duplicate hints of at most MAX_SHOWN_CLUSTER ids each."""
    ids = list(cluster)
    return [tuple(ids[i : i + MAX_SHOWN_CLUSTER]) for i in range(0, len(ids), MAX_SHOWN_CLUSTER)]


def pack_batches(groups: Sequence[tuple[str, ...]], batch_size: int) -> list[list[str]]:
    """Batches of about `batch_size` ids; a group is never split across batches."""
    batches: list[list[str]] = []
    current: list[str] = []
    for g in groups:
        if current and len(current) + len(g) > batch_size:
            batches.append(current)
            current = []
        current.extend(g)
    if current:
        batches.append(current)
    return batches


def settle_clusters(
    records: Mapping[str, SettledCluster],
    *,
    merged: Sequence[Sequence[str]],
    declined: Sequence[Sequence[str]],
    as_of: datetime,
) -> dict[str, SettledCluster]:
    """Cluster records after a cycle: merged clusters are forgotten, declined ones
    settle with one more decline — once per cycle, so a retried stamp counts once."""
    out = dict(records)
    for members in merged:
        out.pop(cluster_key(members), None)
    for members in declined:
        key = cluster_key(members)
        previous = out.get(key)
        if previous is not None and previous.settled_at == as_of:
            continue
        declines = (previous.declines if previous else 0) + 1
        out[key] = SettledCluster(tuple(sorted(members)), declines, as_of)
    return out
