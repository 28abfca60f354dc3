"""Hybrid ranking: one rule for long-term and working memory.

Both legs score the same candidates — every entry that shares a query term or whose
vector reaches the minimum similarity (the union of both legs' hits) — and each score is
turned into evidence in one unit, nats of surprise against what a random entry would
score for this query. Independent evidence adds:

    fused(d) = lexical(d) + semantic(d)

  - lexical = BM25 / (k1 + 1), phrase bonus included. Lucene's idf, ln(1 + (N − n + 0.5)
    / (n + 0.5)) ≈ −ln P(an entry holds the term), is the surprise of a match in nats,
    and BM25's term-frequency factor tf · (k1 + 1) / (tf + K) approaches k1 + 1 from
    below, so each matched term contributes at most its idf. A match on a word most
    entries share adds almost nothing; one on a rare word adds a lot.
  - semantic = −ln P(Z ≥ z), the upper tail of a standard normal, where
    z = (cosine − median) / (1.4826 · MAD) over every entry in scope that has a vector
    (MAD: median absolute deviation; 1.4826 makes it a standard deviation for normal
    data). Most entries are unrelated to any one query, so the median and MAD describe
    the unrelated ones — for whichever model made the vectors, whatever its cosine
    baseline — and an entry's z says how far it stands out of them. The spread is never
    taken below 1 / √dimension, the cosine spread of random directions, so a tiny store
    does not inflate z. Past 2,048 entries both are taken over an even stride of them
    (a robust estimate needs no more; it keeps a 100k store's search fast). No vector: 0.

No leg is divided by its top score (one short entry cannot set the scale), and a second
leg can only add: an entry sharing a common word with the query gains a little, never
loses. Reciprocal-rank fusion, the other candidate, ignores how strong a match is: the
best BM25 entry gets a full rank's weight even when all it shares is a common word, so it
buries meaning-only matches. On LoCoMo (bench/recall.py) this rule beats reciprocal-rank
fusion (k = 60) of the same two legs in every question kind, one entry per turn and per
fact. Its constants are the formulas' own (k1, the normal consistency factor 1.4826),
none fitted to a data set.

Then two bounded boosts, for entries that carry them:
  - importance (long-term memory): × (0.9 + 0.2 · importance), 0.9 to 1.1;
  - recency: × (0.9 + 0.1 · 0.5^(days since last seen / 90)), above 0.9 and at most 1.
Ties are broken by the caller: last seen (newest first), then content, then id.

`reciprocal_ranks` (k = 60, Cormack et al. 2009) is kept for the benchmark's baseline.
"""

from __future__ import annotations

import math
from datetime import datetime

import numpy as np

from dreamkeeper.stores.search.bm25 import K1

RRF_K = 60
MAD_TO_SD = 1.4826
NULL_SAMPLE = 2048  # entries the median and MAD are taken over, at most
IMPORTANCE_SPAN = 0.2  # × (1 − span/2 + span · importance)
RECENCY_SPAN = 0.1  # × (1 − span + span · 0.5^(age / half-life))
RECENCY_HALF_LIFE_DAYS = 90.0
_LN2 = math.log(2.0)
# erfc(x) = t · exp(−x² + P(t)), t = 1 / (1 + x/2), x ≥ 0: Numerical Recipes' erfcc,
# fractional error below 1.2e-7 everywhere; kept in log form so it never underflows.
_ERFC = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)


def _log_erfc(x: np.ndarray) -> np.ndarray:
    """ln erfc(x) for x ≥ 0."""
    t = 1.0 / (1.0 + 0.5 * x)
    poly = np.zeros_like(x)
    for c in reversed(_ERFC[1:]):
        poly = (poly + c) * t
    return np.log(t) - x * x + _ERFC[0] + poly


def tail_surprise(z: np.ndarray) -> np.ndarray:
    """−ln P(Z ≥ z) for a standard normal Z, in nats (ln 2 at z = 0)."""
    z = np.asarray(z, dtype=np.float64)
    log_erfc = _log_erfc(np.abs(z) / math.sqrt(2.0))
    upper = _LN2 - log_erfc  # z ≥ 0: −ln(erfc(x) / 2)
    lower = -np.log1p(-0.5 * np.exp(log_erfc))  # z < 0: −ln(1 − erfc(x) / 2)
    return np.where(z >= 0, upper, lower)


