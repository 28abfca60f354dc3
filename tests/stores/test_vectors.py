"""The vector file format and the in-memory index."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dreamkeeper.stores.search.fusion import (
    RRF_K,
    fuse,
    reciprocal_ranks,
    semantic_evidence,
    tail_surprise,
)
from dreamkeeper.stores.vectors.vectors import (
    HEADER_BYTES,
    VectorIndex,
    decode_vector,
    encode_vector,
)

FP = "0123456789abcdef"
MODEL = b"mdl1"


def test_a_vector_round_trips_as_little_endian_float32_after_its_header():
    vector = np.array([0.5, -1.25, 3.0], dtype=np.float32)
    data = encode_vector(vector, FP, MODEL)
    assert len(data) == HEADER_BYTES + 3 * 4
    assert data[HEADER_BYTES:] == vector.astype("<f4").tobytes()
    assert np.array_equal(decode_vector(data, FP, MODEL), vector)


@pytest.mark.parametrize(
    "fingerprint, model, dim, cut",
    [
        ("fedcba9876543210", MODEL, None, 0),  # made from other content
        (FP, b"mdl2", None, 0),  # another model
        (FP, MODEL, 4, 0),  # another dimension
        (FP, MODEL, None, 2),
    ],  # truncated file
)
def test_stale_foreign_or_malformed_vectors_are_refused(fingerprint, model, dim, cut):
    data = encode_vector(np.ones(3, dtype=np.float32), FP, MODEL)
    assert decode_vector(data[: len(data) - cut], fingerprint, model, dim) is None


def test_the_index_grows_reuses_rows_and_tracks_liveness():
    index = VectorIndex(4)
    rng = np.random.default_rng(0)
    for i in range(200):  # past the initial capacity, twice
        index.put(f"e{i}", rng.standard_normal(4), live=i % 2 == 0)
    target = np.array([1.0, 0.0, 0.0, 0.0])
    index.put("exact", target * 3)
    assert index.similar(target, 0.999) == {"exact": pytest.approx(1.0)}
    index.put("archived", target, live=False)
    assert "archived" not in index.similar(target, 0.999)
    assert "archived" in index.similar(target, 0.999, include_archived=True)
    index.remove("exact")
    assert "exact" not in index.similar(target, 0.999) and len(index) == 201
    index.put("reuses-a-row", target)
    assert index.similar(target, 0.999) == {"reuses-a-row": pytest.approx(1.0)}
    assert np.linalg.norm(index.get("e3")) == pytest.approx(1.0)  # rows are unit length
    with pytest.raises(ValueError):
        index.put("wrong", np.ones(5))


def test_reciprocal_ranks_share_the_best_rank_among_equal_scores():
    scores = np.array([3.0, 5.0, 3.0, 0.0, 1.0])
    got = reciprocal_ranks(scores, scores > 0)
    k = RRF_K
    assert got.tolist() == pytest.approx([1 / (k + 2), 1 / (k + 1), 1 / (k + 2), 0.0, 1 / (k + 4)])


def test_fusion_adds_lexical_and_semantic_evidence_in_nats():
    population = np.array([0.0, 0.1, 0.1, 0.2, 0.2, 0.2, 0.3, 0.3, 0.4])  # median .2, MAD .1
    keyword = np.array([5.0, 0.0, 2.5])
    cosine = np.array([np.nan, 0.9, 0.2])
    got = fuse(keyword, cosine, population, dim=384)
    z = (0.9 - 0.2) / (1.4826 * 0.1)
    tail = -math.log(0.5 * math.erfc(z / math.sqrt(2)))
    assert got.tolist() == pytest.approx([5.0 / 2.5, tail, 1.0 + math.log(2)], rel=1e-6)


def test_semantic_evidence_never_divides_by_a_spread_below_random_directions():
    population = np.full(5, 0.2)  # MAD 0: the floor 1/sqrt(dim) is used
    got = semantic_evidence(np.array([0.2 + 2 / math.sqrt(64)]), population, dim=64)
    assert got[0] == pytest.approx(-math.log(0.5 * math.erfc(2 / math.sqrt(2))), rel=1e-6)
    assert semantic_evidence(np.array([np.nan]), population, 64).tolist() == [0.0]


def test_tail_surprise_matches_the_normal_tail():
    for z in (-5.0, -1.0, 0.0, 0.5, 2.0, 6.0, 12.0):
        expected = -math.log(0.5 * math.erfc(z / math.sqrt(2)))
        assert tail_surprise(np.array([z]))[0] == pytest.approx(expected, rel=1e-6, abs=1e-12)
    assert tail_surprise(np.array([60.0]))[0] == pytest.approx(
        1800 + math.log(60 * math.sqrt(2 * math.pi)), rel=1e-6
    )


def test_fusion_boosts_are_bounded():
    from datetime import UTC, datetime

    keyword, cosine, population = np.array([1.0, 1.0]), np.array([0.5, 0.5]), np.zeros(10)
    base = fuse(keyword, cosine, population, 8)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    boosted = fuse(
        keyword,
        cosine,
        population,
        8,
        importance=np.array([1.0, 0.0]),
        last_seen=np.array([now.timestamp(), 0.0]),
        now=now,
    )
    assert boosted[0] == pytest.approx(base[0] * 1.1)  # most important, seen now
    assert boosted[1] == pytest.approx(base[1] * 0.9 * 0.9, rel=1e-6)  # least, seen long ago