# −ln P(Z ≥ z) tabulated every 0.001 on [−9, 38] and interpolated (error below 1e-7 nats,
# monotone like the function): the exact formula over thousands of candidates was a
# tenth of a hybrid search. Past 38: z²/2 + ln(z·√(2π)), exact to 1e-3 there and beyond.
_TAIL_LO, _TAIL_HI, _TAIL_STEP = -9.0, 38.0, 0.001
_TAIL_Z = np.linspace(_TAIL_LO, _TAIL_HI, int(round((_TAIL_HI - _TAIL_LO) / _TAIL_STEP)) + 1)
_TAIL_NATS = tail_surprise(_TAIL_Z)


def _fast_tail(z: np.ndarray) -> np.ndarray:
    at = (np.clip(z, _TAIL_LO, _TAIL_HI) - _TAIL_LO) * (1 / _TAIL_STEP)
    i = np.minimum(at.astype(np.int64), _TAIL_NATS.size - 2)
    out = _TAIL_NATS[i] + (at - i) * (_TAIL_NATS[i + 1] - _TAIL_NATS[i])
    far = z > _TAIL_HI
    if far.any():
        out[far] = z[far] ** 2 / 2 + np.log(z[far] * math.sqrt(2 * math.pi))
    return out


def semantic_evidence(cosine: np.ndarray, population: np.ndarray, dim: int) -> np.ndarray:
    """Nats for each cosine (NaN: no vector → 0), against the query's cosines with every
    entry in scope (`population`)."""
    cosine = np.asarray(cosine, dtype=np.float64)
    out = np.zeros(cosine.shape, dtype=np.float64)
    population = np.asarray(population)
    if population.size > NULL_SAMPLE:
        population = population[:: -(-population.size // NULL_SAMPLE)]  # an even stride
    population = population[~np.isnan(population)]
    have = ~np.isnan(cosine)
    if population.size == 0 or not have.any():
        return out
    median = _median(population)
    spread = MAD_TO_SD * _median(np.abs(population - median))
    spread = max(spread, 1.0 / math.sqrt(max(dim, 1)))
    out[have] = _fast_tail((cosine[have] - median) / spread)
    return out


def _median(values: np.ndarray) -> float:
    """The median (mean of the two middle values for an even count)."""
    n = values.size
    middle = np.partition(values, [(n - 1) // 2, n // 2])
    return 0.5 * (float(middle[(n - 1) // 2]) + float(middle[n // 2]))


def lexical_evidence(keyword: np.ndarray) -> np.ndarray:
    """BM25 (phrase bonus included) in nats: at most each matched term's idf."""
    return np.asarray(keyword, dtype=np.float64) / (K1 + 1)


def fuse(
    keyword: np.ndarray,
    cosine: np.ndarray,
    population: np.ndarray,
    dim: int,
    *,
    importance: np.ndarray | None = None,
    last_seen: np.ndarray | None = None,
    now: datetime | None = None,
) -> np.ndarray:
    """Fused scores of candidates, per the module's rule. `keyword`: BM25 (0 = no query
    term); `cosine`: per candidate (NaN = no vector); `population`: the query's cosine
    with every entry in scope; `importance` in [0, 1]; `last_seen` POSIX seconds."""
    fused = lexical_evidence(keyword) + semantic_evidence(cosine, population, dim)
    return fused * boosts(fused.size, importance=importance, last_seen=last_seen, now=now)


def boosts(
    n: int,
    *,
    importance: np.ndarray | None = None,
    last_seen: np.ndarray | None = None,
    now: datetime | None = None,
) -> np.ndarray:
    factor = np.ones(n, dtype=np.float64)
    if importance is not None:
        factor *= 1 - IMPORTANCE_SPAN / 2 + IMPORTANCE_SPAN * np.clip(importance, 0.0, 1.0)
    if last_seen is not None and now is not None:
        age_days = np.maximum(0.0, (now.timestamp() - np.asarray(last_seen)) / 86_400)
        factor *= 1 - RECENCY_SPAN + RECENCY_SPAN * 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS)
    return factor


def reciprocal_ranks(scores: np.ndarray, present: np.ndarray, k: int = RRF_K) -> np.ndarray:
    """1 / (k + rank) for the present entries, ranked by score descending (rank 1 is the
    best; equal scores share the best rank among them); 0 for the rest."""
    out = np.zeros(scores.shape, dtype=np.float64)
    idx = np.nonzero(present)[0]
    if idx.size == 0:
        return out
    values = scores[idx]
    order = np.argsort(-values, kind="stable")
    ordered = values[order]
    first = np.ones(ordered.size, dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    ranks = np.maximum.accumulate(np.where(first, np.arange(1, ordered.size + 1), 0))
    out[idx[order]] = 1.0 / (k + ranks)
    return out
